"""A workflow's `settings.schedule` as one Temporal Schedule, kept in line with the catalog.

Each scheduled workflow has the Schedule `openflow-schedule-<workflow_id>`. Its action starts
`OpenFlowRun` with what `Runs.start_request` builds for a manual run (the same input, search
attributes and summary), so a scheduled run is an ordinary run; Temporal names it
`run-<workflow_id>-<due time>`. The action carries the workflow as it was saved: the workers
need no catalog of their own (in a deployment only the API's home holds it), and what a run
resolves when it starts (profiles, keys, saved agents, MCP tools) it still resolves then.
Saving the workflow again, or `sync` after a hand edit, replaces what the schedule carries.

Overlap policy skip: a due time (or a trigger) is skipped while the schedule's last run goes on.

Errors:

    ScheduleError           base
    ├── ScheduleInvalid     a cron expression, time zone or entrypoint that cannot be used
    ├── ScheduleNotFound    no schedule with that id (for this tenant)
    └── ScheduleConflict    the schedule id belongs to another tenant
"""

from __future__ import annotations

import builtins
import hashlib
import json
import re
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from openflow import contracts as c
from openflow.catalog import Catalog
from openflow.client import RunError, Runs
from openflow.engine.errors import LimitExceeded
from openflow.engine.limits import check_entrypoint
from openflow.engine.spec import Workflow

SCHEDULE_PREFIX = "openflow-schedule-"
#: The memo key (on the schedule and on its action) holding what OpenFlow knows of it.
META_KEY = "openflow"
DISABLED_NOTE = "disabled in the workflow's settings (settings.schedule.enabled is false)"
PAUSED_NOTE = "paused with openflow schedules pause"


class ScheduleError(Exception):
    """Something about a schedule that the caller can act on."""


class ScheduleInvalid(ScheduleError):
    """The workflow's `settings.schedule` cannot be used; the message names the workflow."""


class ScheduleNotFound(ScheduleError):
    pass


class ScheduleConflict(ScheduleError):
    pass


def schedule_id(workflow_id: str) -> str:
    """The Temporal Schedule of a workflow."""
    return f"{SCHEDULE_PREFIX}{workflow_id}"


def action_id(workflow_id: str) -> str:
    """The id a schedule's runs start from (Temporal appends the due time): a safe run id."""
    return "run-" + re.sub(r"[^A-Za-z0-9_.-]", "_", workflow_id)[:80]


# --- the setting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleSettings:
    """A workflow's schedule, checked: a 5-field cron, an IANA time zone (UTC when blank)."""

    cron: str
    timezone: str
    enabled: bool
    entrypoint: str = ""


_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_ITEM = re.compile(r"^(?P<range>\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>\d+))?$")


def cron_problem(expression: str) -> str | None:
    """Why `expression` is not a 5-field cron (minute hour day-of-month month day-of-week)."""
    fields = expression.split()
    if len(fields) != 5:
        return f"it has {len(fields)} field{'' if len(fields) == 1 else 's'}, not 5"
    for text, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        for item in text.split(","):
            match = _ITEM.match(item)
            if match is None:
                return f"the {name} field {text!r} is not a value, range, list or step"
            step = match["step"]
            if step is not None and int(step) < 1:
                return f"the {name} field {text!r} has a step of 0"
            part = match["range"]
            if part == "*":
                continue
            for bound in part.split("-"):
                value = _cron_value(bound, names)
                if value is None or not low <= value <= high:
                    return f"the {name} {bound!r} is not in {low}-{high}"
    return None


