"""A workflow travels through history without its fields at their defaults and reads back
the same; a union's discriminator stays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openflow import contracts as c
from openflow.engine.request import ModelReply, UsageReport
from openflow.engine.spec import Workflow
from openflow.engine.wire import without_defaults


def _workflow(handoff: dict[str, object]) -> Workflow:
    node = {
        "id": "draft",
        "label": "Draft",
        "kind": "agent",
        "position": {"x": 0, "y": 0},
        "agent": {
            "system_prompt": "s",
            "task_prompt": "t",
            "model": "m",
            "output_schema": {"type": "object"},
            "handoff": handoff,
        },
    }
    return Workflow.model_validate({"id": "w", "name": "w", "nodes": [node], "edges": []})


def test_a_workflow_at_its_defaults_travels_small_and_reads_back_the_same() -> None:
    wf = _workflow({"format": "json"})
    whole = wf.model_dump(mode="json")
    slim = without_defaults(wf, whole)
    assert len(json.dumps(slim)) < len(json.dumps(whole)) / 2
    assert "settings" not in slim and "callableAgents" not in slim["nodes"][0]["agent"]
    assert Workflow.model_validate(slim) == wf
    run = c.RunInput(run_id="r", workflow=wf)
    assert c.RunInput.model_validate_json(run.model_dump_json()) == run


def test_a_markdown_handoff_keeps_its_format() -> None:
    wf = _workflow({"format": "markdown"})
    slim = without_defaults(wf, wf.model_dump(mode="json"))
    assert slim["nodes"][0]["agent"]["handoff"] == {"format": "markdown"}
    assert Workflow.model_validate(slim) == wf


# --- what history carries of a run's start and of its model turns ------------------------

ROOT = Path(__file__).resolve().parents[2]
COMPAT_DIR = ROOT / ".." / "shared" / "compat"
WORKFLOW_FILES = sorted(COMPAT_DIR.glob("*.workflow.json")) if COMPAT_DIR.is_dir() else []
WORKFLOW_FILES += sorted((ROOT / "examples").glob("*.workflow.json"))


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_a_start_input_reads_back_the_very_workflow_it_was_made_of(path: Path) -> None:
    wf = Workflow.load_json(path.read_text(encoding="utf-8"))
    start = c.RunInput(workflow=wf, entrypoint="go", workflow_stored="d")
    back = c.RunInput.model_validate_json(start.model_dump_json())
    assert back == start
    # To the byte: what the client stored (and named by its digest) is what the run reads.
    assert back.workflow.model_dump_json() == wf.model_dump_json()


def test_a_start_input_leaves_out_what_every_node_of_a_made_workflow_says() -> None:
    agent = {"system_prompt": "s", "task_prompt": "t", "output_schema": {}}
    nodes = [
        {"id": "a", "label": "a", "kind": "Agent", "position": {"x": 0, "y": 0.0}},
        {"id": "b", "label": "B", "kind": "agent", "position": {"x": 0.0, "y": 2.5}},
        {"id": "c", "label": "c", "kind": "agent", "position": {"x": -0.0, "y": 0}},
        {"id": "d", "label": "d", "kind": "agent", "position": {"x": 0, "y": 0, "z": 1}},
    ]
    wf = Workflow.model_validate(
        {"id": "w", "name": "w", "edges": [], "nodes": [{**n, "agent": agent} for n in nodes]}
    )
    data = json.loads(c.RunInput(workflow=wf).model_dump_json())
    assert "run_id" not in data
    nodes = {n["id"]: n for n in data["workflow"]["nodes"]}
    assert all("kind" not in n for n in nodes.values())
    assert "position" not in nodes["a"] and "label" not in nodes["a"]
    assert nodes["b"]["label"] == "B" and nodes["b"]["position"] == {"x": 0.0, "y": 2.5}
    # -0.0 and a position with more than x and y are kept as they are.
    assert nodes["c"]["position"] == {"x": -0.0, "y": 0.0}
    assert nodes["d"]["position"] == {"x": 0.0, "y": 0.0, "z": 1}
    back = c.RunInput.model_validate(data).workflow
    assert back == wf and back.model_dump_json() == wf.model_dump_json()


def test_an_agent_like_an_earlier_nodes_travels_as_a_reference_to_it() -> None:
    agent = {
        "system_prompt": "You review.",
        "task_prompt": "Review it.",
        "model": "m",
        "output_schema": {"type": "object"},
        "tools": {"approvalMode": "yolo"},
    }
    other = {**agent, "task_prompt": "Check it.", "model": "m-2"}
    del other["tools"]
    lone = {"system_prompt": "s", "task_prompt": "t", "output_schema": {}}
    nodes = [("a", agent), ("b", agent), ("c", other), ("d", lone)]
    wf = Workflow.model_validate(
        {
            "id": "w",
            "name": "w",
            "edges": [],
            "nodes": [
                {"id": i, "label": i, "kind": "agent", "position": {"x": 0, "y": 0}, "agent": a}
                for i, a in nodes
            ],
        }
    )
    data = json.loads(c.RunInput(workflow=wf).model_dump_json())
    agents = {n["id"]: n["agent"] for n in data["workflow"]["nodes"]}
    assert isinstance(agents["a"], dict) and agents["b"] == ["a"]
    # What differs travels with the reference, a field the base sets and the node does not
    # at its default.
    base, differ = agents["c"]
    assert base == "a" and differ["task_prompt"] == "Check it." and differ["model"] == "m-2"
    assert differ["tools"] != agent["tools"]
    assert isinstance(agents["d"], dict)  # shorter whole
    back = c.RunInput.model_validate(data).workflow
    assert back == wf and back.model_dump_json() == wf.model_dump_json()
    # A run that continues as new from before the reference carries every agent whole.
    whole = json.loads(c.RunInput(workflow=wf, agent_refs=False).model_dump_json())
    assert all(isinstance(n["agent"], dict) for n in whole["workflow"]["nodes"])
    assert c.RunInput.model_validate(whole).workflow == wf
    # A reference to no node's agent is refused as the workflow's own error.
    data["workflow"]["nodes"][1]["agent"] = ["nobody"]
    with pytest.raises(ValueError, match="agent"):
        c.RunInput.model_validate(data)


def _turn(**delta: object) -> c.ModelTurnInput:
    return c.ModelTurnInput.model_validate(
        {"call_id": "model:a-1", "header_digest": "d", "delta": {"base_len": 3, **delta}}
    )


def _reply(**update: object) -> ModelReply:
    reply = ModelReply(
        wire="chat_completions",
        model="m",
        text="hi",
        usage=UsageReport(prompt_tokens=5, completion_tokens=2, cost_usd=0.0),
    )
    return reply.model_copy(update=update)


def _travelled(result: c.ModelTurnResult, asked: c.TurnAsked) -> tuple[dict[str, Any], Any]:
    """The result as history holds it, and as the workflow reads it back."""
    data = json.loads(result.lean(asked).model_dump_json())
    return data, c.ModelTurnResult.model_validate(data).restored(asked)


@pytest.mark.parametrize(
    "update",
    [
        {},
        {"model": "m-2025-01-01"},
        {"model": ""},
        {"usage": UsageReport(prompt_tokens=5, cost_usd=0.25)},
        {"usage": None},
    ],
)
def test_a_model_turn_result_leaves_out_what_its_call_asked_for(update: dict[str, Any]) -> None:
    asked = c.turn_asked(_turn(), "chat_completions", "m")
    assert asked == c.TurnAsked(wire="chat_completions", model="m", persisted_len=3)
    result = c.ModelTurnResult(reply=_reply(**update), persisted_len=3, ms=7)
    data, back = _travelled(result, asked)
    assert "wire" not in data["reply"] and "persisted_len" not in data
    assert ("model" in data["reply"]) == ("model" in update)
    assert "cost_usd" not in json.dumps(data) or "usage" in update
    assert back == result and back.reply == result.reply


@pytest.mark.parametrize(
    ("kind", "update", "persisted"),
    [
        ("openai", {}, 3),  # another wire than the kind's own (a transport the profile names)
        ("chat_completions", {}, 4),  # a transcript of another length than the call's
        ("chat_completions", {"usage": UsageReport(prompt_tokens=1)}, 3),  # a cost unknown
        (None, {}, 3),  # a provider the workflow does not know
    ],
)
def test_a_model_turn_result_that_is_not_what_was_asked_travels_whole(
    kind: str | None, update: dict[str, Any], persisted: int
) -> None:
    asked = c.turn_asked(_turn(), kind, "m")
    result = c.ModelTurnResult(reply=_reply(**update), persisted_len=persisted)
    data, back = _travelled(result, asked)
    assert data["reply"]["wire"] == "chat_completions" and data["persisted_len"] == persisted
    assert back == result


def test_a_result_recorded_before_lean_results_reads_back_as_it_was() -> None:
    old = {
        "reply": {"wire": "scripted", "model": "m", "usage": {"prompt_tokens": 1, "cost_usd": 0.0}},
        "persisted_len": 0,
        "handoff_stored": True,
    }
    asked = c.TurnAsked(wire="scripted", model="other", persisted_len=9)
    back = c.ModelTurnResult.model_validate(old).restored(asked)
    assert back.reply is not None and back.reply.model == "m" and back.persisted_len == 0
    assert back.reply.usage is not None and back.reply.usage.cost_usd == 0.0


def test_a_json_handoff_travels_as_its_format() -> None:
    call = _turn().model_copy(update={"handoff": c.TurnHandoff(format="json")})
    data = json.loads(call.model_dump_json())
    assert data["handoff"] == "json" and "provider_id" not in data
    assert c.ModelTurnInput.model_validate(data) == call
    markdown = c.TurnHandoff(format="markdown", headings=["## Plan"])
    assert c.TurnHandoff.model_validate_json(markdown.model_dump_json()) == markdown


def test_a_submit_call_travels_without_the_tools_name_and_reads_back_whole() -> None:
    from openflow.engine.policy import HARNESS_SUBMIT
    from openflow.engine.request import RawToolCall

    calls = (
        RawToolCall(id="c1", name=HARNESS_SUBMIT, arguments={"output": {"summary": "ok"}}),
        RawToolCall(id="c2", name="read", arguments={"path": "a"}),
    )
    asked = c.turn_asked(_turn(), "chat_completions", "m")
    result = c.ModelTurnResult(reply=_reply(tool_calls=calls), persisted_len=3, ms=7)
    data, back = _travelled(result, asked)
    assert [call.get("name") for call in data["reply"]["tool_calls"]] == [None, "read"]
    assert HARNESS_SUBMIT not in json.dumps(data)
    assert back == result and back.reply == result.reply
    # A whole result (recorded before, or not what was asked for) keeps every name.
    whole = {"reply": {"wire": "scripted", "tool_calls": [{"id": "c1", "name": HARNESS_SUBMIT}]}}
    read = c.ModelTurnResult.model_validate(whole).restored(asked)
    assert read.reply is not None and read.reply.tool_calls[0].name == HARNESS_SUBMIT


def test_a_submit_of_an_output_alone_travels_as_the_output_and_its_usage_as_counts() -> None:
    from openflow.engine.policy import HARNESS_SUBMIT
    from openflow.engine.request import RawToolCall

    calls = (
        RawToolCall(
            id="c1", name=HARNESS_SUBMIT, arguments={"output": {"s": 1}, "assistant_message": ""}
        ),
        RawToolCall(
            id="c2", name=HARNESS_SUBMIT, arguments={"output": 1, "assistant_message": "hi"}
        ),
        RawToolCall(
            id="c3", name=HARNESS_SUBMIT, arguments={"output": 2, "assistant_message": None}
        ),
    )
    asked = c.turn_asked(_turn(), "chat_completions", "m")
    usage = UsageReport(prompt_tokens=5, completion_tokens=0, cached_input_tokens=3, cost_usd=0.0)
    result = c.ModelTurnResult(reply=_reply(tool_calls=calls, usage=usage), persisted_len=3)
    data, back = _travelled(result, asked)
    first, second, third = data["reply"]["tool_calls"]
    assert first == {"id": "c1", "output": {"s": 1}}
    assert second["arguments"] == {"output": 1, "assistant_message": "hi"}
    assert third["arguments"] == {"output": 2, "assistant_message": None}
    assert data["reply"]["usage"] == [5, 0, 3]
    assert back == result and back.reply == result.reply
    # A usage with a cost or a total of its own stays an object.
    priced = UsageReport(prompt_tokens=5, completion_tokens=2, total_tokens=9, cost_usd=0.0)
    data, back = _travelled(result.model_copy(update={"reply": _reply(usage=priced)}), asked)
    assert data["reply"]["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 9}
    assert back.reply is not None and back.reply.usage == priced


def test_a_reviews_call_leaves_out_that_it_runs_no_reads() -> None:
    review = _turn().model_copy(
        update={"call_id": "model:__post_run_review-4", "purpose": "review", "eager": False}
    )
    data = json.loads(review.model_dump_json())
    assert "eager" not in data and data["purpose"] == "review"
    back = c.ModelTurnInput.model_validate(data)
    assert back.purpose == "review" and back.call_id == review.call_id
    # A node's turn that runs no reads at once still says so.
    assert (
        json.loads(_turn().model_copy(update={"eager": False}).model_dump_json())["eager"] is False
    )


def test_a_starts_result_names_its_provider_unless_it_is_the_one_profile() -> None:
    one = c.PrepareResult(
        profiles={"p": {"kind": "openai"}}, active_provider=None, tool_names=[], execution_dir=""
    )
    data = json.loads(one.model_dump_json())
    assert "active_provider" not in data
    assert c.PrepareResult.model_validate(data).provider == "p"
    # Results recorded before name it, whatever their profiles.
    old = {"profiles": {"p": {"kind": "openai"}}, "active_provider": "", "tool_names": []}
    assert c.PrepareResult.model_validate({**old, "execution_dir": ""}).provider == ""
    two = {"profiles": {"p": {}, "q": {}}, "tool_names": [], "execution_dir": ""}
    assert c.PrepareResult.model_validate(two).provider == ""


def test_a_run_result_leaves_out_its_run_id_when_the_workflow_id_says_it() -> None:
    result = c.RunResult(status="completed", outputs={"a": {"summary": "ok"}})
    assert json.loads(result.model_dump_json()) == {
        "status": "completed",
        "outputs": {"a": {"summary": "ok"}},
    }
    assert c.RunResult.model_validate({"run_id": "r", "status": "completed"}).run_id == "r"
