"""A node and a subagent share one turn machine: the same turns give the same conversation."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openflow.engine.events import RunEvent
from openflow.engine.state import AwaitingInput, Done, NodeState
from openflow.engine.transcript import TranscriptItem
from tests.engine.driver import (
    Driver,
    Turn,
    agent_node,
    message,
    submit,
    tool_read,
    transient,
    workflow,
)
from tests.engine.test_subagents import SCOUT, adhoc_script

YOLO = {"tools": {"approvalMode": "yolo"}}
#: What both conversations show of a turn; labels and backoff jitter are per id.
TURN_EVENTS = {
    "NodeQueued",
    "NodeStarted",
    "ChatMessage",
    "ToolCallProposed",
    "ToolStarted",
    "ToolCompleted",
    "AiInvokeFailed",
    "NodeRetrying",
    "UsageReported",
}


def _turn(kind: str, n: int) -> Turn:
    if kind == "read":
        return tool_read(f"docs/file-{n}.md", id=f"read-{n}")
    if kind == "text":
        return message(f"Still looking at part {n}.")
    return transient(f"busy {n}")


@st.composite
def turns(draw: st.DrawFn) -> list[Turn]:
    """Reads, plain texts and transient errors, in runs short enough for both caps."""
    kinds = draw(st.lists(st.sampled_from(["read", "text", "error"]), max_size=8))
    out: list[Turn] = []
    streak = {"text": 0, "error": 0}
    for n, kind in enumerate(kinds):
        if kind != "read" and streak[kind] >= 2:
            kind = "read"
        streak = {k: (v + 1 if k == kind else 0) for k, v in streak.items()}
        out.append(_turn(kind, n))
    return out


def _shown(events: list[RunEvent], key: str) -> list[dict[str, Any]]:
    shown = []
    for event in events:
        if event.type in TURN_EVENTS and getattr(event, "node_id", None) == key:
            shown.append(
                event.model_dump(
                    mode="json", exclude={"seq", "at_ms", "node_id", "label", "backoff_ms"}
                )
            )
    return shown


def _as_node(script: list[Turn]) -> tuple[list[TranscriptItem], list[dict[str, Any]]]:
    wf = workflow([agent_node("first", **YOLO)])
    d = Driver(wf, {"first": [*script, submit({"summary": "done"})]}).run()
    assert d.node("first").has_output
    return list(d.node("first").conversation.transcript), _shown(d.events, "first")


def _as_subagent(script: list[Turn]) -> tuple[list[TranscriptItem], list[dict[str, Any]]]:
    wf = workflow([agent_node("first", **YOLO)])
    d = Driver(wf, adhoc_script(*script, submit({"summary": "done"})))
    transcript: list[TranscriptItem] = []
    d.start()
    while d.step():
        child = d.snapshot.nodes["first"].child
        if child is not None:
            transcript = list(child.conversation.transcript)
    assert d.node("first").has_output and d.snapshot.subagents[SCOUT].status == "completed"
    # The child's first item is its task, which a node gets in its request instead.
    return transcript[1:], _shown(d.events, SCOUT)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns())
def test_a_subagent_and_a_node_driven_through_the_same_turns_converse_alike(
    script: list[Turn],
) -> None:
    node_transcript, node_events = _as_node(script)
    child_transcript, child_events = _as_subagent(script)
    assert child_transcript == node_transcript
    assert child_events == node_events


def test_a_node_state_keeps_the_shape_recorded_histories_have() -> None:
    """Snapshots recorded before the conversation and the phase read back into them, and a
    snapshot written now has the same flat fields."""
    stored = {
        "awaiting": True,
        "structured_input": {"questions": []},
        "retries": 2,
        "transcript": [{"kind": "user_message", "content": "hi"}],
        "origins": [None],
        "persisted_len": 1,
        "counters": {"empty": 1},
        "child": {
            "subagent_id": "s-1",
            "call": {"id": "c-1", "name": "openflow_call_subagent", "arguments": {}},
            "auto_continue": 4,
            "retries": 1,
        },
    }
    ns = NodeState.model_validate(stored)
    assert ns.phase == AwaitingInput(structured_input={"questions": []})
    assert ns.conversation.retries == 2 and ns.conversation.counters.empty == 1
    assert ns.child is not None and ns.child.conversation.counters.auto_continue == 4
    written = ns.model_dump(mode="json")
    assert "phase" not in written and "conversation" not in written
    assert written["awaiting"] is True and written["failed"] is None
    assert written["retries"] == 2 and written["persisted_len"] == 1
    assert NodeState.model_validate(written) == ns
    done = NodeState(phase=Done(output={"summary": "ok"})).model_dump(mode="json")
    assert (done["has_output"], done["output"]) == (True, {"summary": "ok"})
