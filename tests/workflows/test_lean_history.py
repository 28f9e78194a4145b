"""What a run adds to Temporal history: request headers' constants are stored once, at the
run's start, and calls refer to them; a store that lost them gets them inline again."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from bench.history import breakdown
from openflow import contracts as c
from openflow.contracts import RunResult
from openflow.engine.headers import MIN_PART_BYTES
from openflow.worker import build_worker
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: A system prompt far larger than what a call's input may carry.
LONG_PROMPT = "You check the plan against the house rules. " * 400


async def _completed_dag(harness: Harness) -> tuple[str, Any, Any]:
    """A run of `bench.scale.dag()`, scripted to echo, completed: its id, result and history."""
    from bench.scale import dag

    harness.script({}, exhausted="echo")
    run_id = await harness.start(dag(), entrypoint="bench")
    result = await harness.result(run_id)
    assert result.status == "completed", result
    return run_id, result, await harness.handle(run_id).fetch_history()


def _turn_inputs(history: Any) -> list[tuple[int, dict[str, Any]]]:
    """Each model turn's input as history holds it, with its size in bytes."""
    return [(size, value) for _, size, value in breakdown(history).of("model_turn input")]


async def test_a_nodes_first_call_carries_no_system_prompt_or_tools(harness: Harness) -> None:
    harness.script({}, exhausted="echo")
    wf = make_workflow(
        [node("draft"), node("check", system_prompt=LONG_PROMPT)], [("draft", "check")]
    )
    run_id = await harness.start(wf, entrypoint="write it")
    result = await harness.result(run_id)
    assert result.status == "completed", result
    history = await harness.handle(run_id).fetch_history()
    turns = _turn_inputs(history)
    by_node = {c.call_node(value["call_id"]): (size, value) for size, value in turns}
    size, check = by_node["check"]
    # The second node's first call names its prompt, tools and schema instead of carrying them.
    assert size < 2000 < len(LONG_PROMPT)
    assert LONG_PROMPT.strip() not in json.dumps(check)
    # The header travels without them, where a worker that knows nothing of parts finds none:
    # one reference to the node's stored header set, and the call's input.
    assert "header" not in check and "header_rest" not in check
    assert check["header_set"] and "upstream" in check["header_input"]
    for _, value in turns:
        inline = (value.get("header_rest") or {}).get("system_messages") or []
        assert all(len(m) < MIN_PART_BYTES for m in inline), value["call_id"]
    # The model was sent the whole header: the one the turn stored has the prompt and tools.
    stored = harness.home / "runs" / run_id / "headers" / f"{check['header_digest']}.json"
    whole = json.loads(stored.read_text())
    assert any(LONG_PROMPT.strip() in m for m in whole["system_messages"])
    assert "openflow_submit_node_output" in [t["name"] for t in whole["harness_tools"]]
    assert whole["tool_names"] and whole["output_schema"]["properties"] == {
        "summary": {"type": "string"}
    }
    # The start's result does not carry the workflow again: only its provider was settled.
    prepared = breakdown(history).of("prepare_run result")
    assert prepared and all(value.get("workflow") is None for _, _, value in prepared)
    # The calls together, the review's among them, stay far below one copy of the prompt.
    assert sum(size for size, v in turns if v.get("purpose") != "review") < 4000
    assert breakdown(history).payloads["model_turn input"] < 6000
    # The reviewer still read every node's prompts in the evidence.
    review = next(v for _, v in turns if v.get("purpose") == "review")
    assert LONG_PROMPT not in json.dumps(review)
    stored = harness.home / "runs" / run_id / "headers" / f"{review['header_digest']}.json"
    evidence = json.loads(stored.read_text())["input"]["runEvidence"]
    assert [n["systemPrompt"] for n in evidence["nodes"]] == ["You are a test node.", LONG_PROMPT]
    await harness.replay(run_id)


