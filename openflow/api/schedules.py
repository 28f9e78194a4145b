"""`/schedules`: the Temporal Schedules of the caller's scheduled workflows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, Path

from openflow.api.deps import CatalogDep, RunsDep
from openflow.api.errors import Conflict, NotFound, Unprocessable, documented
from openflow.api.routing import StrictJsonRoute
from openflow.schedules import (
    ScheduleConflict,
    ScheduleInvalid,
    ScheduleNotFound,
    Schedules,
    ScheduleSummary,
    SyncReport,
)

router = APIRouter(prefix="/schedules", tags=["schedules"], route_class=StrictJsonRoute)

ScheduleName = Annotated[
    str, Path(min_length=1, max_length=300, description="The workflow id (or the schedule id)")
]


#: The API answers with the models `openflow schedules` prints from.
ScheduleOut = ScheduleSummary
SyncOut = SyncReport


@contextmanager
def schedule_errors() -> Iterator[None]:
    """Schedule problems as JSON errors: 422 invalid, 404 unknown, 409 another catalog's."""
    try:
        yield
    except ScheduleInvalid as exc:
        raise Unprocessable(str(exc), code="invalid_schedule") from None
    except ScheduleNotFound as exc:
        raise NotFound(str(exc)) from None
    except ScheduleConflict as exc:
        raise Conflict(str(exc)) from None


@router.get("", response_model=list[ScheduleOut], responses=documented(401, 503))
async def list_schedules(runs: RunsDep) -> list[ScheduleOut]:
    """Every schedule of your workflows."""
    with schedule_errors():
        return await Schedules(runs).list()


@router.post("/sync", response_model=SyncOut, responses=documented(401, 503))
async def sync_schedules(runs: RunsDep, catalog: CatalogDep) -> SyncOut:
    """Create missing schedules, update changed ones, delete those of workflows gone."""
    with schedule_errors():
        report = await Schedules(runs).sync(catalog)
    return report


@router.get("/{name}", response_model=ScheduleOut, responses=documented(401, 404, 503))
async def get_schedule(name: ScheduleName, runs: RunsDep) -> ScheduleOut:
    """One schedule, by workflow id."""
    with schedule_errors():
        return await Schedules(runs).get(name)


async def _by_hand(name: str, runs: RunsDep, verb: str) -> ScheduleOut:
    schedules = Schedules(runs)
    with schedule_errors():
        await getattr(schedules, verb)(name)
        return await schedules.get(name)


@router.post("/{name}/pause", response_model=ScheduleOut, responses=documented(401, 404, 503))
async def pause_schedule(name: ScheduleName, runs: RunsDep) -> ScheduleOut:
    """Pause a schedule until it is unpaused or its workflow is saved again."""
    return await _by_hand(name, runs, "pause")


@router.post("/{name}/unpause", response_model=ScheduleOut, responses=documented(401, 404, 503))
async def unpause_schedule(name: ScheduleName, runs: RunsDep) -> ScheduleOut:
    """Unpause a schedule."""
    return await _by_hand(name, runs, "unpause")


@router.post("/{name}/trigger", response_model=ScheduleOut, responses=documented(401, 404, 503))
async def trigger_schedule(name: ScheduleName, runs: RunsDep) -> ScheduleOut:
    """Start a scheduled run now, unless the schedule's last run is still going."""
    return await _by_hand(name, runs, "trigger")


__all__ = ["ScheduleOut", "router", "schedule_errors"]
