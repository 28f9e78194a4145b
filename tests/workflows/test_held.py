"""A run waiting for a person holds its snapshot and its events compactly, and reads back the
same ones: the engine's next step plans the same from the snapshot held as from the original."""

from __future__ import annotations

from openflow.engine import advance as engine
from openflow.engine.state import ApprovalDecided, BudgetSet, InputGiven, RunSnapshot
from openflow.workflows.held import SHARED_FIELDS, HeldSnapshot
from tests.engine.driver import (
    agent_node,
    ask,
    ok_summary,
    run,
    single_agent_workflow,
    tool_write,
    workflow,
)
from tests.engine.test_budget import BudgetDriver, costing, read_turn


def _held(snapshot: RunSnapshot) -> HeldSnapshot:
    held = HeldSnapshot()
    held.set(snapshot)
    held.pack()
    assert held.packed and not held.finished
    return held


def test_a_snapshot_waiting_for_an_answer_reads_back_equal_and_plans_the_same() -> None:
    d = run(single_agent_workflow(requestUserInput=True), {"first": [ask("Which one?")]})
    snapshot = d.snapshot
    assert snapshot.nodes["first"].awaiting
    again = _held(snapshot).get()
    assert again is not None and again is not snapshot
    assert again == snapshot
    assert again.model_dump_json() == snapshot.model_dump_json()
    assert again.model_fields_set == snapshot.model_fields_set
    # What runs of a workflow share stays shared.
    for name in SHARED_FIELDS:
        assert getattr(again, name) is getattr(snapshot, name)
    answer = [InputGiven(node_id="first", text="that one")]
    assert engine.advance(again, answer, 5_000) == engine.advance(snapshot, answer, 5_000)


def test_a_snapshot_waiting_for_an_approval_reads_back_equal_and_plans_the_same() -> None:
    d = run(single_agent_workflow(), {"first": [tool_write("a.txt"), ok_summary()]})
    assert d.plan is not None and d.plan.awaiting.approvals
    snapshot = d.snapshot
    held = _held(snapshot)
    again = held.get()
    assert again == snapshot and not held.packed
    assert held.get() is again  # read back once, then kept
    decided = [ApprovalDecided(approval_id=d.plan.awaiting.approvals[0], allow=True)]
    assert engine.advance(again, decided, 5_000) == engine.advance(snapshot, decided, 5_000)


def test_a_budget_pause_reads_back_as_one_and_a_raise_goes_on() -> None:
    # The snapshot's JSON has no field for a budget pause's mark: the bytes held keep it.
    wf = workflow([agent_node("first", tools={"approvalMode": "yolo"})], budget={"maxTokens": 50})
    d = BudgetDriver(wf, {"first": [read_turn(0.0), costing(ok_summary(), 0.0)]}).run()
    snapshot = d.snapshot
    assert snapshot.status == "paused" and "budget reached" in (d.node("first").failed or "")
    again = _held(snapshot).get()
    assert again == snapshot
    raised = [BudgetSet(max_tokens=1_000_000)]
    plan = engine.advance(again, raised, 5_000)
    assert plan == engine.advance(snapshot, raised, 5_000) and plan.intents


def test_an_ended_run_is_finished_without_reading_its_snapshot() -> None:
    d = run(single_agent_workflow(), {"first": [ok_summary()]})
    held = HeldSnapshot()
    held.set(d.snapshot)
    assert held.finished == d.snapshot.finished
    held.set(None)
    assert held.get() is None and not held.finished
    held.pack()  # nothing to pack
    assert not held.packed
