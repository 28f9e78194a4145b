"""The journal holds events as JSON and answers the `events` and `state` queries exactly as
the event objects would; runs of one workflow share its parsed form."""

from __future__ import annotations

from openflow import contracts as c
from openflow.engine.events import RunEvent, stamped
from openflow.engine.projection import apply_event, initial_state, trim_state
from openflow.engine.spec import Workflow
from openflow.testing import agent_node
from openflow.workflows.journal import FRESH_EVENTS, Journal
from openflow.workflows.shared import shared_profiles, shared_settled, shared_workflow
from tests.engine.test_events import EXAMPLES


def _workflow(prompt: str = "Do plan.") -> Workflow:
    return Workflow.model_validate(
        {
            "id": "wf-1",
            "name": "Demo",
            "nodes": [agent_node("plan", task_prompt=prompt), agent_node("build")],
            "edges": [{"id": "e1", "from": "plan", "to": "build"}],
        }
    )


def _numbered() -> list[RunEvent]:
    return [stamped(event, seq=i + 1, at_ms=1000 * i) for i, event in enumerate(EXAMPLES)]


def _begun(wf: Workflow) -> Journal:
    """A journal begun for run r1 of `wf`."""
    journal = Journal()
    journal.begin(c.RunInput(run_id="r1", workflow=wf))
    return journal


def test_every_event_answers_the_events_query_as_its_own_dump() -> None:
    journal = _begun(_workflow())
    events = _numbered()
    journal.record(events[:10])
    journal.record(events[10:])
    assert journal.after(0) == [e.model_dump(mode="json") for e in events]
    assert journal.after(30) == [e.model_dump(mode="json") for e in events if e.seq > 30]
    assert journal.after(len(events)) == []
    assert journal.events == events


def test_the_projection_folds_the_decoded_events_like_the_originals() -> None:
    wf = _workflow()
    journal = _begun(wf)
    events = _numbered()
    journal.record(events[:20])
    state = initial_state(wf.id, "r1", [n.id for n in wf.nodes], None)
    for event in events[:20]:
        state = apply_event(state, event)
    assert journal.projection().as_json() == state.as_json()
    journal.record(events[20:])
    for event in events[20:]:
        state = apply_event(state, event)
    assert journal.projection().as_json() == state.as_json()
    assert journal.carried_state() == trim_state(state).model_dump(mode="json", by_alias=True)


def test_a_continued_execution_carries_the_events_as_they_were_recorded() -> None:
    events = _numbered()
    first = Journal()
    first.begin(c.RunInput(run_id="r1", workflow=_workflow()))
    first.record(events)
    carried = first.carried_events()
    assert carried == [e.model_dump(mode="json") for e in events]
    second = Journal()
    second.begin(
        c.RunInput(
            run_id="r1",
            workflow=_workflow(),
            events=carried,
            state=first.carried_state(),
            previous_run_id="run-a",
        )
    )
    assert second.after(0) == carried
    assert second.projection().as_json() == first.projection().as_json()


def test_runs_of_one_workflow_share_its_parsed_form() -> None:
    one, two, other = _workflow(), _workflow(), _workflow("Do something else.")
    assert one is not two
    shared = shared_workflow(one)
    assert shared_workflow(two) is shared
    assert shared_workflow(other) is not shared
    assert shared_workflow(other).nodes[0].agent.task_prompt == "Do something else."


def test_a_stored_workflow_is_shared_by_its_digest_and_settled_by_its_provider() -> None:
    one, two = _workflow(), _workflow()
    inp = c.RunInput(run_id="r1", workflow=one, workflow_stored="digest-1")
    shared = shared_workflow(one, inp.workflow_stored)
    assert shared_workflow(two, "digest-1") is shared
    inp.workflow = shared
    settled = c.settled_workflow(shared, "anthropic")
    again = c.settled_workflow(shared, "anthropic")
    assert shared_settled(settled, inp, "anthropic") is settled
    assert shared_settled(again, inp, "anthropic") is settled
    assert settled.settings.provider_id == "anthropic"


def test_a_packed_journal_answers_alike_and_records_on() -> None:
    wf = _workflow()
    journal = _begun(wf)
    events = _numbered()
    journal.record(events[:20])
    journal.pack()
    assert journal.after(0) == [e.model_dump(mode="json") for e in events[:20]]
    assert journal.projection() is journal.projection()
    assert journal.events == events[:20]
    state = initial_state(wf.id, "r1", [n.id for n in wf.nodes], None)
    for event in events[:20]:
        state = apply_event(state, event)
    assert journal.projection().as_json() == state.as_json()
    journal.pack()  # the projection a query built, packed too
    assert journal.projection().as_json() == state.as_json()
    journal.pack()
    journal.record(events[20:])
    journal.pack()
    for event in events[20:]:
        state = apply_event(state, event)
    assert journal.events == events
    assert journal.after(30) == [e.model_dump(mode="json") for e in events if e.seq > 30]
    assert journal.projection().as_json() == state.as_json()
    assert journal.carried_events() == [e.model_dump(mode="json") for e in events]


def test_runs_with_equal_profiles_share_one_copy() -> None:
    one = {"scripted": {"kind": "scripted"}, "main": {"kind": "openai", "model": "m"}}
    two = {"scripted": {"kind": "scripted"}, "main": {"kind": "openai", "model": "m"}}
    shared = shared_profiles(one)
    assert shared_profiles(two) is shared
    assert shared_profiles({"main": two["main"], "scripted": two["scripted"]}) is not shared
    assert shared_profiles({"scripted": {"kind": "scripted"}}) is not shared


def test_events_recorded_one_step_at_a_time_answer_as_recorded_across_packs() -> None:
    """Steps record a few events each: those not yet encoded, more than `FRESH_EVENTS` in
    all, and a pause between them, answer every query as the events themselves."""
    wf = _workflow()
    journal = _begun(wf)
    events = [stamped(event, seq=i + 1, at_ms=i) for i, event in enumerate([*EXAMPLES, *EXAMPLES])]
    assert len(events) > FRESH_EVENTS
    state = initial_state(wf.id, "r1", [n.id for n in wf.nodes], None)
    for i in range(0, len(events), 3):
        journal.record(events[i : i + 3])
        if i == 30:
            journal.pack()
    for event in events:
        state = apply_event(state, event)
    assert journal.events == events
    assert journal.after(70) == [e.model_dump(mode="json") for e in events if e.seq > 70]
    assert journal.projection().as_json() == state.as_json()
    journal.pack()
    assert journal.carried_events() == [e.model_dump(mode="json") for e in events]
