"""The post-run review (spec 12): one extra call after the last node, advice only."""

from __future__ import annotations

from typing import Any

from openflow.engine import advance as engine
from openflow.engine.review import (
    NO_REVIEWER,
    REVIEW_NODE,
    render_evidence,
    reviewer_node,
    run_evidence,
)
from openflow.engine.state import CancelRequested, ModelReplied
from tests.engine.driver import (
    agent_node,
    linear_workflow,
    message,
    ok_summary,
    run,
    single_agent_workflow,
    submit,
    workflow,
)


def _suggestion(**fields: Any) -> dict[str, Any]:
    return {
        "category": "prompt",
        "title": "Say what done means",
        "evidence": "step-b asked twice",
        "recommendation": "List the acceptance criteria in the task prompt.",
        **fields,
    }


def test_the_last_nodes_model_reviews_the_run_and_the_report_keeps_five_suggestions() -> None:
    wf = linear_workflow()
    given = [
        _suggestion(targetNodeId="step-b"),
        _suggestion(title="  ", targetNodeId="step-a"),  # blank: dropped
        _suggestion(category="tools", targetNodeId="nowhere"),  # unknown node: no target
        *(_suggestion(category="model") for _ in range(5)),
    ]
    d = run(
        wf,
        {
            "step-a": [ok_summary("a")],
            "step-b": [ok_summary("b")],
            "step-c": [ok_summary("c")],
            REVIEW_NODE: [submit({"suggestions": given})],
        },
    )
    assert d.snapshot.status == "completed"
    assert len(d.model.calls) == 3 and len(d.model.reviews) == 1
    request = d.model.reviews[0].intent.request
    assert request.node_id == REVIEW_NODE and request.node_label == "Post-run review"
    assert request.model == "test-model" and request.tool_names == ()
    assert request.input is not None
    evidence = request.input["runEvidence"]
    assert [n["id"] for n in evidence["nodes"]] == ["step-a", "step-b", "step-c"]
    assert evidence["nodes"][2]["output"] == {"summary": "c"}
    assert "transcript" not in evidence["nodes"][0], "conversations stay in the run store"
    report = d.snapshot.report
    assert report is not None and report["suggestions_error"] is None
    suggestions = report["suggestions"]
    assert [s["id"] for s in suggestions] == [f"suggestion-{i}" for i in range(1, 5)]
    assert suggestions[0]["target_node_id"] == "step-b"
    assert suggestions[1]["category"] == "tools" and suggestions[1]["target_node_id"] is None
    finished = [e for e in d.events if e.type == "Finished"]
    assert len(finished) == 1 and len(finished[0].report.suggestions) == 4


def test_a_review_that_fails_only_says_why() -> None:
    d = run(single_agent_workflow(), {"first": [ok_summary("done")]})
    assert d.snapshot.status == "completed"
    report = d.snapshot.report
    assert report is not None and report["suggestions"] == []
    assert report["suggestions_error"] == "Reviewer request failed: scripted model exhausted"
    text = run(single_agent_workflow(), {"first": [ok_summary()], REVIEW_NODE: [message("ok")]})
    assert text.snapshot.report is not None
    assert text.snapshot.report["suggestions_error"] == (
        "Reviewer did not return structured suggestions."
    )
    bad = run(
        single_agent_workflow(),
        {
            "first": [ok_summary()],
            REVIEW_NODE: [submit({"suggestions": [_suggestion(category="x")]})],
        },
    )
    assert bad.snapshot.status == "completed" and bad.snapshot.report is not None
    assert bad.snapshot.report["suggestions_error"].startswith(
        "Reviewer returned invalid suggestions:"
    )


def test_stopping_during_the_review_still_completes_the_run() -> None:
    wf = single_agent_workflow(handoff={"format": "legacy"})
    plan = engine.start(wf, "run", 0, entrypoint_text="go")
    call = plan.intents[0]
    done = submit({"summary": "x"}, "done")
    plan = engine.advance(
        plan.snapshot,
        [ModelReplied(call_id=call.call_id, node_id=call.node_id, reply=done)],
        1,
    )
    reviews = [i for i in plan.intents if i.kind == "call_model" and i.purpose == "review"]
    assert len(reviews) == 1 and not plan.done and plan.status == "running"
    stopped = engine.advance(plan.snapshot, [CancelRequested()], 2)
    assert stopped.done and stopped.status == "completed"
    assert any(i.kind == "cancel_work" and reviews[0].call_id in i.ids for i in stopped.intents)
    assert stopped.snapshot.report is not None
    assert stopped.snapshot.report["suggestions_error"] == "Post-run review was cancelled."
    # The late answer of the cancelled call changes nothing.
    late = engine.advance(
        stopped.snapshot,
        [ModelReplied(call_id=reviews[0].call_id, node_id=REVIEW_NODE, reply=done)],
        3,
    )
    assert late.snapshot.report == stopped.snapshot.report and not late.events


def test_no_model_anywhere_means_no_reviewer() -> None:
    wf = workflow([agent_node("a", model=""), agent_node("b", model="  ")])
    snapshot = engine.start(wf, "run", 0).snapshot
    assert reviewer_node(snapshot) is None
    assert NO_REVIEWER == "No reviewer model is configured."
    named = workflow([agent_node("a", model="m-a"), agent_node("b", model="")])
    assert reviewer_node(engine.start(named, "run", 0).snapshot) == "a"


def test_evidence_past_its_limit_loses_its_middle() -> None:
    wf = single_agent_workflow(task_prompt="x" * 200_000)
    text, truncated = render_evidence(run_evidence(engine.start(wf, "run", 0).snapshot))
    assert truncated and len(text) <= 128 * 1024
    assert "characters elided" in text and text.startswith("{")
    short, cut = render_evidence(
        run_evidence(engine.start(single_agent_workflow(), "run", 0).snapshot)
    )
    assert not cut and '"taskPrompt": "Do first."' in short
