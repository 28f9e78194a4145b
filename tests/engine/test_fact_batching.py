"""A step of several facts plans what steps of one fact each would have, in the same order.

A workflow task's facts may reach the workflow in one activation or in several (a worker that
takes a run over after a workflow task timed out can be given an activity's completion and
another's timeout apart, while a replay of the same history folds them in one step): the
commands a run sends must not depend on which.
"""

from __future__ import annotations

from openflow.engine import advance as engine
from openflow.engine.state import CallModel, Plan, ReadReceipt, RunSnapshot, RunTools, ToolsFailed
from tests.engine.driver import (
    Driver,
    agent_node,
    default_tool_answer,
    ok_summary,
    tool_write,
    workflow,
)

YOLO = {"tools": {"approvalMode": "yolo"}}


def _two_batches_in_flight() -> tuple[RunSnapshot, RunTools, RunTools]:
    """Two parallel nodes, each with a write batch in flight."""
    wf = workflow([agent_node("left", **YOLO), agent_node("right", **YOLO)])
    turns = [tool_write(id="call-w"), ok_summary()]
    d = Driver(wf, {"left": turns, "right": turns})
    d.start()
    while len([i for i in d.pending if isinstance(i, RunTools)]) < 2:
        runnable = [i for i in d.pending if not isinstance(i, RunTools)]
        assert runnable, "both nodes should reach their write batch"
        d.pending.remove(runnable[0])
        d.feed(d.settle(runnable[0]))
    left, right = sorted((i for i in d.pending if isinstance(i, RunTools)), key=lambda b: b.node_id)
    return d.snapshot, left, right


def _shape(plans: list[Plan]) -> list[tuple[str, str]]:
    return [(type(i).__name__, i.node_id) for plan in plans for i in plan.intents]


def test_facts_folded_in_one_step_plan_as_they_would_one_step_each() -> None:
    snapshot, left, right = _two_batches_in_flight()
    finished = default_tool_answer(left)
    lost = ToolsFailed(batch_id=right.batch_id, reason="heartbeat timeout", receipts=True)
    for facts in ([finished, lost], [lost, finished]):
        together = engine.advance(snapshot, facts, 5, each=True)
        first = engine.advance(snapshot, facts[:1], 5)
        second = engine.advance(first.snapshot, facts[1:], 5)
        assert _shape([together]) == _shape([first, second])
        assert together.events == first.events + second.events
        assert together.snapshot.model_dump() == second.snapshot.model_dump()
    # The finished batch's node calls its model again and the lost one's receipt is read,
    # in the order their facts came.
    together = engine.advance(snapshot, [finished, lost], 5, each=True)
    kinds = [type(i) for i in together.intents]
    assert kinds == [CallModel, ReadReceipt]
    assert [i.node_id for i in together.intents] == ["left", "right"]


def test_runs_recorded_before_fold_a_steps_facts_first() -> None:
    snapshot, left, right = _two_batches_in_flight()
    finished = default_tool_answer(left)
    lost = ToolsFailed(batch_id=right.batch_id, reason="heartbeat timeout", receipts=True)
    # As they were recorded: every fact folded in, then what runs next planned once.
    plan = engine.advance(snapshot, [finished, lost], 5)
    assert [type(i) for i in plan.intents] == [ReadReceipt, CallModel]
