"""A side-effecting batch whose completion was lost: settled from its receipt, never re-sent."""

from __future__ import annotations

from openflow.engine import prompts
from openflow.engine.state import (
    CancelRequested,
    CancelWork,
    ReadReceipt,
    RunTools,
    ToolResultSummary,
    ToolsFinished,
    ToolsLost,
)
from openflow.engine.transcript import ToolResultItem
from tests.engine.driver import Driver, ok_summary, single_agent_workflow, tool_write

YOLO = {"tools": {"approvalMode": "yolo"}}


def _lost_write(receipt: bool) -> Driver:
    """A run whose write batch reports lost; with `receipt`, the batch left one."""

    def answer(batch: RunTools) -> ToolsLost | ToolsFinished:
        if receipt:
            d.receipts[batch.batch_id] = ToolsFinished(
                batch_id=batch.batch_id,
                results=tuple(
                    ToolResultSummary(tool_call_id=c.id, tool_name=c.name, content="wrote 1 byte")
                    for c in batch.calls
                ),
                changed_files=({"path": "notes.txt", "kind": "created"},),
            )
        return ToolsLost(batch_id=batch.batch_id, reason="heartbeat timeout")

    d = Driver(
        single_agent_workflow(**YOLO),
        {"first": [tool_write(id="call-w"), ok_summary()]},
        tool_answer=answer,
    )
    return d.run()


def _result_of(d: Driver, call_id: str) -> str:
    results = [
        i.result.content
        for i in d.node("first").conversation.transcript
        if isinstance(i, ToolResultItem) and i.result.tool_call_id == call_id
    ]
    assert len(results) == 1
    return results[0]


def test_a_lost_batch_with_a_receipt_is_settled_with_its_real_results() -> None:
    d = _lost_write(receipt=True)
    assert d.snapshot.status == "completed"
    assert len(d.batches) == 1, "a lost side-effecting batch must never be sent again"
    reads = [p for plan in d.plans for p in plan.intents if isinstance(p, ReadReceipt)]
    assert [r.batch_id for r in reads] == [d.batches[0].batch_id]
    assert _result_of(d, "call-w") == "wrote 1 byte"
    assert not d.of_type("ToolOutcomeUnknown")
    done = [e for e in d.of_type("ToolCompleted") if e.tool_call_id == "call-w"]
    assert [e.content for e in done] == ["wrote 1 byte"]
    assert d.node("first").changed_files == [{"path": "notes.txt", "kind": "created"}]


def test_a_lost_batch_without_a_receipt_stays_unknown() -> None:
    d = _lost_write(receipt=False)
    assert d.snapshot.status == "completed"
    assert len(d.batches) == 1
    assert _result_of(d, "call-w") == prompts.UNKNOWN_OUTCOME_RESULT
    assert [e.tool_call_id for e in d.of_type("ToolOutcomeUnknown")] == ["call-w"]


def test_a_stop_while_the_receipt_is_read_cancels_the_lookup() -> None:
    d = Driver(single_agent_workflow(**YOLO), {"first": [tool_write(id="call-w"), ok_summary()]})
    d.start()
    while not any(isinstance(i, RunTools) for i in d.pending):
        assert d.step()
    (batch,) = [i for i in d.pending if isinstance(i, RunTools)]
    d.pending.remove(batch)
    plan = d.feed(ToolsLost(batch_id=batch.batch_id))
    assert plan.intents == (ReadReceipt(batch_id=batch.batch_id, node_id="first"),)
    plan = d.feed(CancelRequested())
    cancels = [i for i in plan.intents if isinstance(i, CancelWork)]
    assert cancels and batch.batch_id in cancels[0].ids
    assert plan.snapshot.status == "stopped"


def test_stale_and_repeated_lost_facts_change_nothing() -> None:
    d = _lost_write(receipt=True)
    before = d.snapshot.model_dump_json()
    d.feed(ToolsLost(batch_id=d.batches[0].batch_id), ToolsLost(batch_id="batch-404"))
    assert d.snapshot.model_dump_json() == before
