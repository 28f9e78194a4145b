"""Capture the replay corpus: `python -m tests.workflows.corpus.capture [--list] [NAME ...]`.

Each scenario drives real runs on a fresh embedded Temporal dev server with the `scripted`
provider and keeps every execution of them (a resumed run or one continued as new has
several) as `<scenario>.json.gz`, or `<scenario>.<n>.json.gz` from the second execution on.
`test_corpus_replay.py` replays them all under the sandbox, so a change that breaks
determinism for runs in flight fails CI.

With names, only those scenarios are captured again; the other files stay. Re-capture a
scenario when you add one or when its shape changes on purpose (a new event, a new activity):
the files captured before still show that the runs those versions started replay, so keep
them under a new name rather than overwrite them when a change is meant to be compatible.

`--out DIR` writes into DIR instead: `epoch-1/` and `epoch-5/` hold the scenarios as runs
recorded under those patch epochs (`openflow/workflows/patches.py`); the files beside them were
recorded before the first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter

from openflow.backends import open_backends
from openflow.client import RunConflict, Runs
from openflow.contracts import Action, CallDecision, ToolGrant
from openflow.engine import WorkflowRunState
from openflow.engine.spec import Workflow
from openflow.server import EmbeddedServer, free_port
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker
from tests.workflows.conftest import Harness, make_workflow, node

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
Scenario = Callable[[Harness], Awaitable[list[str]]]
SCENARIOS: dict[str, Scenario] = {}
# Scenarios that need the server to suggest continue-as-new early (a short history limit).
SHORT_HISTORY: set[str] = set()


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def yolo(node_id: str, **agent: Any) -> dict[str, Any]:
    return node(node_id, tools={"approvalMode": "yolo"}, **agent)


def write(path: str, content: str, call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": "write", "args": {"path": path, "content": content}}
    if call_id:
        call["id"] = call_id
    return call


def tools(*calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"tools": list(calls), **extra}


def summary(text: str) -> dict[str, Any]:
    return {"submit": {"summary": text}}


async def completed(h: Harness, run_id: str) -> list[str]:
    result = await h.result(run_id)
    assert result.status == "completed", (run_id, result.status, result.error)
    return [run_id]


async def approve_all(h: Harness, run_id: str, allow: bool = True) -> None:
    """Answer every approval the run asks for until it ends."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while (await h.handle(run_id).describe()).status.name == "RUNNING":  # type: ignore[union-attr]
        assert loop.time() < deadline, f"{run_id} did not end"
        state = await h.state(run_id)
        for pending in state.pending_approvals:
            action = Action(kind="approval", approval_id=pending.approval_id, allow=allow)
            await h.runs.act(run_id, action)
        await asyncio.sleep(0.05)


async def until_asked(h: Harness, run_id: str, node_id: str) -> None:
    await h.wait_for(run_id, lambda s: node_id in s.awaiting_node_ids)


# --- shapes of a graph -------------------------------------------------------------------


@scenario
async def single_node(h: Harness) -> list[str]:
    h.script({})
    return await completed(h, await h.start(make_workflow([node("only")], []), "hello"))


@scenario
async def chain(h: Harness) -> list[str]:
    h.script({})
    wf = make_workflow([node("a"), node("b"), node("c")], [("a", "b"), ("b", "c")])
    return await completed(h, await h.start(wf, "ship it"))


def diamond(**settings: Any) -> Workflow:
    return make_workflow(
        [node("idea"), node("plan"), node("risk"), node("join")],
        [("idea", "plan"), ("idea", "risk"), ("plan", "join"), ("risk", "join")],
        **settings,
    )


@scenario
async def branch_and_join(h: Harness) -> list[str]:
    h.script({"plan": [summary("plan")], "risk": [summary("risk")]})
    return await completed(h, await h.start(diamond()))


