"""Nothing anyone sends can harm a run: malformed signals, updates and queries on a live run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.common import RawValue

from openflow.contracts import Action
from openflow.engine import WorkflowRunState
from openflow.engine.events import ChatLogMessage
from openflow.server import EmbeddedServer, find_temporal_binary
from openflow.workflows.handlers import SIGNALS
from openflow.workflows.run import OpenFlowRun
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_every_handler_reads_its_own_arguments() -> None:
    """A handler added later must go through `openflow.workflows.handlers` too."""
    defn = workflow._Definition.must_from_class(OpenFlowRun)
    for name, signal in defn.signals.items():
        assert name in SIGNALS and getattr(signal.fn, "__openflow_gated__", False), (
            f"signal {name!r} must be registered with handlers.action_signal"
        )
    handlers = [*defn.queries.items(), *defn.updates.items()]
    for name, handler in handlers:
        assert handler.arg_types is None, f"{name!r} must take *args and read them itself"
    assert all(update.validator is not None for update in defn.updates.values())


NO_ARG = object()


class Two:
    """Two arguments at once (`handle.signal(name, args=[...])`)."""

    def __init__(self, *args: Any) -> None:
        self.args = list(args)


def malformed(name: str, node_id: str, approval_id: str) -> list[Any]:
    """Payloads `name` must ignore while `node_id` (or `approval_id`) waits for it."""
    shapes: list[Any] = [NO_ARG, None, 5, "text", True, [], [{"node_id": node_id}], {}]
    by_signal: dict[str, list[Any]] = {
        "submit_user_input": [
            {"node_id": 5, "text": "x"},
            {"node_id": node_id, "text": ["x"]},
            {"node_id": {"id": node_id}, "text": "x"},
            {"node_id": node_id},
            {"node_id": node_id, "text": None},
            Two({"node_id": node_id, "text": "x"}, {"node_id": node_id, "text": "y"}),
        ],
        "submit_tool_approval": [
            {"approval_id": approval_id, "allow": "maybe"},
            {"approval_id": {"id": approval_id}, "allow": True},
            {"approval_id": approval_id},
            {"allow": True},
            {"approval_id": approval_id, "allow": True, "reason": 7},
            Two({"approval_id": approval_id, "allow": True}, None),
        ],
        "retry_node": [
            {"node_id": 5},
            {"node_id": [node_id]},
            {"node_id": node_id, "message": {"text": "x"}},
            {"message": "again"},
            Two({"node_id": node_id}, {"node_id": node_id}),
        ],
        "send_message": [
            {"node_id": node_id, "text": 3},
            {"node_id": None, "text": "x"},
            {"text": "x"},
            Two({"node_id": node_id, "text": "x"}, "extra"),
        ],
    }
    return shapes + by_signal[name]


async def send(harness: Harness, run_id: str, name: str, payload: Any) -> None:
    handle = harness.handle(run_id)
    if payload is NO_ARG:
        await handle.signal(name)
    elif isinstance(payload, Two):
        await handle.signal(name, args=payload.args)
    else:
        await handle.signal(name, payload)


async def ignored_count(harness: Harness, run_id: str) -> int:
    events = await harness.runs.events(run_id)
    return sum(1 for e in events if e.type == "ActionIgnored")


async def flood(harness: Harness, run_id: str, node_id: str, approval_id: str) -> int:
    """Every signal's malformed payloads; how many were sent."""
    sent = 0
    for name in ("submit_user_input", "submit_tool_approval", "retry_node", "send_message"):
        for payload in malformed(name, node_id, approval_id):
            await send(harness, run_id, name, payload)
            sent += 1
    return sent


