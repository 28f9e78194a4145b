"""Subagents (OPENFLOW_SPEC 6) on the pure engine: declared and saved agents as child turns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from openflow.engine import advance as engine
from openflow.engine.policy import CALL_SUBAGENT, DECLARE_SUBAGENTS
from openflow.engine.protocol import jitter_ms
from openflow.engine.spec import CallableAgent
from openflow.engine.state import (
    CallModel,
    CancelRequested,
    ModelReplied,
    Plan,
    RunSnapshot,
    RunTools,
    SleepUntil,
)
from openflow.engine.transcript import ToolCallItem, ToolResult, ToolResultItem, UserItem
from tests.engine.driver import (
    SUMMARY_SCHEMA,
    Driver,
    agent_node,
    call,
    message,
    ok_summary,
    permanent,
    single_agent_workflow,
    submit,
    tool_read,
    tool_write,
    tools,
    transient,
    workflow,
)

SCOUT = "first-subagent-1"
YOLO = {"tools": {"approvalMode": "yolo"}}
BUILTINS = (
    "apply_patch",
    "ast_edit",
    "ast_grep",
    "bash",
    "edit",
    "find",
    "ls",
    "openflow_update_todo_list",
    "read",
    "search",
    "write",
)


def declare(*pairs: tuple[str, str]) -> Any:
    items = [{"name": n, "purpose": p} for n, p in pairs]
    return tools(call(DECLARE_SUBAGENTS, {"subagents": items}))


def invoke(subagent_id: str, task: str = "find the README") -> Any:
    return tools(call(CALL_SUBAGENT, {"subagent_id": subagent_id, "input": task}))


def reviewer(**fields: Any) -> CallableAgent:
    data: dict[str, Any] = {
        "id": "reviewer",
        "name": "Reviewer",
        "systemPrompt": "You review changes.",
        "taskPrompt": "\nReview the diff for risks.\nBe brief.",
        "model": "review-model",
        "outputSchema": {
            "type": "object",
            "properties": {"verdict": {"type": "string"}},
            "required": ["verdict"],
        },
    }
    data.update(fields)
    return CallableAgent.model_validate(data)


@dataclass
class AgentDriver(Driver):
    """The engine driver with saved agents passed to `start`."""

    agents: list[CallableAgent] = field(default_factory=list)

    def start(self) -> Plan:
        plan = engine.start(
            self.wf,
            "run-test",
            self.now,
            entrypoint_text=self.entrypoint,
            tool_names=self.tool_names,
            agents=self.agents,
        )
        self.take(plan)
        return plan


def results(d: Driver, node_id: str) -> list[ToolResult]:
    return [
        i.result for i in d.node(node_id).conversation.transcript if isinstance(i, ToolResultItem)
    ]


def result_of(d: Driver, node_id: str, name: str) -> list[ToolResult]:
    return [r for r in results(d, node_id) if r.tool_name == name]


def child_calls(d: Driver, subagent_id: str) -> list[CallModel]:
    return [c.intent for c in d.model.calls if c.node_id == subagent_id]


def subagent_events(d: Driver) -> list[tuple[str, str]]:
    return [
        (e.type, getattr(e, "subagent_id", "")) for e in d.events if e.type.startswith("Subagent")
    ]


def adhoc_script(*child: Any) -> dict[str, list[Any]]:
    return {
        "first": [declare(("scout", "Find files.")), invoke(SCOUT), ok_summary("done")],
        SCOUT: list(child),
    }


def test_a_declared_subagent_uses_a_tool_submits_and_its_parent_continues() -> None:
    d = Driver(
        single_agent_workflow(),
        adhoc_script(tool_write("found.txt", "x"), submit({"summary": "found it"})),
        approvals=[("", True, None), ("", True, None)],
        entrypoint="go",
    ).run()
    assert d.snapshot.status == "completed"
    declared = result_of(d, "first", DECLARE_SUBAGENTS)
    assert json.loads(declared[0].content) == {
        "declared": [
            {"id": SCOUT, "name": "scout", "purpose": "Find files.", "status": "declared"}
        ],
        "message": "Subagents declared and ready for invocation.",
    }
    called = result_of(d, "first", CALL_SUBAGENT)
    assert len(called) == 1 and not called[0].is_error
    assert json.loads(called[0].content) == {
        "output": {"summary": "found it"},
        "message": "Subagent 'scout' completed.",
    }
    assert len(d.of_type("ToolApprovalRequested")) == 2, "the child's write asks nobody"
    assert [b.node_id for b in d.batches] == [SCOUT]
    assert [c.name for c in d.batches[0].calls] == ["write"]
    assert subagent_events(d) == [
        ("SubagentsDeclared", ""),
        ("SubagentStarted", SCOUT),
        ("SubagentCompleted", SCOUT),
    ]
    assert d.event_types(SCOUT) == [
        "NodeQueued",
        "NodeStarted",
        "ToolCallProposed",
        "ToolStarted",
        "ToolCompleted",
        "NodeCompleted",
    ]
    assert d.snapshot.subagents[SCOUT].status == "completed"
    assert d.node("first").child is None


def test_the_child_request_is_the_subagents_own() -> None:
    wf = workflow([agent_node("first", **YOLO)], shared_context="Repo: demo")
    d = Driver(wf, adhoc_script(tool_read("a.txt"), submit({"summary": "ok"}))).run()
    first, second = child_calls(d, SCOUT)
    request = first.request
    assert first.node_id == "first" and first.purpose == "subagent"
    assert request.node_id == SCOUT and request.node_label == "scout"
    assert request.system_messages == (
        "You are scout. Find files.\n\n--- Workflow context ---\nRepo: demo",
    )
    assert request.input is None and request.task_prompt == "find the README"
    assert request.output_schema == SUMMARY_SCHEMA
    assert not request.allow_user_input and request.tool_choice == "required"
    assert [t.name for t in request.harness_tools] == [
        "openflow_submit_node_output",
        DECLARE_SUBAGENTS,
    ]
    assert CALL_SUBAGENT not in request.tool_names
    assert first.delta.base_len == 0
    assert first.delta.items == (
        UserItem(
            content='You are a subagent named "scout" with the purpose: "Find files."\n\n'
            "Task: find the README"
        ),
    )
    assert (request.turn_index, second.request.turn_index) == (0, 1)
    parent = d.model.requests("first")[0].intent.request
    assert [t.name for t in parent.harness_tools][-2:] == [DECLARE_SUBAGENTS, CALL_SUBAGENT]
    described = d.model.requests("first")[1].intent.request.harness_tools[-1].description
    assert "Available subagents for this node:\n- scout (id: first-subagent-1)" in described


def test_a_saved_agent_is_announced_and_called_with_its_own_prompt_schema_and_tools() -> None:
    node = agent_node("first", callableAgents=["reviewer", "gone"], **YOLO)
    wf = workflow([node], shared_context="Repo: demo")
    agent = reviewer(tools={"approvalMode": "read_only"})
    script = {
        "first": [invoke("reviewer", "check the diff"), ok_summary()],
        "reviewer": [tool_write("x.txt"), submit({"verdict": "fine"})],
    }
    d = AgentDriver(wf, script, agents=[agent, reviewer(id="unused")]).run()
    assert [a.id for a in d.snapshot.agents] == ["reviewer"]
    announced = d.of_type("SubagentsDeclared")
    assert [(s.id, s.name, s.purpose) for s in announced[0].summaries] == [
        ("reviewer", "Reviewer", "Review the diff for risks.")
    ]
    request = child_calls(d, "reviewer")[0].request
    assert request.model == "review-model"
    assert request.system_messages == (
        "You review changes.\n\n--- Workflow context ---\nRepo: demo",
    )
    assert request.output_schema["required"] == ["verdict"]
    assert [t.name for t in request.harness_tools] == ["openflow_submit_node_output"]
    assert "write" not in request.tool_names and "read" in request.tool_names
    first_message = child_calls(d, "reviewer")[0].delta.items[0]
    assert first_message == UserItem(
        content='You are the saved agent "Reviewer".\n\nTask: check the diff'
    )
    (answer,) = result_of(d, "first", CALL_SUBAGENT)
    assert json.loads(answer.content)["output"] == {"verdict": "fine"}
    assert not d.batches, "the read-only saved agent's write was refused, not run"
    denied = [e for e in d.of_type("ToolCompleted") if e.node_id == "reviewer"]
    assert denied[0].is_error and "read-only" in denied[0].content


def test_an_unknown_subagent_id_is_an_error_result() -> None:
    d = Driver(single_agent_workflow(**YOLO), {"first": [invoke("nobody"), ok_summary()]}).run()
    (result,) = result_of(d, "first", CALL_SUBAGENT)
    assert result.is_error
    assert result.content == (
        "Subagent 'nobody' not found. Declare subagents before invoking them."
    )
    assert d.snapshot.status == "completed"


def test_a_failed_subagent_cannot_be_called_again() -> None:
    script = adhoc_script(permanent("bad key"))
    script["first"] = [*script["first"][:2], invoke(SCOUT), ok_summary()]
    d = Driver(single_agent_workflow(**YOLO), script).run()
    first, second = result_of(d, "first", CALL_SUBAGENT)
    assert first.is_error and json.loads(first.content) == {
        "error": "Subagent 'scout' failed: permanent: bad key"
    }
    assert second.is_error and "is failed" in second.content
    assert len(child_calls(d, SCOUT)) == 1
    assert subagent_events(d)[-1] == ("SubagentFailed", SCOUT)
    assert d.snapshot.status == "completed"


def test_a_subagent_cannot_declare_or_call_subagents() -> None:
    nested = tools(
        call(DECLARE_SUBAGENTS, {"subagents": [{"name": "x", "purpose": "y"}]}),
        call(CALL_SUBAGENT, {"subagent_id": SCOUT, "input": "again"}),
    )
    d = Driver(
        single_agent_workflow(**YOLO), adhoc_script(nested, submit({"summary": "alone"}))
    ).run()
    child = [e for e in d.of_type("ToolCompleted") if e.node_id == SCOUT]
    assert [(e.tool_name, e.content, e.is_error) for e in child] == [
        (DECLARE_SUBAGENTS, '{"error":"Subagent cannot invoke runtime builtin tools."}', True),
        (CALL_SUBAGENT, '{"error":"Subagent cannot invoke runtime builtin tools."}', True),
    ]
    assert not d.batches and len(d.snapshot.subagents) == 1
    assert d.snapshot.subagents[SCOUT].status == "completed"


def test_ten_narration_turns_in_a_row_fail_the_subagent() -> None:
    d = Driver(single_agent_workflow(**YOLO), adhoc_script(*[message("thinking...")] * 12)).run()
    assert len(child_calls(d, SCOUT)) == 10
    (result,) = result_of(d, "first", CALL_SUBAGENT)
    assert result.is_error and "10 consecutive turns without a tool call" in result.content
    nudges = [c.delta.items[-1] for c in child_calls(d, SCOUT)[1:]]
    assert all(isinstance(n, UserItem) and "No human input" in n.content for n in nudges)
    assert d.snapshot.status == "completed"


def test_a_transient_error_backs_off_on_the_subagents_own_timer() -> None:
    wf = workflow(
        [agent_node("first", **YOLO)], retry_policy={"max_attempts": 2, "backoff_ms": 1000}
    )
    d = Driver(wf, adhoc_script(transient(), transient(), submit({"summary": "late"}))).run()
    sleeps = [i for p in d.plans for i in p.intents if isinstance(i, SleepUntil)]
    assert [s.node_id for s in sleeps] == [f"subagent:{SCOUT}"] * 2
    assert [c.model_attempt for c in child_calls(d, SCOUT)] == [1, 2, 3]
    retrying = [e for e in d.of_type("NodeRetrying") if e.node_id == SCOUT]
    assert [e.backoff_ms for e in retrying] == [1000 + jitter_ms(SCOUT), 2000 + jitter_ms(SCOUT)]
    assert [e.wake_at_ms for e in sleeps] == [e.at_ms + e.backoff_ms for e in retrying], (
        "each retry waits its own backoff"
    )
    (result,) = result_of(d, "first", CALL_SUBAGENT)
    assert json.loads(result.content)["output"] == {"summary": "late"}


def test_a_spent_transient_streak_fails_the_subagent() -> None:
    wf = workflow([agent_node("first", **YOLO)], retry_policy={"max_attempts": 1, "backoff_ms": 10})
    d = Driver(wf, adhoc_script(transient(), transient())).run()
    (result,) = result_of(d, "first", CALL_SUBAGENT)
    assert json.loads(result.content) == {
        "error": "Subagent 'scout' failed: transient: rate limited"
    }


def test_calls_around_a_subagent_call_run_in_order() -> None:
    batch = tools(
        call("read", {"path": "a"}, id="r1"),
        call(CALL_SUBAGENT, {"subagent_id": SCOUT, "input": "go"}, id="c1"),
        call("write", {"path": "b", "content": "x"}, id="w1"),
    )
    script = {
        "first": [declare(("scout", "Find files.")), batch, ok_summary()],
        SCOUT: [tool_read("c", id="r2"), submit({"summary": "s"})],
    }
    d = Driver(single_agent_workflow(), script, approvals=[("", True, None)] * 2).run()
    assert [[c.id for c in b.calls] for b in d.batches] == [["r1"], ["r2"], ["w1"]]
    order = [r.tool_call_id for r in results(d, "first")]
    assert order[-3:] == ["r1", "c1", "w1"]
    assert d.snapshot.status == "completed"


def test_a_read_only_node_and_a_planning_node_are_not_offered_the_runtime_tools() -> None:
    d = Driver(
        single_agent_workflow(tools={"approvalMode": "read_only"}),
        {"first": [invoke(SCOUT), ok_summary()]},
    ).run()
    request = d.model.requests("first")[0].intent.request
    assert CALL_SUBAGENT not in request.tool_names
    assert CALL_SUBAGENT not in [t.name for t in request.harness_tools]
    assert result_of(d, "first", CALL_SUBAGENT)[0].is_error


def test_execution_offers_thirteen_tools_without_mcp() -> None:
    d = Driver(single_agent_workflow(), {"first": [ok_summary()]}, tool_names=BUILTINS).run()
    request = d.model.requests("first")[0].intent.request
    assert len(request.tool_names) == 13
    assert request.tool_names[-2:] == (DECLARE_SUBAGENTS, CALL_SUBAGENT)


def test_invalid_declare_arguments_explain_the_expected_shape() -> None:
    bad = tools(call(DECLARE_SUBAGENTS, {"subagents": [{"name": "x", "prompt": "y"}]}))
    d = Driver(single_agent_workflow(**YOLO), {"first": [bad, ok_summary()]}).run()
    (result,) = result_of(d, "first", DECLARE_SUBAGENTS)
    assert result.is_error and "unexpected keys prompt" in result.content
    assert '"purpose"' in result.content and not d.snapshot.subagents


def test_stop_mid_subagent_closes_the_parents_call_and_resume_calls_again() -> None:
    script = adhoc_script(tool_read("a"), submit({"summary": "second try"}))
    script["first"] = [*script["first"][:2], invoke(SCOUT), ok_summary("done")]
    d = Driver(single_agent_workflow(**YOLO), script)
    d.hold(f"model:{SCOUT}")
    d.run()
    assert d.node("first").child is not None and d.snapshot.subagents[SCOUT].status == "active"
    plan = d.feed(CancelRequested())
    assert plan.status == "stopped"
    cancelled = [i for i in plan.intents if i.kind == "cancel_work"]
    assert cancelled and cancelled[0].ids[0].startswith(f"model:{SCOUT}")
    (interrupted,) = result_of(d, "first", CALL_SUBAGENT)
    assert interrupted.is_error and "interrupted or cancelled" in interrupted.content
    assert ("SubagentFailed", SCOUT) in subagent_events(d)
    assert d.snapshot.subagents[SCOUT].status == "declared"
    calls = {
        i.call.id for i in d.node("first").conversation.transcript if isinstance(i, ToolCallItem)
    }
    assert calls == {r.tool_call_id for r in results(d, "first")}, "nothing left dangling"
    d.release(f"model:{SCOUT}")
    d.resume()
    d.run()
    assert d.snapshot.status == "completed"
    second = result_of(d, "first", CALL_SUBAGENT)[-1]
    assert json.loads(second.content)["output"] == {"summary": "second try"}
    restarted = [c for c in child_calls(d, SCOUT) if c.delta.base_len == 0]
    assert len(restarted) == 2, "the second call starts the child conversation from scratch"


def test_resume_of_a_snapshot_taken_mid_subagent_ends_the_child_cleanly() -> None:
    d = Driver(single_agent_workflow(**YOLO), adhoc_script(tool_read("a")))
    d.hold("batch")
    d.run()
    assert any(isinstance(i, RunTools) and i.node_id == SCOUT for i in d.pending)
    plan = engine.resume(d.snapshot, d.now)
    node = plan.snapshot.nodes["first"]
    assert node.child is None and not node.interrupted
    assert not plan.snapshot.batches
    assert plan.snapshot.subagents[SCOUT].status == "declared"
    assert [i.request.node_id for i in plan.intents if isinstance(i, CallModel)] == ["first"]


def test_a_snapshot_mid_subagent_round_trips_through_json() -> None:
    d = Driver(single_agent_workflow(**YOLO), adhoc_script(submit({"summary": "ok"})))
    d.hold(f"model:{SCOUT}")
    d.run()
    snapshot = d.snapshot
    assert snapshot.nodes["first"].child is not None
    copy = RunSnapshot.model_validate_json(snapshot.model_dump_json())
    assert copy.model_dump(mode="json") == snapshot.model_dump(mode="json")
    (pending,) = [i for i in d.pending if isinstance(i, CallModel)]
    reply = submit({"summary": "ok"}).model_copy(update={"model": "test-model"})
    fact = ModelReplied(call_id=pending.call_id, node_id="first", reply=reply)
    left = engine.advance(snapshot, [fact], d.now)
    right = engine.advance(copy, [fact], d.now)
    assert left.model_dump(mode="json") == right.model_dump(mode="json")
    assert right.snapshot.subagents[SCOUT].status == "completed"
