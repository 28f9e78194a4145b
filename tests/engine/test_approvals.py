"""Approvals decided call by call: allow some, deny others, edit, remember, revoke (CONTRACT 8)."""

from __future__ import annotations

import json
from typing import Any

from openflow.engine import advance as engine
from openflow.engine.projection import apply_event, initial_state
from openflow.engine.state import (
    ApprovalDecided,
    CallDecided,
    Grant,
    GrantRevoked,
)
from openflow.engine.transcript import ToolResultItem, UserItem
from tests.engine.driver import (
    Driver,
    call,
    ok_summary,
    run,
    single_agent_workflow,
    tool_write,
    tools,
)

THREE = tools(
    call("write", {"path": "a.txt", "content": "A"}, "c-a"),
    call("bash", {"command": "rm -rf /"}, "c-b"),
    call("write", {"path": "../c.txt", "content": "C"}, "c-c"),
)


def paused(script: list[Any], **agent: Any) -> Driver:
    d = run(single_agent_workflow(**agent), {"first": [*script, ok_summary()]})
    assert d.plan is not None and len(d.plan.awaiting.approvals) == 1
    return d


def approval_id(d: Driver) -> str:
    assert d.plan is not None
    return d.plan.awaiting.approvals[0]


def results(d: Driver) -> dict[str, ToolResultItem]:
    items = d.node("first").conversation.transcript
    return {i.result.tool_call_id: i for i in items if isinstance(i, ToolResultItem)}


def test_calls_of_one_batch_are_allowed_denied_and_edited_one_by_one() -> None:
    d = paused([THREE])
    fact = ApprovalDecided(
        approval_id=approval_id(d),
        decisions=(
            CallDecided(call_id="c-a", allow=True),
            CallDecided(call_id="c-b", allow=False, reason="never that"),
            CallDecided(call_id="c-c", allow=True, arguments={"path": "c.txt", "content": "C"}),
        ),
        by="ana",
    )
    assert engine.check(d.snapshot, fact) is None
    d.feed(fact)
    d.run()
    assert d.snapshot.status == "completed"
    # Only the allowed calls ran, the edited one with the person's arguments, once.
    assert len(d.batches) == 1
    ran = [(c.id, c.arguments) for c in d.batches[0].calls]
    assert ran == [
        ("c-a", {"path": "a.txt", "content": "A"}),
        ("c-c", {"path": "c.txt", "content": "C"}),
    ]
    found = results(d)
    assert set(found) == {"c-a", "c-b", "c-c"}
    assert "never that" in found["c-b"].result.content and found["c-b"].result.is_error
    assert found["c-a"].result.content == "ok: write"
    notes = [i.content for i in d.node("first").conversation.transcript if isinstance(i, UserItem)]
    assert any("c-c" in n and "edited" in n and "c.txt" in n for n in notes)
    approved = {e.tool_call_id: e for e in d.of_type("ToolApproved")}
    denied = d.of_type("ToolDenied")
    assert approved["c-a"].by == "ana" and approved["c-a"].arguments is None
    assert approved["c-c"].arguments == {"path": "c.txt", "content": "C"}
    assert [(e.tool_call_id, e.reason, e.by) for e in denied] == [("c-b", "never that", "ana")]


def test_a_whole_batch_decision_works_as_before() -> None:
    d = paused([THREE])
    d.feed(ApprovalDecided(approval_id=approval_id(d), allow=False, reason="no"))
    d.run()
    assert not d.batches
    assert all("Reason: no" in r.result.content for r in results(d).values())
    d = paused([THREE])
    d.feed(ApprovalDecided(approval_id=approval_id(d), allow=True))
    d.run()
    assert [c.id for c in d.batches[0].calls] == ["c-a", "c-b", "c-c"]


def test_calls_left_out_follow_allow_and_an_undecided_call_is_refused() -> None:
    d = paused([THREE])
    aid = approval_id(d)
    only = (CallDecided(call_id="c-b", allow=False),)
    problem = engine.check(d.snapshot, ApprovalDecided(approval_id=aid, decisions=only))
    assert problem is not None and "'c-a'" in problem and "no decision" in problem
    d.feed(ApprovalDecided(approval_id=aid, allow=True, decisions=only))
    d.run()
    assert [c.id for c in d.batches[0].calls] == ["c-a", "c-c"]