async def wait_ignored(harness: Harness, run_id: str, count: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while await ignored_count(harness, run_id) < count:
        assert loop.time() < deadline, "the ignored actions were not recorded"
        await asyncio.sleep(0.05)


async def test_malformed_signals_are_ignored_with_reasons_and_the_run_completes(
    harness: Harness,
) -> None:
    harness.script(
        {
            "ask": [{"ask": "Which name?"}, {"ask": "And the colour?"}, {"echo": True}],
            "edit": [
                {"tools": [{"name": "write", "args": {"path": "n.txt", "content": "n"}}]},
                {"submit": {"summary": "written"}},
            ],
            "flaky": [{"error": "permanent", "message": "bad request"}, {"echo": True}],
        }
    )
    wf = make_workflow(
        [node("ask", requestUserInput=True), node("edit"), node("flaky")],
        [("ask", "edit"), ("edit", "flaky")],
    )
    run_id = await harness.start(wf, entrypoint="go")
    handle = harness.handle(run_id)
    expected = 0

    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    expected += await flood(harness, run_id, "ask", "none")
    # A payload the SDK cannot decode never reaches the workflow: the run does not notice.
    await handle.signal("submit_user_input", RawValue(Payload(metadata={"encoding": b"x/y"})))
    await wait_ignored(harness, run_id, expected)
    state = await harness.state(run_id)
    assert state.status == "paused" and state.awaiting_node_ids == ["ask"]
    await handle.signal("submit_user_input", {"node_id": "ask", "text": "Ada"})
    await harness.wait_for(
        run_id,
        lambda s: (
            s.awaiting_node_ids == ["ask"]
            and any("colour" in m.content for m in s.chat_logs["ask"])
        ),
    )
    await handle.signal("send_message", {"node_id": "ask", "text": "blue"})

    state = await harness.wait_for(run_id, lambda s: s.pending_approvals)
    approval_id = state.pending_approvals[0].approval_id
    expected += await flood(harness, run_id, "edit", approval_id)
    await wait_ignored(harness, run_id, expected)
    assert (await harness.state(run_id)).pending_approvals
    await handle.signal("submit_tool_approval", {"approval_id": approval_id, "allow": True})

    await harness.wait_for(run_id, lambda s: s.status_by_node["flaky"] == "failed")
    expected += await flood(harness, run_id, "flaky", approval_id)
    await wait_ignored(harness, run_id, expected)
    assert (await harness.state(run_id)).status_by_node["flaky"] == "failed"
    await handle.signal("retry_node", {"node_id": "flaky"})

    result = await harness.result(run_id)
    assert result.status == "completed"
    assert (harness.home / "runs" / run_id / "workspace" / "n.txt").read_text() == "n"
    events = await harness.runs.events(run_id)
    ignored = [e for e in events if e.type == "ActionIgnored"]
    assert len(ignored) == expected
    assert all(e.signal and e.reason for e in ignored)
    reasons = {e.reason for e in ignored}
    assert "submit_user_input takes one JSON object {node_id, text}; it came with no payload" in (
        reasons
    )
    assert (
        "submit_tool_approval takes one JSON object {approval_id, allow, reason?, decisions?, remember?, by?}; "
        "it came with 2 arguments"
    ) in reasons
    assert "submit_user_input: text is required" in reasons
    assert "node_id: Input should be a valid string" in reasons
    assert "allow: Input should be a valid boolean, unable to interpret input" in reasons
    # The event describes the payload's shape, never its text.
    shapes = {e.action["payload"] for e in ignored}
    assert "object {node_id: number, text: text}" in shapes
    assert not any(
        "Ada" in str(e.model_dump(mode="json")) or "'x'" in str(e.model_dump(mode="json"))
        for e in ignored
    )
    trace = [t.message for t in (await harness.state(run_id)).run_trace]
    assert sum(1 for m in trace if m.startswith("ignored ")) == expected
    users = [m.content for m in result_chat(await harness.state(run_id), "ask")]
    assert users == ["Ada", "blue"]


def result_chat(state: WorkflowRunState, node_id: str) -> list[ChatLogMessage]:
    return [m for m in state.chat_logs[node_id] if m.role == "user"]


async def test_bad_queries_and_updates_answer_errors_and_leave_the_run_untouched(
    harness: Harness,
) -> None:
    harness.script({"ask": [{"ask": "Which name?"}, {"echo": True}]})
    run_id = await harness.start(make_workflow([node("ask", requestUserInput=True)], []))
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    handle = harness.handle(run_id)
    for arg in ({"after": "x"}, [1], "x", {"after": 1.5}, {"after": True}):
        with pytest.raises(WorkflowQueryFailedError, match="events query takes"):
            await handle.query("events", arg)
    with pytest.raises(WorkflowQueryFailedError, match="2 arguments"):
        await handle.query("events", args=[{"after": 0}, {"after": 1}])
    with pytest.raises(WorkflowQueryFailedError, match="takes no argument"):
        await handle.query("state", {"x": 1})
    assert await handle.query("events", None) == await handle.query("events")
    rejected = {
        "no payload": [],
        "null": [None],
        "kind must be one of input, approval, retry, message, interrupt, revert, budget, revoke_grant": [
            {"kind": "shout"}
        ],
        "kind must be one of": [{"kind": ["input"], "node_id": "ask", "text": "x"}],
        "node_id: Input should be a valid string": [{"kind": "input", "node_id": 5, "text": "x"}],
        "an input action needs text": [{"kind": "input", "node_id": "ask"}],
        "allow: Input should be a valid boolean": [
            {"kind": "approval", "approval_id": "a", "allow": "maybe"}
        ],
        "2 arguments": [{"kind": "retry", "node_id": "ask"}, {}],
    }
    for reason, args in rejected.items():
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update("act", args=args)
        assert reason in str(failed.value.cause), (reason, failed.value.cause)
    history = await handle.fetch_history()
    assert not [
        e
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    state = await harness.state(run_id)
    assert state.status == "paused" and state.awaiting_node_ids == ["ask"]
    await harness.runs.act(run_id, Action(kind="input", node_id="ask", text="Ada"))
    assert (await harness.result(run_id)).status == "completed"


async def test_the_signal_command_without_input_leaves_the_run_alive(
    harness: Harness, temporal_server: EmbeddedServer
) -> None:
    harness.script({"ask": [{"ask": "Which name?"}, {"echo": True}]})
    run_id = await harness.start(make_workflow([node("ask", requestUserInput=True)], []))
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    base = [
        str(find_temporal_binary()),
        "workflow",
        "signal",
        "--address",
        temporal_server.address,
        "--namespace",
        temporal_server.namespace,
        "--workflow-id",
        run_id,
        "--name",
        "submit_user_input",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    done = await asyncio.to_thread(subprocess.run, base, env=env, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    await wait_ignored(harness, run_id, 1)
    [event] = [e for e in await harness.runs.events(run_id) if e.type == "ActionIgnored"]
    assert event.signal == "submit_user_input" and "no payload" in event.reason
    assert (await harness.state(run_id)).status == "paused"
    # The README's form of the command answers the question.
    answer = [*base, "--input", '{"node_id": "ask", "text": "Ada"}']
    done = await asyncio.to_thread(subprocess.run, answer, env=env, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert (await harness.result(run_id)).status == "completed"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
FIELDS = st.sampled_from(["node_id", "text", "approval_id", "allow", "reason", "message", "kind"])
# Near misses too, but none that names the waiting node: the run must still be waiting after.
NEAR = st.sampled_from(["ghost", "input", "approval", "retry", "message", "approval-1"])
ACTIONISH = st.dictionaries(FIELDS, JSON | NEAR, max_size=4)
HANDLERS = st.sampled_from(
    [
        ("signal", "submit_user_input"),
        ("signal", "submit_tool_approval"),
        ("signal", "retry_node"),
        ("signal", "send_message"),
        ("update", "act"),
        ("query", "state"),
        ("query", "events"),
        ("query", "checkpoint"),
        ("query", "events_origin"),
    ]
)
CALLS = st.tuples(HANDLERS, st.lists(ACTIONISH | JSON, max_size=2))


def generated_calls(count: int) -> list[tuple[tuple[str, str], list[Any]]]:
    """`count` hypothesis-generated (handler, arguments) pairs."""
    drawn: list[tuple[tuple[str, str], list[Any]]] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(CALLS)
    def collect(call: tuple[tuple[str, str], list[Any]]) -> None:
        drawn.append(call)

    collect()
    return drawn[:count]


async def test_a_flood_of_generated_payloads_never_fails_the_run(harness: Harness) -> None:
    harness.script({"ask": [{"ask": "Which name?"}, {"echo": True}]})
    run_id = await harness.start(make_workflow([node("ask", requestUserInput=True)], []))
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    handle = harness.handle(run_id)
    signals = 0
    for (kind, name), args in generated_calls(60):
        if kind == "signal":
            await handle.signal(name, args=args)
            signals += 1
        elif kind == "update":
            with contextlib.suppress(WorkflowUpdateFailedError):
                await handle.execute_update("act", args=args)
        else:
            with contextlib.suppress(WorkflowQueryFailedError):
                await handle.query(name, args=args)
    # Every signal was recorded as ignored (none named the waiting node), and the run waits on.
    await wait_ignored(harness, run_id, signals)
    assert await ignored_count(harness, run_id) == signals
    state = await harness.state(run_id)
    assert state.status == "paused" and state.awaiting_node_ids == ["ask"]
    await harness.runs.act(run_id, Action(kind="input", node_id="ask", text="Ada"))
    assert (await harness.result(run_id)).status == "completed"
