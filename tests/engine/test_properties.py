"""Properties of the reducer over random workflows, model behaviour and people.

For random DAGs of 1-6 nodes, random scripted model turns, tool outcomes and human actions:
the same snapshot and facts give the same plan; every snapshot round-trips through JSON; event
numbers are gap-free; every tool call gets exactly one result once its node runs no tools; and a
run always ends completed, failed or stopped, or waits on a person, never idle and stuck.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openflow.engine import advance as engine
from openflow.engine.spec import Workflow
from openflow.engine.state import (
    ActionMalformed,
    ApprovalDecided,
    CancelRequested,
    Fact,
    HandoffStored,
    InputGiven,
    MessageSent,
    ModelFailed,
    ModelReplied,
    Plan,
    ReceiptRead,
    RetryRequested,
    RunSnapshot,
    RunTools,
    TimerFired,
    ToolResultSummary,
    ToolsFinished,
    ToolsLost,
    ToolsOutcomeUnknown,
)
from openflow.engine.transcript import ToolCallItem, ToolResultItem
from tests.engine.driver import (
    Driver,
    Turn,
    agent_node,
    ask,
    call,
    empty,
    failed,
    message,
    mixed,
    ok_summary,
    permanent,
    question,
    seal,
    submit,
    submit_raw,
    tool_bash,
    tool_read,
    tool_write,
    tools,
    transient,
    truncated,
    workflow,
)

NODE_IDS = [f"n{i}" for i in range(6)]
QUESTION = {
    "questions": [
        {
            "id": "pick",
            "header": "Pick",
            "question": "Which one?",
            "options": [
                {"label": "A", "description": "first"},
                {"label": "B", "description": "second"},
            ],
        }
    ]
}
TURNS: list[Turn] = [
    ok_summary("done"),
    submit({"summary": 5}),
    submit_raw('{"output": {"summary": "cut'),
    tool_read(),
    tool_write("out.txt", "x"),
    tool_write("docs/plan.md", "x"),
    tool_bash("make test"),
    tool_bash("ls"),
    tools(call("write", {"path": "run://PLAN.md", "content": "# Plan"})),
    seal(),
    ask("Which way?"),
    ask(""),
    question(QUESTION),
    message("thinking out loud"),
    message('{"summary": "as text"}'),
    transient(),
    permanent(),
    failed(),
    empty(),
    mixed(),
    truncated("write"),
]
TOOL_MODES = ["ok", "error", "interrupted", "partial", "unknown", "lost"]


@st.composite
def workflows(draw: st.DrawFn) -> Workflow:
    count = draw(st.integers(1, 6))
    ids = NODE_IDS[:count]
    nodes = []
    for node_id in ids:
        interactive = draw(st.booleans())
        agent: dict[str, Any] = {"requestUserInput": interactive}
        if interactive and draw(st.booleans()):
            agent["conversationMode"] = True
        mode = draw(st.sampled_from([None, "read_only", "always_ask", "yolo"]))
        if mode is not None:
            agent["tools"] = {"approvalMode": mode}
        if draw(st.integers(0, 30)) == 13:
            agent["model"] = ""
        nodes.append(agent_node(node_id, **agent))
    edges = [
        (a, b) for i, a in enumerate(ids) for b in ids[i + 1 :] if draw(st.integers(0, 2)) == 0
    ]
    extra: dict[str, Any] = {
        "retry_policy": {"max_attempts": draw(st.integers(0, 2)), "backoff_ms": 100}
    }
    if draw(st.booleans()):
        extra["strictLayers"] = True
    interactive_ids = [n["id"] for n in nodes if n["agent"]["requestUserInput"]]
    if interactive_ids and draw(st.booleans()):
        extra["planMode"] = {"evidenceSourceNodeId": draw(st.sampled_from(interactive_ids))}
    if draw(st.booleans()):
        extra["outputRepairModel"] = "repair-model"
    return workflow(nodes, edges, **extra)


@st.composite
def runs(draw: st.DrawFn) -> dict[str, Any]:
    wf = draw(workflows())
    ids = [n.id for n in wf.nodes]
    turn = st.sampled_from(TURNS)
    script: dict[str, list[Turn]] = {}
    for n in ids:
        script[n] = draw(st.lists(turn, max_size=6))
        if draw(st.integers(0, 3)):
            script[n].append(ok_summary("finally"))
    repair = st.sampled_from(
        [submit({"repaired_arguments": {"output": {"summary": "fixed"}}}), failed(), message("no")]
    )
    for n in ids:
        if draw(st.booleans()):
            script[f"{n}__output_repair"] = draw(st.lists(repair, max_size=2))
    return {
        "wf": wf,
        "script": script,
        "inputs": {n: draw(st.lists(st.sampled_from(["yes", "no", ""]), max_size=3)) for n in ids},
        "approvals": draw(
            st.lists(
                st.tuples(st.just(""), st.booleans(), st.sampled_from([None, "no"])), max_size=4
            )
        ),
        "retries": {n: draw(st.lists(st.sampled_from([None, "again"]), max_size=2)) for n in ids},
        "tool_modes": draw(st.lists(st.sampled_from(TOOL_MODES), min_size=1, max_size=4)),
        "cancel_at": draw(st.one_of(st.none(), st.integers(1, 20))),
        "noise": draw(st.lists(st.tuples(st.integers(0, 30), noise(ids)), max_size=4)),
    }


def noise(ids: list[str]) -> st.SearchStrategy[Fact]:
    """Facts a confused or replaying host might send: stale ids, unknown nodes, duplicates."""
    node = st.sampled_from([*ids, "ghost"])
    call_id = st.builds(lambda n, i: f"model:{n}-{i}", node, st.integers(1, 12))
    batch_id = st.builds(
        lambda k, i: f"{k}-{i}", st.sampled_from(["batch", "approval"]), st.integers(1, 12)
    )
    return st.one_of(
        st.builds(ModelReplied, call_id=call_id, node_id=node, reply=st.sampled_from(TURNS[:4])),
        st.builds(ModelFailed, call_id=call_id, node_id=node, failure=st.just(transient())),
        st.builds(ToolsFinished, batch_id=batch_id, results=st.just(())),
        st.builds(ToolsOutcomeUnknown, batch_id=batch_id),
        st.builds(ToolsLost, batch_id=batch_id),
        st.builds(ReceiptRead, batch_id=batch_id),
        st.builds(HandoffStored, node_id=node, manifest=st.just({"format": "json", "uri": "x"})),
        st.builds(TimerFired, node_id=node),
        st.builds(InputGiven, node_id=node, text=st.just("hi")),
        st.builds(ApprovalDecided, approval_id=batch_id, allow=st.booleans()),
        st.builds(RetryRequested, node_id=node),
        st.builds(MessageSent, node_id=node, text=st.just("note")),
        st.builds(
            ActionMalformed,
            signal=st.sampled_from(["submit_user_input", "retry_node"]),
            reason=st.just("it came with no payload"),
            payload=st.just("no payload"),
        ),
    )


def tool_port(modes: list[str]) -> Any:
    cycle = itertools.cycle(modes)

    def answer(batch: RunTools) -> Fact:
        mode = next(cycle)
        if mode == "unknown" and batch.side_effects:
            return ToolsOutcomeUnknown(batch_id=batch.batch_id, reason="worker lost")
        if mode == "lost" and batch.side_effects:
            return ToolsLost(batch_id=batch.batch_id, reason="server restarted")
        if mode == "interrupted":
            return ToolsFinished(batch_id=batch.batch_id, results=(), interrupted=True)
        calls = batch.calls[:1] if mode == "partial" else batch.calls
        results = tuple(
            ToolResultSummary(
                tool_call_id=c.id,
                tool_name=c.name,
                content="boom" if mode == "error" else f"ok: {c.name}",
                is_error=mode == "error",
                artifact_ids=("art-1",) if c.name == "openflow_write_plan_artifact" else (),
            )
            for c in calls
        )
        return ToolsFinished(batch_id=batch.batch_id, results=results)

    return answer


class CheckedDriver(Driver):
    """A driver that checks determinism, JSON round trips and invariants on every plan."""

    def feed(self, *facts: Fact) -> Plan:
        before = self.snapshot
        frozen = before.model_dump_json()
        plan = super().feed(*facts)
        again = engine.advance(before, list(facts), self.now)
        assert again.model_dump_json() == plan.model_dump_json(), "advance is not deterministic"
        assert before.model_dump_json() == frozen, "advance changed the snapshot it was given"
        self.check(plan)
        return plan

    def resume(self, snapshot: RunSnapshot | None = None) -> Plan:
        before = snapshot or self.snapshot
        plan = super().resume(snapshot)
        assert engine.resume(before, self.now).model_dump_json() == plan.model_dump_json()
        self.check(plan)
        return plan

    def check(self, plan: Plan) -> None:
        s = plan.snapshot
        assert RunSnapshot.model_validate_json(s.model_dump_json()) == s
        seqs = [e.seq for e in self.events]
        assert seqs == list(range(1, len(seqs) + 1)), "event seq has a gap"
        busy_nodes = {b.node_id for b in s.batches.values()}
        for node_id, ns in s.nodes.items():
            if node_id in busy_nodes:
                continue
            calls = [i.call.id for i in ns.conversation.transcript if isinstance(i, ToolCallItem)]
            results = [
                i.result.tool_call_id
                for i in ns.conversation.transcript
                if isinstance(i, ToolResultItem)
            ]
            assert sorted(calls) == sorted(results), (
                f"unanswered or doubled tool calls on {node_id}"
            )
        if not plan.done:
            alive = bool(self.pending or self.timers or plan.awaiting.any)
            assert alive, "the run is idle with nothing pending"
            if not self.pending and not self.timers:
                assert plan.status == "paused"


def settle(d: CheckedDriver) -> None:
    d.run(max_steps=3000)
    assert d.plan is not None
    assert d.plan.done or d.plan.awaiting.any, "a run must end or wait on a person"
    if d.plan.done:
        assert d.plan.status in ("completed", "failed", "stopped")
    else:
        assert d.plan.status == "paused"


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(runs())
def test_random_runs_end_or_wait_and_keep_every_invariant(case: dict[str, Any]) -> None:
    d = CheckedDriver(
        case["wf"],
        case["script"],
        tool_answer=tool_port(case["tool_modes"]),
        inputs=case["inputs"],
        approvals=case["approvals"],
        retries=case["retries"],
    )
    if case["cancel_at"] is not None:
        steps = itertools.count()
        cancel_at = case["cancel_at"]
        d.when(lambda _d: next(steps) == cancel_at, CancelRequested())
    for at, fact in case["noise"]:
        d.when(lambda drv, at=at: len(drv.plans) >= at, fact)
    settle(d)
    if d.snapshot.status == "stopped":
        d.resume()
        settle(d)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_resuming_any_snapshot_is_deterministic_and_never_stuck(case: dict[str, Any]) -> None:
    d = CheckedDriver(
        case["wf"], case["script"], tool_answer=tool_port(case["tool_modes"]), inputs=case["inputs"]
    )
    d.start()
    for _ in range(case["cancel_at"] or 3):
        if not d.step():
            break
    restored = RunSnapshot.model_validate_json(d.snapshot.model_dump_json())
    d.resume(restored)
    settle(d)
