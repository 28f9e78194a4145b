"""Storing a handoff is safe to repeat: a turn tried again, or `write_handoff` after a turn,
leaves the same file and manifest; the engine takes a manifest only for its own submission."""

from __future__ import annotations

from pathlib import Path

import pytest

from openflow import contracts as c
from openflow.activities.model_turn import submitted_handoff
from openflow.activities.run_files import RunFiles
from openflow.activities.store import FileRunStore
from openflow.activities.write_handoff import WriteHandoffActivity, store_handoff
from openflow.engine.handoff import written_as
from openflow.engine.request import AgentRequest, ModelReply, RawToolCall

SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}


def _turn(handoff: c.TurnHandoff | None) -> c.ModelTurnInput:
    return c.ModelTurnInput(
        run_id="run-1",
        call_id="model:alpha-1",
        node_id="alpha",
        turn_index=0,
        header_digest="x",
        delta={"base_len": 0},
        provider_id="scripted",
        handoff=handoff,
    )


def _submit(output: object) -> ModelReply:
    args = {"output": output, "assistant_message": "done"}
    call = RawToolCall(id="c1", name="openflow_submit_node_output", arguments=args)
    return ModelReply(wire="scripted", model="m", tool_calls=(call,))


REQUEST = AgentRequest(
    workflow_id="wf", node_id="alpha", node_label="Alpha", model="m", output_schema=SCHEMA
)


async def test_storing_a_handoff_again_changes_nothing(tmp_path: Path) -> None:
    files = RunFiles(tmp_path, FileRunStore(tmp_path / "runs"))
    output = {"summary": "ünïcode and 42"}
    file = submitted_handoff(_turn(c.TurnHandoff(format="json")), REQUEST, _submit(output))
    assert file is not None
    store_handoff(files, "run-1", file)
    store_handoff(files, "run-1", file)  # the turn tried again
    again = await WriteHandoffActivity(files)._write(
        c.HandoffInput(run_id="run-1", node_id="alpha", format="json", output=output)
    )
    assert again.manifest == file.manifest
    folder = tmp_path / "runs" / "run-1" / "handoffs" / "alpha"
    assert [p.name for p in folder.iterdir()] == ["HANDOFF.json"]
    assert (folder / "HANDOFF.json").read_bytes() == file.data
    assert written_as("alpha", "json", output, file.manifest)


@pytest.mark.parametrize(
    ("handoff", "output"),
    [
        (None, {"summary": "no handoff asked for"}),
        (c.TurnHandoff(format="json"), {"wrong": 1}),  # the engine would nudge, not complete
        (c.TurnHandoff(format="markdown", headings=["## Risks"]), {"markdown": "## Summary\n"}),
    ],
)
def test_a_turn_stores_only_what_the_engine_completes(
    handoff: c.TurnHandoff | None, output: object
) -> None:
    request = REQUEST
    if handoff is not None and handoff.format == "markdown":
        markdown = {"type": "object", "properties": {"markdown": {"type": "string"}}}
        request = REQUEST.model_copy(update={"output_schema": markdown})
    assert submitted_handoff(_turn(handoff), request, _submit(output)) is None


def test_the_engine_refuses_a_manifest_of_another_output() -> None:
    file = submitted_handoff(
        _turn(c.TurnHandoff(format="json")), REQUEST, _submit({"summary": "a"})
    )
    assert file is not None
    assert not written_as("alpha", "json", {"summary": "b"}, file.manifest)
    assert not written_as("beta", "json", {"summary": "a"}, file.manifest)
    assert not written_as("alpha", "json", {"summary": "a"}, None)
