"""Interrupting one node, resuming with a message, reverting an edit batch (spec 5.5, 8.5, 28)."""

from __future__ import annotations

from openflow.engine import advance as engine
from openflow.engine.state import (
    BatchReverted,
    CancelWork,
    Continuation,
    InterruptRequested,
    RetryRequested,
    RevertRequested,
    RunTools,
    ToolResultSummary,
    ToolsFinished,
)
from openflow.engine.transcript import ToolCallItem, ToolResultItem, UserItem
from tests.engine.driver import (
    Driver,
    agent_node,
    ask,
    ok_summary,
    tool_bash,
    tool_write,
    transient,
    workflow,
)

YOLO = {"tools": {"approvalMode": "yolo"}}


def two_nodes() -> Driver:
    wf = workflow([agent_node("a", **YOLO), agent_node("b", **YOLO)])
    d = Driver(wf, {"a": [tool_bash("sleep 30"), ok_summary("a again")], "b": [ok_summary("b")]})
    d.start()
    return d


def unanswered(d: Driver, node_id: str) -> list[str]:
    items = d.node(node_id).conversation.transcript
    done = {i.result.tool_call_id for i in items if isinstance(i, ToolResultItem)}
    return [i.call.id for i in items if isinstance(i, ToolCallItem) and i.call.id not in done]


def test_interrupt_during_a_tool_batch_cancels_it_and_the_other_node_goes_on() -> None:
    d = two_nodes()
    d.hold("batch")  # a's bash batch stays in flight
    d.run()
    batch = next(i for i in d.pending if isinstance(i, RunTools))
    assert d.node("b").has_output and not d.node("a").interrupted
    assert engine.check(d.snapshot, InterruptRequested(node_id="a")) is None
    plan = d.feed(InterruptRequested(node_id="a"))
    cancel = [i for i in plan.intents if isinstance(i, CancelWork)]
    assert cancel == [CancelWork(ids=(batch.batch_id,), timers=("a",))]
    assert d.node("a").interrupted and plan.awaiting.retryables == ("a",)
    assert unanswered(d, "a") == []
    assert "interrupted or cancelled" in d.node("a").conversation.transcript[-1].result.content
    assert "NodeInterrupted" in d.event_types("a")
    # The cancelled batch's late answer changes nothing.
    late = ToolsFinished(
        batch_id=batch.batch_id,
        results=(ToolResultSummary(tool_call_id="x", tool_name="bash", content="done"),),
    )
    d.feed(late)
    assert d.node("a").interrupted
    d.feed(RetryRequested(node_id="a", message="skip the sleep"))
    d.release("batch")
    d.run()
    assert d.snapshot.status == "completed"
    users = [i.content for i in d.node("a").conversation.transcript if isinstance(i, UserItem)]
    assert users[-1] == "skip the sleep"


def test_interrupt_during_a_model_call_cancels_the_call() -> None:
    d = two_nodes()
    d.hold("model:a")
    d.run()
    call = d.node("a").conversation.in_flight
    assert call is not None
    plan = d.feed(InterruptRequested(node_id="a"))
    assert CancelWork(ids=(call.call_id,), timers=("a",)) in plan.intents
    assert d.node("a").interrupted and d.node("a").conversation.in_flight is None


def test_interrupting_a_node_that_is_not_running_is_refused_with_the_reason() -> None:
    wf = workflow([agent_node("a", requestUserInput=True), agent_node("b")], [("a", "b")])
    d = Driver(wf, {"a": [ask("which?")]})
    d.run()
    assert "waits for input" in (engine.check(d.snapshot, InterruptRequested(node_id="a")) or "")
    assert "has not started" in (engine.check(d.snapshot, InterruptRequested(node_id="b")) or "")
    assert "unknown node 'zz'" in (engine.check(d.snapshot, InterruptRequested(node_id="zz")) or "")
    before = d.snapshot
    plan = d.feed(InterruptRequested(node_id="b"))
    assert [e.type for e in plan.events] == ["ActionIgnored"]
    assert plan.snapshot.nodes == before.nodes