async def test_a_store_that_lost_the_parts_gets_the_header_inline(
    client: Client, task_queue: str, openflow_home: Path
) -> None:
    harness = Harness(client, task_queue, openflow_home)
    harness.script(
        {"ask": [{"ask": "Which one?"}, {"submit": {"summary": "that one"}}]}, exhausted="echo"
    )
    wf = make_workflow(
        [node("ask", requestUserInput=True), node("check", system_prompt=LONG_PROMPT)],
        [("ask", "check")],
    )
    async with build_worker(client, task_queue, openflow_home):
        run_id = await harness.start(wf)
        await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    # A machine crash took the stored parts; the next worker has read none of them yet.
    parts = openflow_home / "runs" / run_id / c.HEADER_PARTS_KEY
    assert parts.exists()
    parts.unlink()
    async with build_worker(client, task_queue, openflow_home):
        await harness.handle(run_id).signal(c.SIGNAL_INPUT, {"node_id": "ask", "text": "this"})
        result = await harness.result(run_id)
    assert result.status == "completed", result
    assert result.outputs["check"] == {"summary": "that one"}
    history = await harness.handle(run_id).fetch_history()
    results = breakdown(history).of("model_turn result")
    assert any(value.get("refs_missing") for _, _, value in results)
    check = [v for _, v in _turn_inputs(history) if c.call_node(v["call_id"]) == "check"]
    assert check[0].get("header_set") and check[-1].get("header_set") is None
    assert any(LONG_PROMPT.strip() in m for m in check[-1]["header"]["system_messages"])
    await harness.replay(run_id)


#: What a typical run's history may weigh against bare Temporal's with the same activities.
MAX_RATIO = 1.8
#: Typical runs measured on each side: whether two activities that finish together are taken
#: in one workflow task or two is timing, on either side, and costs a task's three events.
TYPICAL_RUNS = 3


