"""Compacting a snapshot for continue-as-new changes nothing the run does next."""

from __future__ import annotations

from typing import Any

import pytest

from openflow.engine import advance as engine
from openflow.engine.compact import compact
from openflow.engine.request import ModelReply, RawToolCall
from openflow.engine.spec import Workflow
from openflow.engine.state import ModelReplied, Plan, ToolResultSummary, ToolsFinished

WF = Workflow.model_validate(
    {
        "id": "wf",
        "name": "wf",
        "nodes": [
            {
                "id": "busy",
                "label": "Busy",
                "kind": "agent",
                "position": {"x": 0, "y": 0},
                "agent": {
                    "system_prompt": "s",
                    "task_prompt": "t",
                    "model": "m",
                    "output_schema": {"type": "object"},
                    "handoff": {"format": "legacy"},
                    "tools": {"approvalMode": "yolo"},
                },
            }
        ],
        "edges": [],
    }
)


def _turn(plan: Plan, i: int, persisted: int) -> Plan:
    call = plan.intents[0]
    assert call.kind == "call_model"
    reply = ModelReply(
        wire="scripted",
        text=f"looking {i}",
        tool_calls=(RawToolCall(id=f"c{i}", name="ls", arguments={"path": "."}),),
    )
    plan = engine.advance(
        plan.snapshot,
        [
            ModelReplied(
                call_id=call.call_id,
                node_id="busy",
                reply=reply,
                reply_key=f"r{i}",
                persisted_len=persisted,
            )
        ],
        i,
    )
    batch = plan.intents[0]
    assert batch.kind == "run_tools"
    return engine.advance(
        plan.snapshot,
        [
            ToolsFinished(
                batch_id=batch.batch_id,
                results=(ToolResultSummary(tool_call_id=f"c{i}", tool_name="ls", content="x"),),
                store_key=f"b{i}",
            )
        ],
        i,
    )


def _listing(plan: Plan, path: str = ".", **stored: Any) -> Plan:
    """Answer the plan's model call with "looking" and one `ls` call; `stored` says where the
    run store keeps the reply (ModelReplied's `reply_key`, `persisted_len`, `in_transcript`)."""
    call = plan.intents[0]
    assert call.kind == "call_model"
    reply = ModelReply(
        wire="scripted",
        text="looking",
        tool_calls=(RawToolCall(id="c0", name="ls", arguments={"path": path}),),
    )
    fact = ModelReplied(call_id=call.call_id, node_id="busy", reply=reply, **stored)
    return engine.advance(plan.snapshot, [fact], 1)


def test_compacted_snapshot_plans_the_same_next_call() -> None:
    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["ls"])
    for i in range(100):
        base = plan.intents[0].delta.base_len + len(plan.intents[0].delta.items)
        plan = _turn(plan, i, base)
    full = plan.snapshot
    small = compact(full, keep=10)
    node = full.nodes["busy"]
    unpersisted = len(node.conversation.transcript) - (
        node.conversation.persisted_len - node.conversation.transcript_offset
    )
    assert len(small.nodes["busy"].conversation.transcript) == max(unpersisted, 10)
    assert small.nodes["busy"].conversation.transcript_offset + len(
        small.nodes["busy"].conversation.transcript
    ) == len(node.conversation.transcript)
    assert len(small.model_dump_json()) < len(full.model_dump_json()) / 3
    again = type(full).model_validate_json(small.model_dump_json())
    # The next call from either snapshot asks for the same transcript delta.
    a = engine.resume(full, 1000)
    b = engine.resume(again, 1000)
    call_a = next(i for i in a.intents if i.kind == "call_model")
    call_b = next(i for i in b.intents if i.kind == "call_model")
    assert call_a.delta == call_b.delta
    assert call_a.request == call_b.request


def test_missing_references_are_resent_as_items() -> None:
    from openflow.engine.request import ProviderFailure
    from openflow.engine.state import ModelFailed, StoredItemRef

    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["ls"])
    plan = _turn(plan, 0, 0)
    call = plan.intents[0]
    assert call.kind == "call_model"
    assert any(isinstance(item, StoredItemRef) for item in call.delta.items)
    lost = engine.advance(
        plan.snapshot,
        [
            ModelFailed(
                call_id=call.call_id,
                node_id="busy",
                failure=ProviderFailure(kind="transient", message="missing"),
                refs_missing=True,
            )
        ],
        1,
    )
    again = next(i for i in lost.intents if i.kind == "call_model")
    assert again.delta.base_len == call.delta.base_len
    referred = sum(i.count if isinstance(i, StoredItemRef) else 1 for i in call.delta.items)
    assert len(again.delta.items) == referred == 3
    assert not any(isinstance(item, StoredItemRef) for item in again.delta.items)
    assert again.model_attempt == call.model_attempt, "a storage miss is not a new attempt"
    assert not [e for e in lost.events if e.type in ("NodeErrored", "NodeRetrying")]
    after = engine.advance(lost.snapshot, [], 2)
    assert after.intents == ()


def test_a_reply_and_results_stored_together_are_one_reference() -> None:
    from openflow.engine.state import StoredItemRef

    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["ls"])
    plan = _listing(plan, reply_key="r0")
    batch = plan.intents[0]
    assert batch.kind == "run_tools"
    # A model turn that ran its reads stores them after the reply's two items, in one list.
    plan = engine.advance(
        plan.snapshot,
        [
            ToolsFinished(
                batch_id=batch.batch_id,
                results=(ToolResultSummary(tool_call_id="c0", tool_name="ls", content="a.txt"),),
                store_key="r0",
                store_index=2,
            )
        ],
        2,
    )
    delta = plan.intents[0].delta
    assert delta.items == (StoredItemRef(store_key="r0", index=0, count=3),)
    assert '"count":3' in delta.model_dump_json()
    assert "count" not in StoredItemRef(store_key="r0", index=0).model_dump_json()