@scenario
async def strict_layers(h: Harness) -> list[str]:
    h.script({"plan": [summary("plan"), summary("x")], "risk": [{"echo": True, "delay_ms": 300}]})
    return await completed(h, await h.start(diamond(strictLayers=True)))


@scenario
async def markdown_handoff(h: Harness) -> list[str]:
    template = "# Notes\n\n## Highlights\n"
    h.script({"notes": [{"submit": {"markdown": "# Notes\n\n## Highlights\n- faster\n"}}]})
    wf = make_workflow(
        [
            node("notes", handoff={"format": "markdown", "template": template}),
            node("after"),
        ],
        [("notes", "after")],
    )
    return await completed(h, await h.start(wf))


@scenario
async def demo(h: Harness) -> list[str]:
    wf = Workflow.load_json((ROOT / "examples" / "release_notes.workflow.json").read_text())
    script = json.loads((ROOT / "examples" / "release_notes.script.json").read_text())
    h.script(script, exhausted=None)
    run_id = await h.start(wf, "the changes since 1.2")
    await approve_all(h, run_id)
    return await completed(h, run_id)


# --- people --------------------------------------------------------------------------------


def asking() -> Workflow:
    return make_workflow([node("ask", requestUserInput=True)], [])


@scenario
async def input_by_update(h: Harness) -> list[str]:
    h.script({"ask": [{"ask": "Which name?"}, {"echo": True}]})
    run_id = await h.start(asking())
    await until_asked(h, run_id, "ask")
    await h.runs.act(run_id, Action(kind="input", node_id="ask", text="Ada"))
    return await completed(h, run_id)


@scenario
async def input_by_signal(h: Harness) -> list[str]:
    h.script({"ask": [{"ask": "Which name?"}, {"ask": "Sure?"}, {"echo": True}]})
    run_id = await h.start(asking())
    for text in ("Ada", "yes"):
        await h.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
        before = len((await h.state(run_id)).chat_logs["ask"])
        await h.handle(run_id).signal("submit_user_input", {"node_id": "ask", "text": text})
        await h.wait_for(run_id, lambda s, n=before: len(s.chat_logs["ask"]) > n)
    return await completed(h, run_id)


@scenario
async def structured_question(h: Harness) -> list[str]:
    question = {
        "questions": [
            {
                "id": "colour",
                "header": "Colour",
                "question": "Which colour?",
                "options": [
                    {"label": "Blue", "description": "calm"},
                    {"label": "Red", "description": "loud"},
                ],
            }
        ]
    }
    h.script({"ask": [{"question": question}, {"echo": True}]})
    run_id = await h.start(asking())
    await until_asked(h, run_id, "ask")
    await h.runs.act(run_id, Action(kind="input", node_id="ask", text="Blue"))
    return await completed(h, run_id)


@scenario
async def approval_allowed(h: Harness) -> list[str]:
    h.script({"act": [tools(write("x.txt", "x")), summary("wrote")]})
    run_id = await h.start(make_workflow([node("act")], []))
    await approve_all(h, run_id)
    return await completed(h, run_id)


@scenario
async def approval_denied(h: Harness) -> list[str]:
    h.script({"act": [tools(write("x.txt", "x")), summary("gave up")]})
    run_id = await h.start(make_workflow([node("act")], []))
    state = await h.wait_for(run_id, lambda s: s.pending_approvals)
    approval_id = state.pending_approvals[0].approval_id
    action = Action(kind="approval", approval_id=approval_id, allow=False, reason="not now")
    await h.runs.act(run_id, action)
    return await completed(h, run_id)


@scenario
async def approval_by_signal(h: Harness) -> list[str]:
    h.script({"act": [tools(write("x.txt", "x"), write("y.txt", "y")), summary("wrote")]})
    run_id = await h.start(make_workflow([node("act")], []))
    state = await h.wait_for(run_id, lambda s: s.pending_approvals)
    approval_id = state.pending_approvals[0].approval_id
    await h.handle(run_id).signal(
        "submit_tool_approval", {"approval_id": approval_id, "allow": True}
    )
    return await completed(h, run_id)


