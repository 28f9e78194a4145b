"""The rules of a tool batch the engine owns: its retry posture, what a failed activity means,
and which batch a model turn's eager reads answer."""

from __future__ import annotations

from openflow.engine import advance as engine
from openflow.engine import prompts
from openflow.engine.state import (
    ReadReceipt,
    RunTools,
    ToolResultSummary,
    ToolsFailed,
    ToolsFinished,
)
from openflow.engine.transcript import ToolResultItem
from tests.engine.driver import Driver, ok_summary, single_agent_workflow, tool_read, tool_write
from tests.engine.test_compact import WF, _listing

YOLO = {"tools": {"approvalMode": "yolo"}}


def _failed(d: Driver, receipts: bool = True) -> Driver:
    def answer(batch: RunTools) -> ToolsFailed:
        return ToolsFailed(batch_id=batch.batch_id, reason="worker gone", receipts=receipts)

    d.tool_answer = answer
    return d


def _results(d: Driver) -> list[str]:
    transcript = d.node("first").conversation.transcript
    return [i.result.content for i in transcript if isinstance(i, ToolResultItem)]


def test_a_batch_with_side_effects_is_tried_once_and_a_read_only_one_three_times() -> None:
    d = Driver(single_agent_workflow(**YOLO), {"first": [tool_write(), tool_read(), ok_summary()]})
    d.run()
    assert [(b.side_effects, b.attempts) for b in d.batches] == [(True, 1), (False, 3)]


def test_a_read_only_batch_whose_activity_failed_answers_each_call_failed() -> None:
    d = Driver(single_agent_workflow(**YOLO), {"first": [tool_read(id="r1"), ok_summary()]})
    _failed(d).run()
    assert d.snapshot.status == "completed"
    assert _results(d) == ["[failed] read could not run: the tool worker did not answer"]


def test_a_side_effecting_batch_whose_activity_failed_is_lost_then_looked_up() -> None:
    d = Driver(single_agent_workflow(**YOLO), {"first": [tool_write(id="w1"), ok_summary()]})
    _failed(d).run()
    reads = [i for plan in d.plans for i in plan.intents if isinstance(i, ReadReceipt)]
    assert [r.batch_id for r in reads] == [d.batches[0].batch_id]
    assert len(d.batches) == 1, "a side-effecting batch is never sent twice"
    assert _results(d) == [prompts.UNKNOWN_OUTCOME_RESULT]


def test_without_receipts_a_failed_side_effecting_batch_is_unknown_at_once() -> None:
    d = Driver(single_agent_workflow(**YOLO), {"first": [tool_write(id="w1"), ok_summary()]})
    _failed(d, receipts=False).run()
    assert not [i for plan in d.plans for i in plan.intents if isinstance(i, ReadReceipt)]
    assert [e.tool_call_id for e in d.of_type("ToolOutcomeUnknown")] == ["w1"]


def _eager(store_index: int = 0) -> ToolsFinished:
    """What a model turn's reads bring back: results without their calls' ids."""
    result = ToolResultSummary(tool_call_id="", tool_name="", content="a.txt")
    return ToolsFinished(batch_id="", results=(result,), store_index=store_index)


def test_eager_reads_in_the_reply_answer_the_batch_planned_from_it() -> None:
    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["ls"])
    plan = _listing(plan, persisted_len=0, in_transcript=True, eager=_eager())
    assert not [i for i in plan.intents if isinstance(i, RunTools)], "no batch to run"
    (answer,) = plan.facts
    assert isinstance(answer, ToolsFinished)
    assert answer.batch_id in plan.snapshot.batches
    # The reply's two items are lines 0 and 1; the result is line 2.
    assert (answer.store_index, answer.in_transcript) == (2, True)
    after = engine.advance(plan.snapshot, list(plan.facts), 2)
    (call,) = after.intents
    assert call.kind == "call_model" and (call.delta.base_len, call.delta.items) == (3, ())
    (item,) = [
        i for i in after.snapshot.nodes["busy"].conversation.transcript if i.kind == "tool_result"
    ]
    assert (item.result.tool_call_id, item.result.tool_name) == ("c0", "ls")


def test_eager_reads_for_other_calls_than_the_batch_planned_are_dropped() -> None:
    plan = engine.start(
        WF, "run", 0, entrypoint_text="go", tool_names=["ls"], execution_dir="/work/run"
    )
    # The engine keeps the path relative: its batch is not the call the turn ran.
    plan = _listing(plan, "/work/run/src", persisted_len=0, in_transcript=True, eager=_eager())
    assert [i.kind for i in plan.intents if isinstance(i, RunTools)] == ["run_tools"]
    assert plan.facts == ()


def test_eager_reads_of_a_reply_stored_under_its_own_key_are_dropped() -> None:
    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["ls"])
    plan = _listing(plan, reply_key="replies/r.json", eager=_eager())
    assert [i.kind for i in plan.intents if isinstance(i, RunTools)] == ["run_tools"]
    assert plan.facts == ()
