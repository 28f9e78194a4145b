"""`openflow workflows ...`: the workflow catalog, with each workflow's schedule kept in line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from openflow.catalog import Catalog, CatalogError, WorkflowNotFoundError
from openflow.cli.common import EXIT_OK, BadInput, connect_runs, load_valid_workflow
from openflow.cli.schedules import check_name, run_schedules, schedule_ui_url
from openflow.paths import openflow_home
from openflow.schedules import ScheduleInvalid, Schedules, schedule_id, schedule_settings


def add_workflows_command(commands: Any) -> None:
    """Register `openflow workflows` and its actions."""
    workflows = commands.add_parser(
        "workflows",
        help="the workflow catalog",
        description="List, save and delete the workflows of the catalog ($OPENFLOW_HOME/"
        "workflows.json and a project's .flow/workflows/). Saving or deleting a workflow "
        "creates, updates, pauses or deletes its schedule.",
    )
    actions = workflows.add_subparsers(
        title="actions", dest="action", metavar="ACTION", parser_class=type(workflows)
    )
    actions.required = True
    listing = actions.add_parser("list", help="one workflow a line")
    listing.add_argument("--project", type=Path, metavar="DIR", help="also this project's")
    listing.set_defaults(handler=cmd_workflows_list)
    save = actions.add_parser("save", help="save a workflow file into the catalog")
    save.add_argument("file", metavar="FILE", type=Path, help="the .workflow.json file")
    save.add_argument("--project", type=Path, metavar="DIR", help="save it in DIR/.flow/workflows/")
    save.set_defaults(handler=cmd_workflows_save)
    delete = actions.add_parser("delete", help="delete a workflow and its schedule")
    delete.add_argument("name", metavar="ID", help="the workflow id")
    delete.add_argument("--project", type=Path, metavar="DIR", help="also from this project")
    delete.set_defaults(handler=cmd_workflows_delete)


def _project(option: Path | None) -> Path | None:
    if option is None:
        return None
    if not option.is_dir():
        raise BadInput(f"--project {option}: no such folder — give an existing folder")
    return option.resolve()


def cmd_workflows_list(args: argparse.Namespace) -> int:
    """`openflow workflows list`: id, where it is kept, name and schedule, one a line."""
    catalog = Catalog(openflow_home(), _project(args.project))
    try:
        entries, skipped = catalog.entries(), catalog.skipped_files()
    except CatalogError as exc:
        raise BadInput(str(exc)) from None
    for entry in entries:
        setting = entry.workflow.settings.schedule
        when = "-"
        if setting is not None:
            when = f"{setting.cron!r} {setting.timezone or 'UTC'}"
            when += "" if setting.enabled else " (disabled)"
        print(f"{entry.workflow.id}  {entry.where:<7}  {entry.workflow.name}  {when}")
    for item in skipped:
        print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
    return EXIT_OK


def cmd_workflows_save(args: argparse.Namespace) -> int:
    """`openflow workflows save FILE`: validate, set its schedule, then save it."""
    workflow = load_valid_workflow(args.file)
    try:
        settings = schedule_settings(workflow)
    except ScheduleInvalid as exc:
        raise BadInput(f"{args.file}: {exc}") from None
    project = _project(args.project)
    catalog = Catalog(openflow_home(), project)

    async def main() -> int:
        schedules = Schedules(await connect_runs())
        await schedules.check_owner(workflow.id)
        # The schedule first: what Temporal refuses leaves the catalog untouched.
        done = await schedules.apply(workflow, str(project) if project else None)
        path = catalog.save(workflow, "project" if project else "app")
        print(f"saved {workflow.id} to {path}")
        sid = schedule_id(workflow.id)
        if settings is not None:
            state = "active" if settings.enabled else "paused: settings.schedule.enabled is false"
            print(f"schedule {sid} {done} ({state}): {schedule_ui_url(sid)}")
        elif done == "deleted":
            print(f"schedule {sid} deleted (the workflow has no schedule any more)")
        return EXIT_OK

    return run_schedules(main())


def cmd_workflows_delete(args: argparse.Namespace) -> int:
    """`openflow workflows delete ID`: the workflow and its schedule."""
    name = check_name(args.name)
    catalog = Catalog(openflow_home(), _project(args.project))

    async def main() -> int:
        schedules = Schedules(await connect_runs())
        await schedules.check_owner(name)
        try:
            catalog.delete(name)
            print(f"deleted {name}")
        except WorkflowNotFoundError:
            if not await schedules.remove(name):
                raise
            print(f"{name} was not in the catalog")
        else:
            if not await schedules.remove(name):
                return EXIT_OK
        print(f"schedule {schedule_id(name)} deleted")
        return EXIT_OK

    return run_schedules(main())


__all__ = [
    "add_workflows_command",
    "cmd_workflows_delete",
    "cmd_workflows_list",
    "cmd_workflows_save",
]