def test_bad_decisions_are_refused_naming_the_call_or_the_field() -> None:
    d = paused([THREE])
    aid = approval_id(d)

    def problem(**fields: Any) -> str:
        found = engine.check(d.snapshot, ApprovalDecided(approval_id=aid, allow=True, **fields))
        assert found is not None
        return found

    assert "no call 'nope'" in problem(decisions=(CallDecided(call_id="nope", allow=True),))
    twice = (CallDecided(call_id="c-a", allow=True), CallDecided(call_id="c-a", allow=False))
    assert "decided twice" in problem(decisions=twice)
    denied_edit = (CallDecided(call_id="c-a", allow=False, arguments={"path": "x"}),)
    assert "only an allowed call" in problem(decisions=denied_edit)
    missing = (CallDecided(call_id="c-a", allow=True, arguments={"path": "a.txt"}),)
    assert "'c-a'" in problem(decisions=missing)  # a write without content is refused


def test_an_edit_is_checked_like_the_models_own_call() -> None:
    d = paused(
        [tools(call("bash", {"command": "ls"}, "c-l"))], tools={"approvalMode": "always_ask"}
    )
    aid = approval_id(d)
    ok = (CallDecided(call_id="c-l", allow=True, arguments={"command": "ls src"}),)
    assert engine.check(d.snapshot, ApprovalDecided(approval_id=aid, decisions=ok)) is None
    # On a read-only node an edit may not turn a read into a command that changes things.
    snapshot = d.snapshot.model_copy(deep=True)
    snapshot.nodes["first"].runtime_patch["approval_mode"] = "read_only"
    writes = (CallDecided(call_id="c-l", allow=True, arguments={"command": "rm -rf src"}),)
    problem = engine.check(snapshot, ApprovalDecided(approval_id=aid, decisions=writes))
    assert problem is not None and "'c-l'" in problem and "refused" in problem


def test_remember_lets_later_calls_under_the_prefix_run_without_a_pause() -> None:
    script = [
        tool_write("docs/a.md"),
        tool_write("docs/b.md"),
        tool_write("./docs/sub/c.md"),
        tool_write("src/d.py"),
    ]
    d = paused(script)
    d.feed(
        ApprovalDecided(
            approval_id=approval_id(d),
            allow=True,
            remember=Grant(tool="write", path_prefix="docs/"),
            by="ana",
        )
    )
    d.run()
    # Two more writes under docs/ ran without asking; the one outside pauses.
    assert d.plan is not None and len(d.plan.awaiting.approvals) == 1
    assert [b.calls[0].arguments["path"] for b in d.batches] == [
        "docs/a.md",
        "docs/b.md",
        "./docs/sub/c.md",
    ]
    assert len(d.of_type("ToolApprovalRequested")) == 2
    by_grant = [e for e in d.of_type("ToolApproved") if e.grant is not None]
    assert [e.grant for e in by_grant] == ["write:docs/", "write:docs/"]
    assert [(g.tool, g.path_prefix, g.by) for g in d.snapshot.grants] == [("write", "docs/", "ana")]
    state = initial_state("wf", "run", ["first"], None)
    for event in d.events:
        state = apply_event(state, event)
    assert state.as_json()["grants"][0]["pathPrefix"] == "docs/"
    assert any("by ana" in t.message for t in state.run_trace)


def test_revoking_a_grant_makes_matching_calls_ask_again() -> None:
    d = paused([tool_write("a.txt"), tool_write("b.txt"), tool_write("c.txt")])
    d.feed(ApprovalDecided(approval_id=approval_id(d), allow=True, remember=Grant(tool="write")))
    d.hold("batch")
    d.run()
    assert engine.check(d.snapshot, GrantRevoked(tool="bash")) is not None
    d.feed(GrantRevoked(tool="write", by="ana"))
    d.release("batch")
    d.run()
    assert not d.snapshot.grants
    assert d.plan is not None and len(d.plan.awaiting.approvals) == 1
    assert d.of_type("GrantRevoked")[0].by == "ana"