@scenario
async def approval_per_call(h: Harness) -> list[str]:
    """One call allowed, one denied, one edited; a grant that saves the next pause, revoked."""
    three = tools(write("a.txt", "a"), write("b.txt", "b"), write("c.txt", "c"))
    later = [{**tools(write("docs/d.md", "d")), "delay_ms": 1000}, tools(write("docs/e.md", "e"))]
    h.script({"act": [three, *later, summary("wrote")]})
    run_id = await h.start(make_workflow([node("act")], []))
    state = await h.wait_for(run_id, lambda s: s.pending_approvals)
    pending = state.pending_approvals[0]
    ids = [call.id for call in pending.tool_calls]
    decisions = [
        CallDecision(call_id=ids[0], allow=True),
        CallDecision(call_id=ids[1], allow=False, reason="not b"),
        CallDecision(call_id=ids[2], allow=True, arguments={"path": "c2.txt", "content": "C"}),
    ]
    action = Action(
        kind="approval",
        approval_id=pending.approval_id,
        decisions=decisions,
        remember=ToolGrant(tool="write", path_prefix="docs/"),
        by="Ada",
    )
    await h.runs.act(run_id, action)
    revoke = Action(kind="revoke_grant", tool="write", path_prefix="docs/", by="Ada")
    await h.runs.act(run_id, revoke)
    await approve_all(h, run_id)
    return await completed(h, run_id)


@scenario
async def reads_always_asked(h: Harness) -> list[str]:
    h.script({"look": [tools({"name": "ls", "args": {"path": "."}}), summary("looked")]})
    wf = make_workflow([node("look", tools={"approvalMode": "always_ask"})], [])
    run_id = await h.start(wf)
    await approve_all(h, run_id)
    return await completed(h, run_id)


@scenario
async def parallel_approvals(h: Harness) -> list[str]:
    h.script(
        {
            "left": [tools(write("l.txt", "l")), summary("left")],
            "right": [tools(write("r.txt", "r")), summary("right")],
        }
    )
    wf = make_workflow(
        [node("start"), node("left"), node("right"), node("end")],
        [("start", "left"), ("start", "right"), ("left", "end"), ("right", "end")],
    )
    run_id = await h.start(wf)
    await approve_all(h, run_id)
    return await completed(h, run_id)


@scenario
async def message_at_a_pause(h: Harness) -> list[str]:
    h.script({"ask": [{"ask": "Which name?"}, {"echo": True}]})
    run_id = await h.start(asking())
    await until_asked(h, run_id, "ask")
    await h.handle(run_id).signal("send_message", {"node_id": "ask", "text": "Ada"})
    return await completed(h, run_id)


@scenario
async def message_while_working(h: Harness) -> list[str]:
    h.script(
        {"work": [tools({"name": "ls", "args": {"path": "."}}, delay_ms=1500), summary("done")]}
    )
    run_id = await h.start(make_workflow([node("work", requestUserInput=True)], []))
    await h.wait_for(run_id, lambda s: s.status_by_node["work"] == "started")
    await h.handle(run_id).signal("send_message", {"node_id": "work", "text": "use short names"})
    return await completed(h, run_id)


# --- failures and retries ------------------------------------------------------------------


@scenario
async def transient_backoff(h: Harness) -> list[str]:
    busy = {"error": "transient", "message": "overloaded"}
    h.script({"flaky": [busy, busy, summary("finally")]})
    wf = make_workflow([node("flaky")], [], retry_policy={"max_attempts": 3, "backoff_ms": 10})
    return await completed(h, await h.start(wf))