def _cron_value(text: str, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        return int(text)
    upper = text.upper()
    if upper in names:
        return names.index(upper) + (1 if len(names) == 12 else 0)
    return None


def timezone_problem(name: str) -> str | None:
    """Why `name` is not a time zone the schedule can use (blank is UTC)."""
    if not name.strip():
        return None
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return f"{name!r} is not a known time zone"
    return None


def schedule_settings(workflow: Workflow) -> ScheduleSettings | None:
    """The workflow's schedule, or None without one; ScheduleInvalid names what to fix."""
    setting = workflow.settings.schedule
    if setting is None:
        return None
    where = f"workflow {workflow.id!r}: settings.schedule"
    problem = cron_problem(setting.cron)
    if problem is not None:
        raise ScheduleInvalid(
            f"{where}.cron {setting.cron!r} is not a 5-field cron expression ({problem}); "
            "write minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5'"
        )
    problem = timezone_problem(setting.timezone)
    if problem is not None:
        raise ScheduleInvalid(
            f"{where}.timezone: {problem}; give an IANA name such as 'Europe/Paris', or leave "
            "it blank for UTC"
        )
    entrypoint = (setting.model_extra or {}).get("entrypoint", "")
    if entrypoint is None:
        entrypoint = ""
    if not isinstance(entrypoint, str):
        raise ScheduleInvalid(f"{where}.entrypoint must be a text, not {type(entrypoint).__name__}")
    try:
        check_entrypoint(entrypoint)
    except LimitExceeded as exc:
        raise ScheduleInvalid(f"{where}.entrypoint: {exc}") from None
    return ScheduleSettings(
        cron=" ".join(setting.cron.split()),
        timezone=setting.timezone.strip() or "UTC",
        enabled=setting.enabled,
        entrypoint=entrypoint,
    )


def check_schedule(workflow: Workflow) -> None:
    """Raise ScheduleInvalid when the workflow's schedule cannot be used."""
    schedule_settings(workflow)


# --- what Temporal holds ----------------------------------------------------------------------


@dataclass
class ScheduleSummary:
    """One schedule as `openflow schedules list` and `GET /schedules` show it."""

    schedule_id: str
    workflow_id: str
    cron: str
    timezone: str
    paused: bool
    note: str
    project_dir: str | None
    entrypoint: str
    next_runs: list[str]
    recent_runs: list[str]
    running: list[str]
    skipped: int


@dataclass
class SyncReport:
    """What `sync` changed, by schedule id."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    #: Another catalog's schedule holds the id.
    skipped: list[str] = field(default_factory=list)
    #: "<schedule id>: <why>" for workflows that do not validate (their schedule is left alone).
    invalid: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Found:
    handle: ScheduleHandle
    description: ScheduleDescription
    meta: dict[str, Any]


class Schedules:
    """The schedules of one tenant's workflows, on the task queue its runs use."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.client = runs.client

    # --- from the catalog -------------------------------------------------------------------

    def build(self, workflow: Workflow, project_dir: str | None) -> tuple[Schedule, str] | None:
        """The Schedule a workflow asks for and its digest, or None without a schedule."""
        settings = schedule_settings(workflow)
        if settings is None:
            return None
        request = self.runs.start_request(
            workflow, settings.entrypoint, run_id="", project_dir=project_dir
        )
        digest = hashlib.sha256(
            json.dumps(
                {
                    "input": request.input.model_dump(mode="json"),
                    "settings": settings.__dict__,
                    "task_queue": self.runs.task_queue,
                },
                sort_keys=True,
            ).encode()
        ).hexdigest()
        meta = {
            "workflow_id": workflow.id,
            "tenant": self.runs.tenant,
            "project_dir": project_dir,
            "cron": settings.cron,
            "timezone": settings.timezone,
            "entrypoint": settings.entrypoint,
            "digest": digest,
        }
        schedule = Schedule(
            action=ScheduleActionStartWorkflow(
                c.WORKFLOW_NAME,
                request.input,
                id=action_id(workflow.id),
                task_queue=self.runs.task_queue,
                typed_search_attributes=request.search_attributes,
                static_summary=request.static_summary,
                task_timeout=c.WORKFLOW_TASK_TIMEOUT,
                memo={META_KEY: meta, **(request.memo or {})},
            ),
            spec=ScheduleSpec(cron_expressions=[settings.cron], time_zone_name=settings.timezone),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            state=ScheduleState(
                paused=not settings.enabled, note=None if settings.enabled else DISABLED_NOTE
            ),
        )
        return schedule, digest

    async def apply(self, workflow: Workflow, project_dir: str | None = None) -> str:
        """Create, update or delete the workflow's schedule as its settings say.

        Returns "created", "updated", "deleted" or "none" (no schedule, none to delete).
        """
        try:
            return await self._apply(workflow, project_dir)
        except RPCError as exc:
            if exc.status != RPCStatusCode.INVALID_ARGUMENT:
                raise
            raise ScheduleInvalid(
                f"workflow {workflow.id!r}: Temporal refused settings.schedule: {exc.message}"
            ) from None

    async def _apply(self, workflow: Workflow, project_dir: str | None) -> str:
        built = self.build(workflow, project_dir)
        found = await self._find(schedule_id(workflow.id))
        if built is None:
            if found is None:
                return "none"
            await found.handle.delete()
            return "deleted"
        schedule, _ = built
        if found is not None:
            await self._replace(found.handle, schedule)
            return "updated"
        try:
            await self.client.create_schedule(
                schedule_id(workflow.id),
                schedule,
                memo={META_KEY: {"workflow_id": workflow.id, "tenant": self.runs.tenant}},
            )
        except ScheduleAlreadyRunningError:
            # Created meanwhile by another save: that one is replaced by this one.
            found = await self._find(schedule_id(workflow.id))
            if found is None:
                raise
            await self._replace(found.handle, schedule)
            return "updated"
        return "created"

    async def check_owner(self, workflow_id: str) -> None:
        """Raise ScheduleConflict when another tenant's workflow holds this schedule id."""
        await self._find(schedule_id(workflow_id))

    async def remove(self, workflow_id: str) -> bool:
        """Delete the workflow's schedule; False when it has none."""
        found = await self._find(schedule_id(workflow_id))
        if found is None:
            return False
        await found.handle.delete()
        return True

    async def sync(
        self, catalog: Catalog, projects: Iterable[Path] = (), prefer: Path | None = None
    ) -> SyncReport:
        """Bring every schedule of this tenant and task queue in line with the catalog.

        The catalog is the app store of `catalog.home` and the project folders existing
        schedules came from, plus `projects`; a workflow in several of them keeps the source
        its schedule has, else `prefer`, else the app store.
        """
        report = SyncReport()
        existing: dict[str, _Found] = {}
        for sid in await self._listed_ids():
            found = await self._find(sid, quiet=True)
            if found is not None and self._ours(found):
                existing[sid] = found
        folders = {Path(p).resolve() for p in projects}
        folders |= {
            Path(f.meta["project_dir"]) for f in existing.values() if f.meta.get("project_dir")
        }
        if prefer is not None:
            folders.add(prefer.resolve())
        sources: dict[str, dict[str | None, Workflow]] = {}
        for wf in Catalog(catalog.home).list():
            sources.setdefault(wf.id, {})[None] = wf
        for folder in sorted(folders):
            for entry in Catalog(catalog.home, folder).entries():
                if entry.where == "project":
                    sources.setdefault(entry.workflow.id, {})[str(folder)] = entry.workflow
        desired: dict[str, tuple[Workflow, str | None]] = {}
        for wid, by_source in sorted(sources.items()):
            scheduled = {s: wf for s, wf in by_source.items() if wf.settings.schedule is not None}
            if not scheduled:
                continue
            had = existing.get(schedule_id(wid))
            choices = [had.meta.get("project_dir") if had else None]
            choices += [str(prefer.resolve()) if prefer is not None else None, None]
            source = next((s for s in choices if s in scheduled), sorted(scheduled, key=str)[0])
            desired[schedule_id(wid)] = (scheduled[source], source)
        for sid, (wf, source) in desired.items():
            try:
                built = self.build(wf, source)
            except (ScheduleInvalid, RunError) as exc:
                report.invalid.append(f"{sid}: {exc}")
                continue
            assert built is not None
            schedule, digest = built
            try:
                found = existing.get(sid) or await self._find(sid)
            except ScheduleConflict:
                report.skipped.append(sid)
                continue
            if found is None:
                await self.client.create_schedule(
                    sid,
                    schedule,
                    memo={META_KEY: {"workflow_id": wf.id, "tenant": self.runs.tenant}},
                )
                report.created.append(sid)
            elif found.meta.get("digest") != digest:
                await self._replace(found.handle, schedule)
                report.updated.append(sid)
            else:
                report.unchanged.append(sid)
        for sid, found in sorted(existing.items()):
            if sid not in desired:
                await found.handle.delete()
                report.deleted.append(sid)
        return report

    # --- by hand -----------------------------------------------------------------------------

    async def list(self) -> builtins.list[ScheduleSummary]:
        """This tenant's schedules (on every task queue), by id."""
        out: builtins.list[ScheduleSummary] = []
        for sid in await self._listed_ids():
            found = await self._find(sid, quiet=True)
            if found is not None:
                out.append(self._summary(found))
        return sorted(out, key=lambda s: s.schedule_id)

    async def get(self, name: str) -> ScheduleSummary:
        return self._summary(await self._named(name))

    async def pause(self, name: str) -> str:
        found = await self._named(name)
        await found.handle.pause(note=PAUSED_NOTE)
        return found.handle.id

    async def unpause(self, name: str) -> str:
        found = await self._named(name)
        await found.handle.unpause(note="unpaused with openflow schedules unpause")
        return found.handle.id

    async def trigger(self, name: str) -> str:
        """Start a run now, unless the schedule's last run is still going (overlap skip)."""
        found = await self._named(name)
        await found.handle.trigger()
        return found.handle.id

    # --- plumbing ----------------------------------------------------------------------------

    async def _named(self, name: str) -> _Found:
        """The schedule a workflow id (or a full schedule id) names; ScheduleNotFound."""
        ids = [schedule_id(name)]
        if name.startswith(SCHEDULE_PREFIX):
            ids.append(name)
        for sid in ids:
            found = await self._find(sid, quiet=True)
            if found is not None:
                return found
        raise ScheduleNotFound(f"no schedule for workflow {name!r}")

    async def _find(self, sid: str, quiet: bool = False) -> _Found | None:
        """The schedule `sid` when it exists; another tenant's raises ScheduleConflict, or is
        None when `quiet`."""
        handle = self.client.get_schedule_handle(sid)
        try:
            description = await handle.describe()
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return None
            raise
        owner = await description.memo_value(META_KEY, {})
        meta = await self._action_meta(description)
        tenant = (owner or {}).get("tenant", meta.get("tenant", ""))
        if tenant != self.runs.tenant:
            if quiet:
                return None
            raise ScheduleConflict(
                f"the schedule {sid!r} belongs to another workflow catalog; give the workflow "
                "another id"
            )
        return _Found(handle, description, meta)

    async def _action_meta(self, description: ScheduleDescription) -> dict[str, Any]:
        action = description.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow) or not action.memo:
            return {}
        payload = action.memo.get(META_KEY)
        if payload is None:
            return {}
        try:
            [value] = await self.client.data_converter.decode([payload])
        except Exception:  # noqa: BLE001 - a memo made by hand is no reason to fail a command
            return {}
        return value if isinstance(value, dict) else {}

    def _ours(self, found: _Found) -> bool:
        action = found.description.schedule.action
        return (
            isinstance(action, ScheduleActionStartWorkflow)
            and action.task_queue == self.runs.task_queue
        )

    async def _listed_ids(self) -> builtins.list[str]:
        ids: set[str] = set()
        async for entry in await self.client.list_schedules():
            if entry.id.startswith(SCHEDULE_PREFIX):
                ids.add(entry.id)
        return sorted(ids)

    async def _replace(self, handle: ScheduleHandle, schedule: Schedule) -> None:
        def updater(_: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=schedule)

        await handle.update(updater)

    def _summary(self, found: _Found) -> ScheduleSummary:
        description, meta = found.description, found.meta
        info, state = description.info, description.schedule.state
        spec = description.schedule.spec
        return ScheduleSummary(
            schedule_id=description.id,
            workflow_id=meta.get("workflow_id") or description.id.removeprefix(SCHEDULE_PREFIX),
            cron=meta.get("cron") or " | ".join(spec.cron_expressions),
            timezone=meta.get("timezone") or spec.time_zone_name or "UTC",
            paused=state.paused,
            note=state.note or "",
            project_dir=meta.get("project_dir"),
            entrypoint=meta.get("entrypoint", ""),
            next_runs=[t.isoformat() for t in info.next_action_times[:3]],
            recent_runs=[
                getattr(result.action, "workflow_id", "") for result in info.recent_actions
            ],
            running=[getattr(action, "workflow_id", "") for action in info.running_actions],
            skipped=info.num_actions_skipped_overlap,
        )


__all__ = [
    "SCHEDULE_PREFIX",
    "ScheduleConflict",
    "ScheduleError",
    "ScheduleInvalid",
    "ScheduleNotFound",
    "ScheduleSettings",
    "ScheduleSummary",
    "Schedules",
    "SyncReport",
    "action_id",
    "check_schedule",
    "cron_problem",
    "schedule_id",
    "schedule_settings",
    "timezone_problem",
]
