"""One parsed workflow for every run of it on a worker, and one copy of equal profiles.

Each run decodes its workflow from its own input, and its start settles a copy of it; a worker
holding thousands of paused runs of one workflow would hold thousands of equal copies. The
shell never changes a workflow in place (the engine copies what it changes), so runs whose
workflows read back the same share one object. So with the provider profiles a run's start
names (their kinds and settings, never keys): the shell only reads them.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from openflow import contracts as c
    from openflow.engine.spec import Workflow

#: Distinct workflows a worker keeps shared; the least recently started go first (a run keeps
#: its own reference, so one going from here costs nothing but a later run's sharing).
SHARED_WORKFLOWS = 256

K = TypeVar("K")
V = TypeVar("V")

_shared: OrderedDict[bytes, Workflow] = OrderedDict()
_profiles: OrderedDict[str, dict[str, dict[str, Any]]] = OrderedDict()


def shared_workflow(wf: Workflow, name: str = "") -> Workflow:
    """The worker's one object equal to `wf` (which becomes it when none is known).

    `name` tells `wf` apart from every other workflow when given (a run's `workflow_stored`
    digest: its client named it so); else its JSON does.
    """
    key = name.encode() if name else hashlib.blake2b(wf.model_dump_json().encode()).digest()
    return _intern(_shared, key, wf)


def shared_settled(settled: Workflow, inp: c.RunInput, provider: str) -> Workflow:
    """The workflow a run's start settled (`calls.prepare_run`), shared.

    When it is the run's own with only its provider filled in (`contracts.settled_workflow`
    copies the workflow but keeps its nodes), the input's name and the provider name it.
    """
    if inp.workflow_stored and settled.nodes is inp.workflow.nodes:
        return shared_workflow(settled, f"{inp.workflow_stored} {provider}")
    return shared_workflow(settled)


def shared_profiles(profiles: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The worker's one dict equal to `profiles` (in the same order), which it becomes when
    none is known. Never changed in place: the runs that share it only read it."""
    key = json.dumps(profiles, separators=(",", ":"), default=repr)
    return _intern(_profiles, key, profiles)


def _intern(table: OrderedDict[K, V], key: K, value: V) -> V:
    """The value `table` knows under `key` (made the most recent), else `value`, kept under
    it; the least recently used go beyond `SHARED_WORKFLOWS`."""
    known = table.get(key)
    if known is not None:
        table.move_to_end(key)
        return known
    table[key] = value
    while len(table) > SHARED_WORKFLOWS:
        table.popitem(last=False)
    return value


__all__ = ["SHARED_WORKFLOWS", "shared_profiles", "shared_settled", "shared_workflow"]