def test_pack_refs_merges_only_adjacent_runs_of_one_list() -> None:
    from openflow.engine.state import StoredItemRef, pack_refs
    from openflow.engine.transcript import UserItem

    a0, a1, a3 = (StoredItemRef(store_key="a", index=i) for i in (0, 1, 3))
    b2 = StoredItemRef(store_key="b", index=2)
    note = UserItem(content="note")
    packed = pack_refs([a0, a1, a3, b2, note, StoredItemRef(store_key="b", index=3)])
    assert packed == (
        StoredItemRef(store_key="a", index=0, count=2),
        a3,
        b2,
        note,
        StoredItemRef(store_key="b", index=3),
    )


@pytest.mark.parametrize(
    ("mode", "eager"),
    [
        ("yolo", ("find", "ls", "read")),
        ("write", ("find", "ls", "read")),
        ("read_only", ("find", "ls", "read")),
        ("always_ask", ()),
    ],
)
def test_reads_a_turn_may_run_at_once_follow_the_approval_mode(
    mode: str, eager: tuple[str, ...]
) -> None:
    data = WF.model_dump(by_alias=True)
    data["nodes"][0]["agent"]["tools"]["approvalMode"] = mode
    wf = Workflow.model_validate(data)
    plan = engine.start(wf, "run", 0, entrypoint_text="go", tool_names=["ls", "read", "find"])
    offered = ("bash", "find", "ls", "read", "write")
    assert engine.eager_tools(plan.snapshot, "busy", offered) == eager
    assert engine.eager_tools(plan.snapshot, "nobody", offered) == ()


def test_a_reply_the_turn_wrote_to_the_transcript_is_not_sent_again() -> None:
    from openflow.engine.state import StoredItemRef

    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["ls"])
    call = plan.intents[0]
    assert (call.delta.base_len, call.delta.items) == (0, ())
    # The activity wrote the reply's two items to lines 0 and 1.
    plan = _listing(plan, persisted_len=0, in_transcript=True)
    batch = plan.intents[0]
    assert batch.kind == "run_tools"
    ran_at_once = ToolsFinished(
        batch_id=batch.batch_id,
        results=(ToolResultSummary(tool_call_id="c0", tool_name="ls", content="a.txt"),),
        store_index=2,
        in_transcript=True,
    )
    after = engine.advance(plan.snapshot, [ran_at_once], 2)
    delta = after.intents[0].delta
    assert (delta.base_len, delta.items) == (3, ())
    assert delta.model_dump_json() == '{"base_len":3}', "history carries no empty item list"
    # The same result from a batch of its own: the reply is in place, the result is sent.
    own = ran_at_once.model_copy(
        update={"store_key": "batches/b.json", "store_index": 0, "in_transcript": False}
    )
    after = engine.advance(plan.snapshot, [own], 2)
    delta = after.intents[0].delta
    assert delta.base_len == 2
    assert delta.items == (StoredItemRef(store_key="batches/b.json", index=0),)


def test_a_kept_item_that_differs_from_the_written_reply_resends_from_there() -> None:
    from openflow.engine.state import StoredItemRef

    plan = engine.start(
        WF, "run", 0, entrypoint_text="go", tool_names=["ls"], execution_dir="/work/run"
    )
    # An absolute path the engine keeps relative: its call item differs from line 1.
    plan = _listing(plan, "/work/run/src", persisted_len=0, in_transcript=True)
    batch = next(i for i in plan.intents if i.kind == "run_tools")
    result = ToolResultSummary(tool_call_id="c0", tool_name="ls", content="no")
    after = engine.advance(
        plan.snapshot, [ToolsFinished(batch_id=batch.batch_id, results=(result,))], 2
    )
    nxt = next(i for i in after.intents if i.kind == "call_model")
    # Line 0 (the assistant text) is in place; from the call on, items are sent again.
    assert nxt.delta.base_len == 1
    first = nxt.delta.items[0]
    assert first.kind == "tool_call" and first.call.arguments == {"path": "src"}
    assert not any(isinstance(i, StoredItemRef) and not i.store_key for i in nxt.delta.items)


def test_tools_the_settings_mark_read_pass_as_reads() -> None:
    data = WF.model_dump(by_alias=True)
    data["nodes"][0]["agent"]["tools"]["approvalMode"] = "read_only"
    wf = Workflow.model_validate(data)
    names = ["ls", "mcp_2_gh_search", "mcp_2_gh_merge"]
    plain = engine.start(wf, "run", 0, entrypoint_text="go", tool_names=names)
    marked = engine.start(
        wf, "run", 0, entrypoint_text="go", tool_names=names, read_tools=["mcp_2_gh_search"]
    )
    # A read-only node is offered the marked tool, never the other one.
    assert plain.intents[0].request.tool_names == ("ls",)
    assert marked.intents[0].request.tool_names == ("ls", "mcp_2_gh_search")
    reply = ModelReply(
        wire="scripted",
        tool_calls=(RawToolCall(id="c0", name="mcp_2_gh_search", arguments={"q": "x"}),),
    )
    call = marked.intents[0]
    after = engine.advance(
        marked.snapshot,
        [ModelReplied(call_id=call.call_id, node_id="busy", reply=reply, reply_key="r")],
        1,
    )
    batch = next(i for i in after.intents if i.kind == "run_tools")
    assert batch.side_effects, "an MCP call is still sent at most once"
    assert not any(e.type == "ToolApprovalRequested" for e in after.events)
