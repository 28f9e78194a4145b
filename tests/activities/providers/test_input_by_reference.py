"""A node's first call sends what the run store holds of its input by reference; the provider
is sent, byte for byte, what it is sent when the call carries its input whole.

Two runs of one workflow on the Temporal dev server, its last node and the post-run review on
an OpenAI Responses server served locally: in one, the run store keeps the upstream node's
handoff file and the calls carry recipes; in the other, the file is lost before the last
node's first call, which the activity reports, and the run sends its inputs whole from then on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MARKER_KEY
from temporalio.client import Client
from wire import responses_sse
from wire.server import WireServer
from wire.turns import FakeCall, FakeTurn

from bench.history import breakdown
from openflow import contracts as c
from openflow.engine.harness import SUBMIT_TOOL
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: The upstream node's output: far more than a reference to its handoff file.
FINDINGS = {"summary": "The survey found three dry wells. " * 12}


@pytest.fixture
def server() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


def _submit(output: dict[str, Any]) -> str:
    return json.dumps({"output": output, "assistant_message": "Done."})


#: What `check` and the post-run review both submit (so a turn a busy machine lost and ran
#: again takes the same answer as the one before).
ANSWER = {"suggestions": []}
CHECK_SCHEMA = {
    "type": "object",
    "properties": {"suggestions": {"type": "array"}},
    "required": ["suggestions"],
}


async def _run(harness: Harness, server: WireServer, *, lose_handoff: bool) -> tuple[str, int]:
    """One run: `survey` submits, `gate` waits for a person, then `check` (on the wire) reads
    both; the file of `survey`'s handoff is lost first when `lose_handoff`. The run's id, and
    how many of its turns the worker lost (timed out)."""
    turn = FakeTurn(calls=[FakeCall("call_1", SUBMIT_TOOL, _submit(ANSWER))])
    for _ in range(6):
        server.plan(responses_sse.encode(turn, "gpt-4o-mini"))
    wf = make_workflow(
        [
            node("survey"),
            node("gate", requestUserInput=True),
            node("check", providerId="openai", model="gpt-4o-mini", output_schema=CHECK_SCHEMA),
        ],
        [("survey", "check"), ("gate", "check")],
    )
    run_id = await harness.start(wf, entrypoint="the wells")
    await harness.wait_for(
        run_id, lambda s: s.awaiting_node_ids == ["gate"] and "survey" in s.outputs
    )
    handoff = harness.home / "runs" / run_id / "handoffs" / "survey" / "HANDOFF.json"
    assert json.loads(handoff.read_text()) == FINDINGS
    if lose_handoff:
        handoff.unlink()
    await harness.handle(run_id).signal(c.SIGNAL_INPUT, {"node_id": "gate", "text": "go on"})
    result = await harness.result(run_id)
    assert result.status == "completed", result
    history = await harness.handle(run_id).fetch_history()
    lost = [e for e in history.events if e.HasField("activity_task_timed_out_event_attributes")]
    return run_id, len(lost)


async def test_the_provider_is_sent_the_same_request_as_with_the_input_whole(
    client: Client, task_queue: str, openflow_home: Path, server: WireServer
) -> None:
    harness = Harness(client, task_queue, openflow_home)
    write_scripted_settings(
        openflow_home,
        {
            "survey": [{"submit": FINDINGS}],
            "gate": [{"ask": "Go on?"}, {"submit": {"summary": "ok"}}],
        },
    )
    settings = json.loads((openflow_home / "settings.json").read_text())
    settings["providers"]["openai"] = {"base_url": server.base_url, "api_key": MARKER_KEY}
    (openflow_home / "settings.json").write_text(json.dumps(settings))
    async with build_worker(client, task_queue, openflow_home):
        by_reference, lost = await _run(harness, server, lose_handoff=False)
        first = len(server.requests)
        whole, lost_whole = await _run(harness, server, lose_handoff=True)

    def sent(requests: list[Any], run_id: str, text: str) -> str:
        return next(r.body.decode() for r in requests if text in r.body.decode()).replace(
            run_id, "<run>"
        )

    kept, redone = server.requests[:first], server.requests[first:]
    # The same check call, to the byte, but for the run's id.
    check_sent = sent(kept, by_reference, "Node: Check")
    assert FINDINGS["summary"] in check_sent
    assert check_sent == sent(redone, whole, "Node: Check")
    if not lost and not lost_whole:
        # And the same review (whose evidence counts the attempts a lost turn adds).
        assert sent(kept, by_reference, "runEvidence") == sent(redone, whole, "runEvidence")

    # With the file kept, the check's first call names the handoff instead of carrying it,
    # and the review sends what differs from the evidence its run's start foretold.
    found = breakdown(await harness.handle(by_reference).fetch_history())
    # Every call's header was made again exactly (the activity checks it against the digest
    # the workflow took of the header it built): none came back as missing.
    assert not any(v.get("refs_missing") for _, _, v in found.of("model_turn result"))
    turns = found.of("model_turn input")
    check = next(v for _, _, v in turns if c.call_node(v["call_id"]) == "check")
    review = next(v for _, _, v in turns if v.get("purpose") == "review")
    assert check["header_recipe"]["refs"] and "sha256" not in json.dumps(check["header_input"])
    assert FINDINGS["summary"] not in json.dumps(check)
    assert "header_input" not in review and review["header_recipe"]["base"]
    assert "systemPrompt" not in json.dumps(review)
    # With the file lost, the activity said so and the call went again with its input whole.
    history = await harness.handle(whole).fetch_history()
    results = [v for _, _, v in breakdown(history).of("model_turn result")]
    assert any(v.get("refs_missing") for v in results)
    turns = breakdown(history).of("model_turn input")
    checks = [v for _, _, v in turns if c.call_node(v["call_id"]) == "check"]
    assert checks[0]["header_recipe"] and "header_recipe" not in checks[-1]
    assert FINDINGS["summary"] in json.dumps(checks[-1]["header"]["input"])
    await harness.replay(by_reference)
    await harness.replay(whole)
