"""Compacting a snapshot for continue-as-new changes nothing the run does next."""

from __future__ import annotations

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


def test_compacted_snapshot_plans_the_same_next_call() -> None:
    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["ls"])
    for i in range(100):
        base = plan.intents[0].delta.base_len + len(plan.intents[0].delta.items)
        plan = _turn(plan, i, base)
    full = plan.snapshot
    small = compact(full, keep=10)
    node = full.nodes["busy"]
    unpersisted = len(node.transcript) - (node.persisted_len - node.transcript_offset)
    assert len(small.nodes["busy"].transcript) == max(unpersisted, 10)
    assert small.nodes["busy"].transcript_offset + len(small.nodes["busy"].transcript) == len(
        node.transcript
    )
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