@scenario
async def retry_after_failure(h: Harness) -> list[str]:
    h.script({"fragile": [{"error": "permanent", "message": "bad key"}, summary("ok")]})
    run_id = await h.start(make_workflow([node("fragile")], []))
    await h.wait_for(run_id, lambda s: s.status_by_node["fragile"] == "failed")
    await h.runs.act(run_id, Action(kind="retry", node_id="fragile"))
    return await completed(h, run_id)


@scenario
async def input_retries_a_failed_node(h: Harness) -> list[str]:
    h.script({"fragile": [{"error": "permanent", "message": "bad key"}, summary("ok")]})
    run_id = await h.start(make_workflow([node("fragile")], []))
    await h.wait_for(run_id, lambda s: s.status_by_node["fragile"] == "failed")
    await h.runs.act(run_id, Action(kind="input", node_id="fragile", text="use the other key"))
    return await completed(h, run_id)


@scenario
async def message_during_the_last_turn(h: Harness) -> list[str]:
    h.script({"work": [dict(summary("early"), delay_ms=1500), summary("with the message")]})
    run_id = await h.start(make_workflow([node("work", requestUserInput=True)], []))
    await h.wait_for(run_id, lambda s: s.status_by_node["work"] == "started")
    await h.handle(run_id).signal("send_message", {"node_id": "work", "text": "add the budget"})
    return await completed(h, run_id)


@scenario
async def retry_with_message_by_signal(h: Harness) -> list[str]:
    h.script({"fragile": [{"error": "failed", "message": "no"}, summary("ok")]})
    run_id = await h.start(make_workflow([node("fragile")], []))
    await h.wait_for(run_id, lambda s: s.status_by_node["fragile"] == "failed")
    await h.handle(run_id).signal("retry_node", {"node_id": "fragile", "message": "try again"})
    return await completed(h, run_id)


@scenario
async def output_repair(h: Harness) -> list[str]:
    h.script(
        {
            "shape": [{"submit_raw": "{not json"}],
            "shape__output_repair": [
                {"submit": {"repaired_arguments": {"output": {"summary": "repaired"}}}}
            ],
        },
        exhausted=None,
    )
    wf = make_workflow([node("shape")], [], outputRepairModel="test-model")
    return await completed(h, await h.start(wf))


@scenario
async def start_fails(h: Harness) -> list[str]:
    h.script({})
    wf = make_workflow([node("a")], [], provider_id="no-such-provider")
    run_id = await h.start(wf)
    assert (await h.result(run_id)).status == "failed"
    return [run_id]


# --- tools ---------------------------------------------------------------------------------


@scenario
async def write_batch(h: Harness) -> list[str]:
    batch = tools(write("a.txt", "a"), write("b.txt", "b"), write("c/d.txt", "d"))
    h.script({"many": [batch, summary("three files")]})
    return await completed(h, await h.start(make_workflow([yolo("many")], [])))


@scenario
async def edit_and_bash(h: Harness) -> list[str]:
    edit = {"name": "edit", "args": {"path": "a.txt", "old_string": "one", "new_string": "two"}}
    h.script(
        {
            "work": [
                tools(write("a.txt", "one\n")),
                tools(edit),
                tools({"name": "bash", "args": {"command": "cat a.txt"}}),
                summary("edited"),
            ]
        }
    )
    return await completed(h, await h.start(make_workflow([yolo("work")], [])))


@scenario
async def eager_reads(h: Harness) -> list[str]:
    h.script(
        {
            "look": [
                tools(write("n.txt", "hi")),
                tools({"name": "read", "args": {"path": "n.txt"}}, {"name": "ls", "args": {}}),
                summary("looked"),
            ]
        }
    )
    return await completed(h, await h.start(make_workflow([yolo("look")], [])))


@scenario
async def tool_errors(h: Harness) -> list[str]:
    h.script(
        {
            "work": [
                tools({"name": "read", "args": {"path": "missing.txt"}}),
                tools({"name": "bash", "args": {"command": "exit 3"}}),
                summary("coped"),
            ]
        }
    )
    return await completed(h, await h.start(make_workflow([yolo("work")], [])))