def test_the_floor_a_grant_never_widens_the_approval_mode() -> None:
    # A pending batch of a node made read-only since it asked (a runtime patch).
    wf = single_agent_workflow(tools={"approvalMode": "always_ask"})
    d = run(wf, {"first": [tools(call("read", {"path": "a"}, "c-r")), ok_summary()]})
    aid = approval_id(d)
    snapshot = d.snapshot.model_copy(deep=True)
    snapshot.nodes["first"].runtime_patch["approval_mode"] = "read_only"
    wide = ApprovalDecided(approval_id=aid, allow=True, remember=Grant(tool="write"))
    problem = engine.check(snapshot, wide)
    assert problem is not None and problem.startswith("remember:") and "read-only" in problem
    ok = ApprovalDecided(approval_id=aid, allow=True, remember=Grant(tool="read"))
    assert engine.check(snapshot, ok) is None
    outside = ApprovalDecided(
        approval_id=aid, allow=True, remember=Grant(tool="read", path_prefix="../up")
    )
    assert "remember.path_prefix" in (engine.check(d.snapshot, outside) or "")


def test_a_grant_never_lets_a_denied_call_run() -> None:
    # A grant made on a write node does not let a read-only node write.
    from tests.engine.driver import agent_node, workflow

    wf = workflow(
        [agent_node("first"), agent_node("second", tools={"approvalMode": "read_only"})],
        [("first", "second")],
    )
    d = run(
        wf,
        {
            "first": [tool_write("a.txt"), ok_summary()],
            "second": [tool_write("b.txt"), ok_summary()],
        },
    )
    d.feed(ApprovalDecided(approval_id=approval_id(d), allow=True, remember=Grant(tool="write")))
    d.run()
    assert d.snapshot.status == "completed"
    assert [b.calls[0].arguments["path"] for b in d.batches] == ["a.txt"]
    second = d.node("second").conversation.transcript
    denied = [i for i in second if isinstance(i, ToolResultItem)]
    assert denied and "read-only" in denied[0].result.content


def test_the_plan_seal_cannot_be_remembered() -> None:
    d = paused([tool_write("a.txt")])
    fact = ApprovalDecided(
        approval_id=approval_id(d),
        allow=True,
        remember=Grant(tool="openflow_write_plan_artifact"),
    )
    assert "always asks" in (engine.check(d.snapshot, fact) or "")


def test_grants_survive_the_snapshot_round_trip() -> None:
    d = paused([tool_write("a.txt")])
    d.feed(ApprovalDecided(approval_id=approval_id(d), allow=True, remember=Grant(tool="write")))
    again = type(d.snapshot).model_validate_json(d.snapshot.model_dump_json())
    assert again.grants == d.snapshot.grants and again.grants[0].node_id == "first"


def test_a_subagent_call_is_decided_edited_and_remembered_like_any_call() -> None:
    from openflow.engine.policy import CALL_SUBAGENT, DECLARE_SUBAGENTS

    scout = "first-subagent-1"
    declare = tools(call(DECLARE_SUBAGENTS, {"subagents": [{"name": "scout", "purpose": "Find."}]}))
    both = tools(
        call("write", {"path": "a.txt", "content": "x"}, "c-w"),
        call(CALL_SUBAGENT, {"subagent_id": scout, "input": "old task"}, "c-s"),
    )
    again = tools(call(CALL_SUBAGENT, {"subagent_id": scout, "input": "more"}, "c-t"))
    d = Driver(
        single_agent_workflow(),
        {
            "first": [declare, both, again, ok_summary()],
            scout: [ok_summary("one"), ok_summary("two")],
        },
        approvals=[("", True, None)],
    ).run()
    edited = {"subagent_id": scout, "input": "new task"}
    d.feed(
        ApprovalDecided(
            approval_id=approval_id(d),
            decisions=(
                CallDecided(call_id="c-w", allow=False, reason="no files"),
                CallDecided(call_id="c-s", allow=True, arguments=edited),
            ),
            remember=Grant(tool=CALL_SUBAGENT),
        )
    )
    d.run()
    assert d.snapshot.status == "completed"
    assert not d.batches, "the denied write never ran"
    assert len(d.of_type("ToolApprovalRequested")) == 2, "the remembered call asked nobody"
    firsts = [c.intent.delta for c in d.model.calls if c.node_id == scout]
    assert firsts and "new task" in json.dumps([i.model_dump() for i in firsts[0].items])
    found = results(d)
    assert "no files" in found["c-w"].result.content
    assert not found["c-s"].result.is_error and not found["c-t"].result.is_error
