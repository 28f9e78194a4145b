"""Patches of `OpenFlowRun`, and the epoch that stands for them in a new run's history.

Every `workflow.patched(X)` records a marker (and Temporal's own `TemporalChangeVersion`
search-attribute upsert) the first time a run consults `X`: a dozen patches cost a new run a
kilobyte of history. An epoch is one patch that stands for a set of them. A run's workflow
object consults it once, in its `__init__`, which runs in the run's first activation before
the run method and before any signal or update handler that came with the start
(signal-with-start, update-with-start). A run whose first task recorded the epoch then takes
every patch it covers without asking; a run that started before the epoch (its first task
replays without the marker) asks each patch as it always did, so it replays as it ran.

How to add a patch: consult it through `on("new-patch")` where the code changes; it is
recorded as its own marker, as `workflow.patched` would. A patch added after an epoch is never
covered by that epoch (runs that recorded the epoch ran without the patch). To fold newer
patches in, add a new epoch at the end of `EPOCHS` with everything the last one covers plus
them; the newest epoch a run recorded is the one that counts, so runs of every epoch replay.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

#: The epochs, oldest first: an epoch's id and the patches it stands for. Never change an
#: epoch once shipped; add a new one.
_EPOCH_1 = frozenset(
    {
        "short-executions",
        "post-run-review",
        "input-limits",
        "failed-start-notices",
        "actions-delivered",
        "handoff-in-turn",
        "tool-receipts",
        "tool-pool",
        "signal-required-fields",
        "webhooks",
        # Never shipped alone: new with the epoch, taken by every run that records it.
        "lean-attributes",
    }
)
EPOCHS: tuple[tuple[str, frozenset[str]], ...] = (
    ("epoch-1", _EPOCH_1),
    # The start in a local activity: runs of epoch-1 prepared in an activity of their own.
    ("epoch-2", _EPOCH_1 | {"prepare-local"}),
    # Model-turn results without `handoff_stored` (runs of epoch-2 read it from the result).
    ("epoch-3", _EPOCH_1 | {"prepare-local", "lean-turn-results"}),
    # What runs next is planned after each fact, however a workflow task's facts arrive.
    (
        "epoch-4",
        _EPOCH_1 | {"prepare-local", "lean-turn-results", "schedule-each-fact"},
    ),
    # A model turn's activity id is its call's id (its input leaves the call id out).
    (
        "epoch-5",
        _EPOCH_1
        | {"prepare-local", "lean-turn-results", "schedule-each-fact", "turn-activity-ids"},
    ),
    # A continued run's workflow gives an agent like an earlier node's by reference.
    (
        "epoch-6",
        _EPOCH_1
        | {"prepare-local", "lean-turn-results", "schedule-each-fact", "turn-activity-ids"}
        | {"agent-refs"},
    ),
)

#: The attribute of a workflow object that holds what its epoch covers (empty: it started
#: before the epochs); a run asks a dozen patches a task, each a plain attribute read.
_COVERED = "_openflow_patches_covered"
_NONE: frozenset[str] = frozenset()


def begin(instance: Any) -> str | None:
    """Consult the epochs for the workflow object `instance` (from its `__init__`, before it
    records any other command); the epoch its run takes, if any."""
    for epoch, covered in reversed(EPOCHS):
        if workflow.patched(epoch):
            setattr(instance, _COVERED, covered)
            return epoch
    setattr(instance, _COVERED, _NONE)
    return None


def on(patch_id: str) -> bool:
    """Whether the run takes the code of `patch_id`: without asking when its epoch covers the
    patch, else as `workflow.patched(patch_id)` answers."""
    if patch_id in getattr(workflow.instance(), _COVERED, _NONE):
        return True
    return workflow.patched(patch_id)


__all__ = ["EPOCHS", "begin", "on"]