async def test_a_typical_runs_history_is_near_a_bare_workflows(
    client: Client, task_queue: str, openflow_home: Path
) -> None:
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    from bench.floor import noop
    from bench.scale import DAG_ACTIVITIES, DAG_LAYERS, BareDag, dag

    harness = Harness(client, task_queue, openflow_home)
    harness.script({}, exhausted="echo")
    typical: list[str] = []
    async with build_worker(client, task_queue, openflow_home):
        # A worker's runs of a workflow after its first are the typical ones: what it worked
        # out for the first is shared, and must fit the runs after it just as well.
        for i in range(1 + TYPICAL_RUNS):
            run_id = await harness.start(dag(), entrypoint="bench")
            result = await harness.result(run_id)
            assert result.status == "completed", result
            if i:
                typical.append(run_id)
    ours = await harness.handle(run_id).fetch_history()
    turns = _turn_inputs(ours)
    assert turns and all(v.get("header_set") and "header_rest" not in v for _, v in turns)
    # Bare Temporal's workflow: the same activities, one after another, a layer's at once.
    queue = f"{task_queue}-bare"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[BareDag],
        activities=[noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        bare = []
        for typical_id in typical:
            handle = await client.start_workflow(
                BareDag.run, DAG_LAYERS, id=f"bare-{typical_id}", task_queue=queue
            )
            assert await handle.result() == DAG_ACTIVITIES
            bare.append(await handle.fetch_history())
    scheduled = [e for e in ours.events if e.HasField("activity_task_scheduled_event_attributes")]
    # The start prepares in a local activity: history holds its outcome, not its input.
    assert len(scheduled) == DAG_ACTIVITIES - 1
    assert len(breakdown(ours).of("prepare_run result")) == 1
    # The workflow travels once, in the start's input.
    assert not breakdown(ours).of("prepare_run input")
    ours_bytes = sum(
        [
            breakdown(await harness.handle(typical_id).fetch_history()).total
            for typical_id in typical
        ]
    )
    ratio = ours_bytes / sum(breakdown(history).total for history in bare)
    assert ratio <= MAX_RATIO, f"history is {ratio:.2f}x bare's"


async def test_a_run_started_from_temporals_client_carries_its_workflow(harness: Harness) -> None:
    harness.script({}, exhausted="echo")
    wf = make_workflow([node("only")], [])
    run_id = "run-raw-start"
    handle = await harness.client.start_workflow(
        c.WORKFLOW_NAME,
        c.RunInput(run_id=run_id, workflow=wf, entrypoint="go"),
        id=run_id,
        task_queue=harness.task_queue,
    )
    assert RunResult.model_validate(await handle.result()).status == "completed"
    # Its start (a local activity: no input in history) had the workflow at once.
    prepared = breakdown(await handle.fetch_history()).of("prepare_run result")
    assert [v.get("workflow_missing", False) for _, _, v in prepared] == [False]


async def test_a_store_that_lost_the_workflow_gets_it_inline(
    client: Client, task_queue: str, openflow_home: Path
) -> None:
    harness = Harness(client, task_queue, openflow_home)
    harness.script({}, exhausted="echo")
    wf = make_workflow([node("only")], [])
    run_id = await harness.start(wf)
    # Started with no worker up: the stored workflow is lost before the run's start reads it.
    for stored in (openflow_home / "runs" / run_id / "workflows").iterdir():
        stored.unlink()
    async with build_worker(client, task_queue, openflow_home):
        result = await harness.result(run_id)
    assert result.status == "completed", result
    # Asked once by reference, then with the workflow itself.
    prepared = breakdown(await harness.handle(run_id).fetch_history()).of("prepare_run result")
    assert [v.get("workflow_missing", False) for _, _, v in prepared] == [True, False]
    await harness.replay(run_id)


async def test_a_dags_calls_name_what_the_run_store_holds_of_their_input(
    harness: Harness,
) -> None:
    run_id, _, history = await _completed_dag(harness)
    found = breakdown(history)
    assert not any(v.get("refs_missing") for _, _, v in found.of("model_turn result"))
    by_node = {c.call_node(v["call_id"]): v for _, v in _turn_inputs(history)}
    # Each child names the root's handoff file instead of carrying its output and manifest.
    for child in ("left", "right"):
        turn = by_node[child]
        assert turn["header_input"] == {"upstream": [None]}
        assert [r["node"] for r in turn["header_recipe"]["refs"]] == ["root"]
        assert "sha256" not in json.dumps(turn)
    # The review sends what differs from the evidence its run's start foretold.
    review = by_node["__post_run_review"]
    assert "header_input" not in review and review["header_recipe"]["base"]
    assert "systemPrompt" not in json.dumps(review) and "edges" not in json.dumps(review)
    carried = found.fields["model_turn input .header_input"]
    carried += found.fields["model_turn input .header_recipe"]
    assert carried < 600, carried
    # What each call's activity made of its recipe is the header the workflow built, to the
    # byte: the header it stored is named by the digest the workflow took.
    for node_id in ("left", "right", "__post_run_review"):
        turn = by_node[node_id]
        stored = harness.home / "runs" / run_id / "headers" / f"{turn['header_digest']}.json"
        await _written(stored)
        assert hashlib.sha256(stored.read_bytes()).hexdigest()[:16] == turn["header_digest"]
    await harness.replay(run_id)


async def test_a_turns_call_id_travels_once_as_its_activity_id(harness: Harness) -> None:
    run_id, _, history = await _completed_dag(harness)
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    ids = [a.activity_id for a in scheduled]
    assert [c.call_node(c.activity_call_id(i)) for i in ids] == [
        "root",
        "left",
        "right",
        "__post_run_review",
    ]
    assert not any("call_id" in json.loads(a.input.payloads[0].data) for a in scheduled)
    # The activity took its call from its id: each node's reply went to its transcript.
    for node_id in ("root", "left", "right"):
        assert (harness.home / "runs" / run_id / c.transcript_key(node_id)).exists()
    await harness.replay(run_id)


async def _written(path: Path, timeout: float = 10.0) -> None:
    """Wait for a file written in the background."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not path.exists():
        assert loop.time() < deadline, f"{path} was never written"
        await asyncio.sleep(0.05)


async def test_a_dags_history_leaves_out_what_it_holds_already(harness: Harness) -> None:
    from bench.scale import dag
    from openflow.client import SA_TENANT
    from openflow.engine.events import UsageReported

    harness.script({}, exhausted="echo")
    wf = dag()
    run_id = await harness.start(wf, entrypoint="bench")
    result = await harness.result(run_id)
    assert result.status == "completed", result
    history = await harness.handle(run_id).fetch_history()
    found = breakdown(history)
    # The start: no run id (its workflow id), no node's kind, origin or label that is its id,
    # no empty tenant; it reads back as the very workflow the client stored.
    started = history.events[0].workflow_execution_started_event_attributes
    start = json.loads(started.input.payloads[0].data)
    assert "run_id" not in start
    assert all(set(n) == {"id", "agent"} for n in start["workflow"]["nodes"])
    assert c.RunInput.model_validate(start).workflow == wf
    # The children's agents are the root's: they travel as a reference to it.
    assert [n["agent"] for n in start["workflow"]["nodes"][1:]] == [["root"], ["root"]]
    assert c.SA_TENANT not in started.search_attributes.indexed_fields
    assert (await harness.handle(run_id).describe()).typed_search_attributes.get(SA_TENANT) is None
    assert run_id in [r.run_id for r in await harness.runs.list()]
    # The calls: no provider (the header names it), a JSON handoff as its format.
    turns = [v for _, v in _turn_inputs(history)]
    assert len(turns) == 4 and not any("provider_id" in v for v in turns)
    assert [v.get("handoff") for v in turns] == ["json", "json", "json", None]
    # The results: no wire, model, zero cost or transcript length, which the call asked for.
    results = [v for _, _, v in found.of("model_turn result")]
    assert len(results) == 4
    for value in results:
        assert "persisted_len" not in value
        assert not {"wire", "model"} & set(value["reply"])
        assert "cost_usd" not in value["reply"]["usage"]
        # An output with an empty message travels as the output; the usage as its counts.
        assert [set(call) for call in value["reply"]["tool_calls"]] == [{"id", "output"}]
        assert value["reply"]["usage"] == [100, 10]
    assert "error" not in json.loads(
        history.events[-1].workflow_execution_completed_event_attributes.result.payloads[0].data
    )
    # The engine saw each reply whole: its model and a cost of 0.0 (not an unknown one).
    usage = [e for e in await harness.events(run_id) if isinstance(e, UsageReported)]
    assert len(usage) == 4
    assert all(e.model == "bench-model" and e.usage.cost_usd == 0.0 for e in usage)
    assert (await harness.state(run_id)).usage.run.estimated_cost_usd == 0.0
    await harness.replay(run_id)


async def test_a_priced_reply_carries_its_cost(harness: Harness) -> None:
    settings = harness.home / "settings.json"
    harness.script({}, exhausted="echo")
    data = json.loads(settings.read_text())
    data["prices"] = {"test-model": {"input": 1.0, "output": 2.0}}
    settings.write_text(json.dumps(data))
    run_id = await harness.start(make_workflow([node("only", model="test-model")], []))
    result = await harness.result(run_id)
    assert result.status == "completed", result
    history = await harness.handle(run_id).fetch_history()
    results = [v for _, _, v in breakdown(history).of("model_turn result")]
    assert results and all(v["reply"]["usage"]["cost_usd"] > 0 for v in results)
    assert "wire" not in results[0]["reply"]
    assert (await harness.state(run_id)).usage.run.estimated_cost_usd > 0
    await harness.replay(run_id)


async def test_a_dags_history_leaves_out_what_the_workflow_works_out(harness: Harness) -> None:
    from openflow.engine.events import NodeCompleted
    from openflow.engine.policy import HARNESS_SUBMIT

    run_id, result, history = await _completed_dag(harness)
    found = breakdown(history)
    # The run's result: its outputs, not its run id (the workflow id says it).
    ended = history.events[-1].workflow_execution_completed_event_attributes
    assert "run_id" not in json.loads(ended.result.payloads[0].data)
    assert set(result.outputs) == {"root", "left", "right"}
    # The start's result leaves out its provider: the one profile.
    [(_, _, prepared)] = found.of("prepare_run result")
    assert list(prepared["profiles"]) == ["scripted"] and "active_provider" not in prepared
    # The turns' results say neither that they stored a handoff nor the submit tool's name...
    results = [v for _, _, v in found.of("model_turn result")]
    assert len(results) == 4 and not any("handoff_stored" in v for v in results)
    assert HARNESS_SUBMIT not in json.dumps(results)
    # ...yet each node's handoff was the turn's: no handoff activity, every manifest known.
    types = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert c.ACTIVITY_HANDOFF not in types
    done = {e.node_id: e for e in await harness.events(run_id) if isinstance(e, NodeCompleted)}
    assert set(done) == {"root", "left", "right"}
    assert all(e.handoff and e.handoff["format"] == "json" for e in done.values())
    # The review names the nodes whose outputs their handoff files hold, and runs no reads.
    by_node = {c.call_node(v["call_id"]): v for _, v in _turn_inputs(history)}
    review = by_node["__post_run_review"]
    assert review["header_recipe"]["outputs"] == ["root", "left", "right"]
    evidence = review["header_recipe"]["patch"]["runEvidence"]
    assert "nodes" not in evidence and "summary" not in json.dumps(review)
    assert "eager" not in review
    # Each turn is named in the Web UI by what it is and its node.
    summaries = [
        json.loads(e.user_metadata.summary.data)
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert summaries == [
        "model turn · root",
        "model turn · left",
        "model turn · right",
        "post-run review",
    ]
    await harness.replay(run_id)