@scenario
async def read_only_node(h: Harness) -> list[str]:
    h.script({"look": [tools(write("x.txt", "x")), summary("could not write")]})
    wf = make_workflow([node("look", tools={"approvalMode": "read_only"})], [])
    return await completed(h, await h.start(wf))


# --- stop, resume, long runs ---------------------------------------------------------------


@scenario
async def stop_mid_tool_then_resume(h: Harness) -> list[str]:
    sleep = {"name": "bash", "args": {"command": "sleep 30"}, "id": "call-sleep"}
    h.script({"slow": [tools(sleep), summary("resumed")]})
    run_id = await h.start(make_workflow([yolo("slow")], []))
    await h.wait_for(run_id, lambda s: s.status_by_node["slow"] == "running_tool")
    await h.handle(run_id).cancel()
    assert (await h.result(run_id)).status == "stopped"
    await h.runs.resume(run_id)
    return await completed(h, run_id)


@scenario
async def stop_at_input_then_resume(h: Harness) -> list[str]:
    h.script({"ask": [{"ask": "Which colour?"}, {"echo": True}]})
    run_id = await h.start(asking())
    await until_asked(h, run_id, "ask")
    await h.runs.stop(run_id)
    assert (await h.result(run_id)).status == "stopped"
    await h.runs.resume(run_id)
    await until_asked(h, run_id, "ask")
    await h.runs.act(run_id, Action(kind="input", node_id="ask", text="blue"))
    return await completed(h, run_id)


@scenario
async def resume_after_failure(h: Harness) -> list[str]:
    h.script({"a": [summary("a")], "b": [{"error": "permanent", "message": "down"}]})
    run_id = await h.start(make_workflow([node("a"), node("b")], [("a", "b")]))
    await h.wait_for(run_id, lambda s: s.status_by_node["b"] == "failed")
    await h.runs.stop(run_id)
    assert (await h.result(run_id)).status == "stopped"
    await h.runs.resume(run_id)
    await h.wait_for(run_id, lambda s: s.status_by_node["b"] == "failed")
    await h.runs.act(run_id, Action(kind="retry", node_id="b"))
    return await completed(h, run_id)


@scenario
async def continue_as_new(h: Harness) -> list[str]:
    turns = [tools({"name": "ls", "args": {"path": "."}}) for _ in range(16)]
    h.script({"busy": [*turns, summary("done")]})
    return await completed(h, await h.start(make_workflow([node("busy")], [])))


SHORT_HISTORY.add("continue_as_new")


def _running_tool(node_id: str) -> Callable[[WorkflowRunState], bool]:
    def check(state: WorkflowRunState) -> bool:
        rows = state.tool_calls_by_node.get(node_id, [])
        return any(row.status == "running" for row in rows)

    return check


@scenario
async def interrupt_then_retry(h: Harness) -> list[str]:
    """One node interrupted in a slow bash while another goes on, then retried with a message."""
    sleep = {"name": "bash", "args": {"command": "sleep 30"}, "id": "call-sleep"}
    h.script({"slow": [tools(sleep), summary("again")], "other": [summary("other")]})
    run_id = await h.start(make_workflow([yolo("slow"), yolo("other")], []))
    await h.wait_for(run_id, _running_tool("slow"))
    await h.runs.interrupt(run_id, "slow")
    await h.wait_for(run_id, lambda s: s.status_by_node["slow"] == "interrupted")
    await h.runs.act(run_id, Action(kind="retry", node_id="slow", message="skip it"))
    return await completed(h, run_id)


