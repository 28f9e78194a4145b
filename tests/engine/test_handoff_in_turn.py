"""The engine takes a handoff the model turn stored only when it is the accepted submission's."""

from __future__ import annotations

from typing import Any

from openflow.engine.handoff import HandoffFile, handoff_file
from openflow.engine.state import CallModel, ModelReplied, WriteHandoff
from tests.engine.driver import Driver, agent_node, linear_workflow, ok_summary, submit, workflow


def _first_call(driver: Driver) -> CallModel:
    call = next(i for i in driver.pending if isinstance(i, CallModel))
    driver.pending.remove(call)
    return call


def _manifest(node_id: str, fmt: Any, output: Any) -> dict[str, Any]:
    file = handoff_file(node_id, fmt, output)
    assert isinstance(file, HandoffFile)
    return file.manifest


def test_a_stored_handoff_completes_the_node_in_the_same_step() -> None:
    driver = Driver(linear_workflow())
    driver.start()
    call = _first_call(driver)
    manifest = _manifest("step-a", "json", {"summary": "done"})
    plan = driver.feed(
        ModelReplied(
            call_id=call.call_id, node_id="step-a", reply=ok_summary("done"), handoff=manifest
        )
    )
    assert not any(isinstance(i, WriteHandoff) for i in plan.intents)
    assert driver.node("step-a").handoff == manifest
    assert driver.node("step-a").output == {"summary": "done"}
    # The next node is dispatched in that very step, with the manifest upstream.
    nxt = [i for i in plan.intents if isinstance(i, CallModel)]
    assert [i.node_id for i in nxt] == ["step-b"]
    upstream = (nxt[0].request.input or {})["upstream"]
    assert upstream[0]["handoff"] == manifest


def test_a_manifest_of_another_output_is_written_again() -> None:
    driver = Driver(linear_workflow())
    driver.start()
    call = _first_call(driver)
    stale = _manifest("step-a", "json", {"summary": "an earlier draft"})
    plan = driver.feed(
        ModelReplied(
            call_id=call.call_id, node_id="step-a", reply=ok_summary("done"), handoff=stale
        )
    )
    writes = [i for i in plan.intents if isinstance(i, WriteHandoff)]
    assert [(w.node_id, w.output) for w in writes] == [("step-a", {"summary": "done"})]
    assert driver.node("step-a").handoff is None


def test_a_markdown_handoff_stored_by_its_turn_keeps_the_summary_as_output() -> None:
    template = "# Handoff\n\n## Summary\n"
    wf = workflow([agent_node("doc", handoff={"format": "markdown", "template": template})])
    driver = Driver(wf)
    driver.start()
    call = _first_call(driver)
    output = {"markdown": "# Handoff\n\n## Summary\nok\n"}
    manifest = _manifest("doc", "markdown", output)
    driver.feed(
        ModelReplied(
            call_id=call.call_id,
            node_id="doc",
            reply=submit(output, "Wrote it."),
            handoff=manifest,
        )
    )
    assert driver.node("doc").output == {"summary": "Wrote it."}
    assert driver.node("doc").handoff == manifest
