"""`openflow schedules ...`: the Temporal Schedules of the catalog's workflows."""

from __future__ import annotations

import argparse
import json
from collections.abc import Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import Any

from openflow.catalog import Catalog, CatalogError
from openflow.cli.common import EXIT_OK, BadInput, connect_runs, run_main
from openflow.cli.runs import run_ui_url
from openflow.paths import openflow_home
from openflow.schedules import ScheduleError, Schedules, ScheduleSummary


def add_schedules_command(commands: Any) -> None:
    """Register `openflow schedules` and its actions."""
    schedules = commands.add_parser(
        "schedules",
        help="the Temporal Schedules of scheduled workflows",
        description="List, sync, pause, unpause and trigger the schedules of the workflows "
        "whose settings.schedule is set (openflow-schedule-<workflow_id>).",
    )
    actions = schedules.add_subparsers(
        title="actions", dest="action", metavar="ACTION", parser_class=type(schedules)
    )
    actions.required = True
    listing = actions.add_parser("list", help="one schedule a line")
    listing.add_argument("--json", action="store_true", help="print the schedules as JSON")
    listing.set_defaults(handler=cmd_schedules_list)
    sync = actions.add_parser(
        "sync",
        help="bring every schedule in line with the catalog",
        description="Create missing schedules, update changed ones and delete those whose "
        "workflow is gone or has no schedule any more.",
    )
    sync.add_argument(
        "--project", type=Path, metavar="DIR", help="also the workflows of this project"
    )
    sync.set_defaults(handler=cmd_schedules_sync)
    for name, handler, what in (
        ("pause", cmd_schedules_pause, "pause a schedule (until unpaused or saved again)"),
        ("unpause", cmd_schedules_unpause, "unpause a schedule"),
        ("trigger", cmd_schedules_trigger, "start a scheduled run now"),
    ):
        action = actions.add_parser(name, help=what)
        action.add_argument("name", metavar="ID", help="the workflow id (or the schedule id)")
        action.set_defaults(handler=handler)


def run_schedules(main: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine; a schedule or catalog problem is one line and exit 2."""
    try:
        return run_main(main)
    except (ScheduleError, CatalogError) as exc:
        raise BadInput(str(exc)) from None


def check_name(name: str) -> str:
    if not name.strip() or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise BadInput(
            f"ID {name!r} is not an id: give a workflow id (see `openflow schedules list`)"
        )
    return name


def schedule_ui_url(sid: str) -> str:
    """The schedule's page in the Temporal Web UI."""
    base, _, _ = run_ui_url("x").rpartition("/workflows/")
    return f"{base}/schedules/{sid}"


def _line(summary: ScheduleSummary) -> str:
    state = "paused" if summary.paused else "active"
    after = f"  next {summary.next_runs[0]}" if summary.next_runs and not summary.paused else ""
    return (
        f"{summary.schedule_id}  {summary.workflow_id}  {summary.cron!r} {summary.timezone}  "
        f"{state}{after}"
    )


def cmd_schedules_list(args: argparse.Namespace) -> int:
    """`openflow schedules list`: one schedule a line, or --json."""

    async def main() -> int:
        summaries = await Schedules(await connect_runs()).list()
        if args.json:
            print(json.dumps([asdict(s) for s in summaries], indent=2, ensure_ascii=False))
            return EXIT_OK
        for summary in summaries:
            print(_line(summary))
        return EXIT_OK

    return run_schedules(main())


def cmd_schedules_sync(args: argparse.Namespace) -> int:
    """`openflow schedules sync`: create missing, update changed, delete orphaned schedules."""
    project = None
    if args.project is not None:
        if not args.project.is_dir():
            raise BadInput(f"--project {args.project}: no such folder — give an existing folder")
        project = args.project.resolve()

    async def main() -> int:
        schedules = Schedules(await connect_runs())
        report = await schedules.sync(Catalog(openflow_home()), prefer=project)
        for verb, ids in (
            ("created", report.created),
            ("updated", report.updated),
            ("deleted", report.deleted),
            ("skipped (another catalog holds it)", report.skipped),
        ):
            for sid in ids:
                print(f"{verb} {sid}")
        for line in report.invalid:
            print(f"left alone {line}")
        print(
            f"{len(report.created)} created, {len(report.updated)} updated, "
            f"{len(report.deleted)} deleted, {len(report.unchanged)} unchanged"
        )
        return EXIT_OK

    return run_schedules(main())


def cmd_schedules_pause(args: argparse.Namespace) -> int:
    return _by_hand(args, "pause", "paused")


def cmd_schedules_unpause(args: argparse.Namespace) -> int:
    return _by_hand(args, "unpause", "unpaused")


def cmd_schedules_trigger(args: argparse.Namespace) -> int:
    return _by_hand(args, "trigger", "triggered")


def _by_hand(args: argparse.Namespace, verb: str, done: str) -> int:
    name = check_name(args.name)

    async def main() -> int:
        schedules = Schedules(await connect_runs())
        sid = await getattr(schedules, verb)(name)
        note = " (skipped if its last run is still going)" if verb == "trigger" else ""
        print(f"{done} {sid}{note}")
        return EXIT_OK

    return run_schedules(main())


__all__ = [
    "add_schedules_command",
    "check_name",
    "cmd_schedules_list",
    "cmd_schedules_pause",
    "cmd_schedules_sync",
    "cmd_schedules_trigger",
    "cmd_schedules_unpause",
    "run_schedules",
    "schedule_ui_url",
]