@scenario
async def interrupt_by_signal_then_resume_with_message(h: Harness) -> list[str]:
    """An interrupt by signal (and one for a node that is not running), a stop, a resume
    with a message for the interrupted node."""
    sleep = {"name": "bash", "args": {"command": "sleep 30"}, "id": "call-sleep"}
    h.script({"slow": [tools(sleep), summary("resumed")]})
    run_id = await h.start(make_workflow([yolo("slow")], []))
    await h.wait_for(run_id, _running_tool("slow"))
    await h.handle(run_id).signal("interrupt_node", {"node_id": "nope"})
    await h.handle(run_id).signal("interrupt_node", {"node_id": "slow"})
    await h.wait_for(run_id, lambda s: s.status_by_node["slow"] == "interrupted")
    await h.runs.stop(run_id)
    await h.result(run_id)
    await h.runs.resume(run_id, "slow", "carry on")
    return await completed(h, run_id)


@scenario
async def revert_edit_batches(h: Harness) -> list[str]:
    """A revert restored, one refused after a later edit, at a pause."""
    h.script(
        {
            "edit": [
                tools(write("a.txt", "after a", "call-a")),
                tools(write("b.txt", "after b", "call-b")),
                {"ask": "More?"},
                summary("edited"),
            ]
        }
    )
    run_id = await h.start(make_workflow([yolo("edit", requestUserInput=True)], []))
    await until_asked(h, run_id, "edit")
    state = await h.state(run_id)
    by_call = {b.tool_call_id: b.batch_id for b in state.edit_batches}
    await h.runs.revert(run_id, by_call["call-a"])
    folder = (await h.handle(run_id).query("checkpoint", result_type=dict))["input"]
    (Path(folder["execution_dir"]) / "b.txt").write_text("by hand")
    with contextlib.suppress(RunConflict):
        await h.runs.revert(run_id, by_call["call-b"])
    await h.runs.act(run_id, Action(kind="input", node_id="edit", text="no"))
    return await completed(h, run_id)


# --- subagents, plan mode, review ----------------------------------------------------------

SCOUT = "lead-subagent-1"


@scenario
async def subagents(h: Harness) -> list[str]:
    (h.home / "agents.json").write_text(
        json.dumps(
            {
                "agents": [
                    {
                        "id": "reviewer",
                        "name": "Reviewer",
                        "systemPrompt": "You review notes.",
                        "outputSchema": {
                            "type": "object",
                            "properties": {"verdict": {"type": "string"}},
                            "required": ["verdict"],
                        },
                        "tools": {"approvalMode": "read_only"},
                    }
                ]
            }
        )
    )
    declare = {
        "name": "openflow_declare_subagents",
        "args": {"subagents": [{"name": "scout", "purpose": "Write notes."}]},
    }
    call_scout = {
        "name": "openflow_call_subagent",
        "args": {"subagent_id": SCOUT, "input": "write notes.txt"},
    }
    call_reviewer = {
        "name": "openflow_call_subagent",
        "args": {"subagent_id": "reviewer", "input": "review notes.txt"},
    }
    h.script(
        {
            "lead": [tools(declare, call_scout), tools(call_reviewer), summary("lead done")],
            SCOUT: [tools(write("notes.txt", "hi\n")), summary("notes written")],
            "reviewer": [
                tools({"name": "read", "args": {"path": "notes.txt"}}),
                {"submit": {"verdict": "complete"}},
            ],
        },
        exhausted=None,
    )
    run_id = await h.start(make_workflow([node("lead", callableAgents=["reviewer"])], []))
    await approve_all(h, run_id)
    return await completed(h, run_id)


@scenario
async def subagent_stopped_then_resumed(h: Harness) -> list[str]:
    declare = {
        "name": "openflow_declare_subagents",
        "args": {"subagents": [{"name": "scout", "purpose": "Write notes."}]},
    }
    call = {"name": "openflow_call_subagent", "args": {"subagent_id": SCOUT, "input": "go"}}
    h.script(
        {
            "lead": [tools(declare, call), tools(call), summary("lead done")],
            SCOUT: [
                tools({"name": "bash", "args": {"command": "sleep 30"}}),
                summary("second try"),
            ],
        },
        exhausted=None,
    )
    run_id = await h.start(make_workflow([yolo("lead")], []))
    await h.wait_for(run_id, lambda s: s.status_by_node.get(SCOUT) == "running_tool")
    await h.runs.stop(run_id)
    assert (await h.result(run_id)).status == "stopped"
    await h.runs.resume(run_id)
    return await completed(h, run_id)


