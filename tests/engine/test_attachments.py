"""Attachments in the engine (spec scenarios 33 to 35): references in, on requests, in history."""

from __future__ import annotations

from openflow.engine import advance as engine
from openflow.engine.state import CallModel, InputGiven, MessageSent, ModelReplied, RunSnapshot
from openflow.engine.transcript import Attachment, UserItem
from tests.engine.driver import ask, ok_summary, single_agent_workflow

CHART = Attachment(
    id="att-1",
    name="chart.png",
    media_type="image/png",
    uri="run://attachments/abc",
    size_bytes=42,
    sha256="abc",
)
NOTES = Attachment(name="notes.txt", media_type="text/plain", uri="run://attachments/def")


def first_call(plan: engine.Plan) -> CallModel:
    return next(i for i in plan.intents if isinstance(i, CallModel))


def test_entrypoint_attachments_are_on_the_first_request_and_in_the_snapshot() -> None:
    plan = engine.start(
        single_agent_workflow(), "run-a", 0, entrypoint_text="look", entrypoint_attachments=[CHART]
    )
    request = first_call(plan).request
    assert request.entrypoint_attachments == (CHART,)
    assert request.input is not None
    assert request.input["entrypoint"]["attachments"][0]["name"] == "chart.png"
    restored = RunSnapshot.model_validate_json(plan.snapshot.model_dump_json())
    assert restored.entrypoint_attachments == (CHART,)
    [started] = [e for e in plan.events if e.type == "RunStarted"]
    assert started.attachments == (CHART,)  # type: ignore[attr-defined]


def test_attachments_without_text_still_make_an_entrypoint() -> None:
    plan = engine.start(single_agent_workflow(), "run-a", 0, entrypoint_attachments=[CHART])
    request = first_call(plan).request
    assert request.input is not None
    assert request.input["entrypoint"] == {
        "text": "",
        "attachments": [CHART.model_dump(exclude_none=True)],
    }


def test_a_checkpoint_without_the_key_has_no_attachments() -> None:
    plan = engine.start(single_agent_workflow(), "run-a", 0, entrypoint_text="look")
    data = plan.snapshot.model_dump(mode="json")
    data.pop("entrypoint_attachments")
    legacy = RunSnapshot.model_validate(data)
    assert legacy.entrypoint_attachments == ()
    assert first_call(plan).request.entrypoint_attachments == ()
    assert "attachments" not in (first_call(plan).request.input or {})["entrypoint"]


def test_an_answer_with_an_image_is_in_the_transcript_and_survives_a_checkpoint() -> None:
    plan = engine.start(
        single_agent_workflow(requestUserInput=True), "run-a", 0, entrypoint_text="look"
    )
    call = first_call(plan)
    plan = engine.advance(
        plan.snapshot, [ModelReplied(call_id=call.call_id, node_id="first", reply=ask("Which?"))], 1
    )
    assert plan.snapshot.nodes["first"].awaiting
    fact = InputGiven(node_id="first", text="this one", attachments=(CHART, NOTES))
    assert engine.check(plan.snapshot, fact) is None
    plan = engine.advance(plan.snapshot, [fact], 2)
    restored = RunSnapshot.model_validate_json(plan.snapshot.model_dump_json())
    last = restored.nodes["first"].conversation.transcript[-1]
    assert last == UserItem(content="this one", attachments=(CHART, NOTES))
    [said] = [e for e in plan.events if e.type == "ChatMessage" and e.role == "user"]  # type: ignore[attr-defined]
    assert said.attachments == (CHART, NOTES)  # type: ignore[attr-defined]


def test_a_live_message_with_an_image_reaches_the_next_request_across_a_checkpoint() -> None:
    plan = engine.start(
        single_agent_workflow(requestUserInput=True), "run-a", 0, entrypoint_text="look"
    )
    call = first_call(plan)
    fact = MessageSent(node_id="first", text="and this", attachments=(CHART,))
    assert engine.check(plan.snapshot, fact) is None
    plan = engine.advance(plan.snapshot, [fact], 1)
    [said] = [e for e in plan.events if e.type == "ChatMessage" and e.role == "user"]  # type: ignore[attr-defined]
    assert said.attachments == (CHART,)  # type: ignore[attr-defined]
    restored = RunSnapshot.model_validate_json(plan.snapshot.model_dump_json())
    reply = ModelReplied(call_id=call.call_id, node_id="first", reply=ok_summary())
    plan = engine.advance(restored, [reply], 2)
    first_call(plan)  # the node reads the message on a call of its own
    transcript = plan.snapshot.nodes["first"].conversation.transcript
    assert UserItem(content="and this", attachments=(CHART,)) in transcript


def test_a_message_with_attachments_to_a_node_awaiting_input_is_its_answer() -> None:
    plan = engine.start(
        single_agent_workflow(requestUserInput=True), "run-a", 0, entrypoint_text="look"
    )
    call = first_call(plan)
    plan = engine.advance(
        plan.snapshot, [ModelReplied(call_id=call.call_id, node_id="first", reply=ask("Which?"))], 1
    )
    plan = engine.advance(
        plan.snapshot, [MessageSent(node_id="first", text="", attachments=(NOTES,))], 2
    )
    restored = RunSnapshot.model_validate_json(plan.snapshot.model_dump_json())
    assert restored.nodes["first"].conversation.transcript[-1] == UserItem(
        content="", attachments=(NOTES,)
    )
    first_call(plan)


def test_a_checkpoint_with_queued_texts_still_loads() -> None:
    plan = engine.start(
        single_agent_workflow(requestUserInput=True), "run-a", 0, entrypoint_text="look"
    )
    plan = engine.advance(plan.snapshot, [MessageSent(node_id="first", text="note")], 1)
    data = plan.snapshot.model_dump(mode="json")
    assert data["nodes"]["first"]["queued_messages"] == ["note"]
    assert RunSnapshot.model_validate(data).nodes["first"].queued_messages == ["note"]