def test_resume_gives_the_named_node_its_message_as_the_next_user_turn() -> None:
    d = two_nodes()
    d.hold("batch")
    d.run()
    d.feed(InterruptRequested(node_id="a"))
    stopped = d.snapshot
    assert engine.continuation_problem(stopped, "a", "go on, quicker") is None
    assert "unknown node 'nope'" in (engine.continuation_problem(stopped, "nope", "x") or "")
    assert "not waiting" in (engine.continuation_problem(stopped, "b", "x") or "")
    d.release("batch")
    plan = engine.resume(stopped, d.now, Continuation(node_id="a", text="go on, quicker"))
    d.pending = []
    d.take(plan)
    d.run()
    users = [i.content for i in d.node("a").conversation.transcript if isinstance(i, UserItem)]
    assert users[-1] == "go on, quicker"
    assert d.snapshot.status == "completed"


def test_resume_answers_a_waiting_node_with_the_message() -> None:
    d = Driver(workflow([agent_node("a", requestUserInput=True)]), {"a": [ask("which?")]})
    d.run()
    d.model.turns["a"].append(ok_summary("done"))
    plan = engine.resume(d.snapshot, d.now, Continuation(node_id="a", text="the blue one"))
    d.take(plan)
    d.run()
    assert d.snapshot.status == "completed"
    assert any(e.type == "ChatMessage" and e.content == "the blue one" for e in d.events)


def test_28_revert_removes_only_the_reverted_batch_records() -> None:
    def wrote(batch: RunTools) -> ToolsFinished:
        call = batch.calls[0]
        record = {"path": call.arguments["path"], "op": "update", "batch_id": f"edit-{call.id}"}
        result = ToolResultSummary(tool_call_id=call.id, tool_name="write", content="Wrote")
        return ToolsFinished(batch_id=batch.batch_id, results=(result,), changed_files=(record,))

    script = {"a": [tool_write("x.txt", id="1"), tool_write("y.txt", id="2"), ok_summary()]}
    d = Driver(
        workflow([agent_node("a", **YOLO, requestUserInput=True)]), script, tool_answer=wrote
    )
    d.model.turns["a"].insert(2, ask("anything else?"))
    d.run()
    assert engine.check(d.snapshot, RevertRequested(batch_id="edit-1")) is None
    assert "no edit batch 'nope'" in (
        engine.check(d.snapshot, RevertRequested(batch_id="nope")) or ""
    )
    refused = d.feed(BatchReverted(batch_id="edit-1", error="'x.txt' has changed since"))
    assert [e.type for e in refused.events] == ["EditBatchReverted"]
    assert len(d.node("a").changed_files) == 2
    plan = d.feed(BatchReverted(batch_id="edit-1", paths=("x.txt",)))
    assert [r["batch_id"] for r in d.node("a").changed_files] == ["edit-2"]
    assert plan.events[0].type == "EditBatchReverted" and plan.events[0].paths == ("x.txt",)
    assert "no edit batch" in (engine.check(d.snapshot, RevertRequested(batch_id="edit-1")) or "")


def test_interrupt_during_a_backoff_cancels_only_that_nodes_timer() -> None:
    wf = workflow([agent_node("a"), agent_node("b")])
    d = Driver(wf, {"a": [transient(), ok_summary("a")], "b": [transient(), ok_summary("b")]})
    d.start()
    d.step()
    d.step()
    assert sorted(d.timers) == ["a", "b"]
    plan = d.feed(InterruptRequested(node_id="a"))
    assert CancelWork(ids=(), timers=("a",)) in plan.intents
    assert sorted(d.timers) == ["b"] and d.node("a").interrupted
    d.run()
    assert d.node("b").has_output and not d.node("a").has_output