@scenario
async def plan_mode(h: Harness) -> list[str]:
    packet = {"scope": "export", "slices": ["csv"]}
    seal = {"name": "openflow_write_plan_artifact", "args": {}}
    h.script(
        {
            "freeze": [
                tools(write("run://PLAN.md", "# Plan\n- csv\n")),
                summary("too early"),
                tools(seal),
                {"submit": packet},
            ],
            "build": [summary("built")],
        },
        exhausted=None,
    )
    schema = {"type": "object", "properties": {"scope": {"type": "string"}}}
    wf = make_workflow(
        [node("freeze", requestUserInput=True, output_schema=schema), node("build")],
        [("freeze", "build")],
        planMode={"evidenceSourceNodeId": "freeze"},
    )
    run_id = await h.start(wf)
    await approve_all(h, run_id)
    return await completed(h, run_id)


@scenario
async def review_suggestions(h: Harness) -> list[str]:
    suggestion = {
        "category": "prompt",
        "targetNodeId": "write",
        "title": "Name the audience",
        "evidence": "the draft had to guess who reads it",
        "recommendation": "Say who the notes are for in the task prompt.",
    }
    h.script(
        {
            "write": [summary("notes")],
            "__post_run_review": [{"submit": {"suggestions": [suggestion]}}],
        }
    )
    return await completed(h, await h.start(make_workflow([node("write")], [])))


@scenario
async def stopped_during_review(h: Harness) -> list[str]:
    h.script(
        {
            "write": [summary("notes")],
            "__post_run_review": [{"message": "thinking", "delay_ms": 30_000}],
        }
    )
    run_id = await h.start(make_workflow([node("write")], []))
    await h.wait_for(run_id, lambda s: s.status_by_node["write"] == "completed")
    for _ in range(200):
        history = await h.handle(run_id).fetch_history()
        if any(b"post-run review" in e.user_metadata.summary.data for e in history.events):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    await h.handle(run_id).cancel()
    return await completed(h, run_id)


# --- what nobody should send ---------------------------------------------------------------


@scenario
async def malformed_signals_ignored(h: Harness) -> list[str]:
    h.script({"ask": [{"ask": "Which name?"}, {"echo": True}]})
    run_id = await h.start(asking())
    await until_asked(h, run_id, "ask")
    handle = h.handle(run_id)
    await handle.signal("submit_user_input")
    await handle.signal("submit_user_input", None)
    await handle.signal("submit_user_input", {"node_id": 5, "text": "x"})
    await handle.signal("submit_user_input", {"node_id": "ask"})
    await handle.signal("submit_user_input", args=[{"node_id": "ask", "text": "x"}, {}])
    await handle.signal("submit_tool_approval", {"approval_id": {"x": 1}, "allow": "maybe"})
    await handle.signal("retry_node", [1, 2])
    await handle.signal("send_message", {"node_id": "ask", "text": ["x"]})
    await handle.signal("submit_user_input", RawValue(_undecodable()))
    await handle.signal("retry_node", {"node_id": "ask"})
    await handle.signal("submit_user_input", {"node_id": "ask", "text": "Ada"})
    return await completed(h, run_id)


def _undecodable() -> Any:
    from temporalio.api.common.v1 import Payload

    return Payload(metadata={"encoding": b"binary/unknown"}, data=b"\x00")


# --- webhooks ------------------------------------------------------------------------------


class _Accept(BaseHTTPRequestHandler):
    """A webhook receiver that takes every notice."""

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@scenario
async def webhooks_told(h: Harness) -> list[str]:
    """A paused and a completed notice, each through its `OpenFlowNotice` child."""
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Accept)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        h.script({"ask": [{"ask": "Which name?"}, {"echo": True}]})
        settings = json.loads((h.home / "settings.json").read_text())
        url = f"http://127.0.0.1:{receiver.server_port}/hook"
        settings["webhooks"] = [{"url": url, "secret": "corpus-secret"}]
        (h.home / "settings.json").write_text(json.dumps(settings))
        run_id = await h.start(asking())
        await until_asked(h, run_id, "ask")
        await h.handle(run_id).execute_update(
            "act", Action(kind="input", node_id="ask", text="Ada")
        )
        await completed(h, run_id)
        history = await h.handle(run_id).fetch_history()
        children = [
            e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
            for e in history.events
            if e.HasField("child_workflow_execution_started_event_attributes")
        ]
        for child in children:
            await h.client.get_workflow_handle(child).result()
        return [run_id, *children]
    finally:
        receiver.shutdown()
        receiver.server_close()


# --- capture -------------------------------------------------------------------------------


class _ShortHistoryServer(EmbeddedServer):
    """A dev server that suggests continue-as-new after a few dozen history events."""

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--dynamic-config-value",
            "limit.historyCount.suggestContinueAsNew=60",
        ]


async def _executions(client: Client, workflow_id: str) -> list[Any]:
    """Every execution of `workflow_id`, first to last."""
    query = f'WorkflowId = "{workflow_id}"'
    for _ in range(100):
        found = [e async for e in client.list_workflows(query)]
        latest = await client.get_workflow_handle(workflow_id).describe()
        if any(e.run_id == latest.run_id for e in found):
            return sorted(found, key=lambda e: e.start_time)
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility never listed the last execution of {workflow_id}")


async def _capture(names: list[str], short: bool, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        kind = _ShortHistoryServer if short else EmbeddedServer
        server = kind(home, address=f"127.0.0.1:{free_port()}", ui_port=free_port(), ui=False)
        async with server:
            client = await server.connect(data_converter=pydantic_data_converter)
            for name in names:
                run_home = home / name
                run_home.mkdir()
                queue = f"corpus-{name}"
                write_scripted_settings(run_home, {})
                async with build_worker(client, queue, run_home):
                    h = Harness(client, queue, run_home)
                    # The runs' client stores their workflows where the worker reads them.
                    h.runs = Runs(client, queue, store=open_backends(run_home).store)
                    run_ids = await SCENARIOS[name](h)
                for old in out.glob(f"{name}.*json.gz"):
                    old.unlink()
                n = 0
                for run_id in run_ids:
                    for execution in await _executions(client, run_id):
                        handle = client.get_workflow_handle(run_id, run_id=execution.run_id)
                        history = await handle.fetch_history()
                        data = json.dumps(json.loads(history.to_json()), separators=(",", ":"))
                        n += 1
                        path = out / (f"{name}.json.gz" if n == 1 else f"{name}.{n}.json.gz")
                        path.write_bytes(gzip.compress(data.encode(), mtime=0))
                print(f"{name}: {n} execution(s)", flush=True)


async def capture(names: list[str], out: Path = HERE) -> None:
    """Capture `names` (every scenario when empty) into `out`."""
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}; see --list")
    chosen = names or list(SCENARIOS)
    normal = [n for n in chosen if n not in SHORT_HISTORY]
    short = [n for n in chosen if n in SHORT_HISTORY]
    if normal:
        await _capture(normal, False, out)
    if short:
        await _capture(short, True, out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.workflows.corpus.capture", description=__doc__.splitlines()[0]
    )
    parser.add_argument("names", nargs="*", help="scenarios to capture again (default: all)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--out", type=Path, default=HERE, help="the folder to write into")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(SCENARIOS))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(capture(args.names, args.out))


if __name__ == "__main__":
    main(sys.argv[1:])
