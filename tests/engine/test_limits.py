"""The named limits: measured without recursion, refused with the limit's name, in the README."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from openflow.engine import advance as engine
from openflow.engine.errors import LimitExceeded
from openflow.engine.graph import workflow_problems
from openflow.engine.limits import (
    LIMITS,
    MAX_ENTRYPOINT_BYTES,
    MAX_JSON_DEPTH,
    MAX_MESSAGE_BYTES,
    MAX_NODES,
    text_depth,
    value_depth,
)
from openflow.engine.spec import Workflow
from openflow.engine.state import ApprovalDecided, InputGiven, MessageSent, RetryRequested
from tests.engine.driver import agent_node, ask, run, workflow

README = Path(__file__).resolve().parents[2] / "README.md"


def nested_schema(levels: int) -> dict[str, Any]:
    """An object schema whose properties nest `levels` objects deep (2 JSON levels each)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"part": schema}}
    return schema


def nested_text(levels: int) -> str:
    """The JSON text of `nested_schema(levels)`, built without recursion."""
    return '{"type":"object","properties":{"part":' * levels + '{"type":"string"}' + "}}" * levels


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ("3", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('["[[[", "]]]", "\\"[["]', 1),
        ('{"a\\\\": ["\\\\"]}', 2),
        ('["unterminated [[[[', 1),
        ("]]]][[", 0),
        ("[[[", 3),
        ("[{]}", 2),
    ],
)
def test_text_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert text_depth(text) == depth
    assert text_depth(text.encode()) == depth


def test_text_depth_is_linear_on_hostile_text() -> None:
    started = time.monotonic()
    for text, depth in (
        ('"' + "\\" * 1_000_001, 0),
        ('"\\"' * 350_000, 0),
        ("[" * 1_000_000, 1_000_000),
        ('["' * 500_000, 250_000),
        ("[]" * 500_000, 1),
        (("[" * 128 + "]" * 128) * 3_900, 128),
    ):
        assert text_depth(text.encode()) == depth
    assert time.monotonic() - started < 3.0


def test_value_depth_walks_any_depth_without_recursion() -> None:
    value: Any = "leaf"
    for _ in range(100_000):
        value = {"a": [value]}

    assert value_depth(value, 10**9) == 200_000
    assert value_depth(value, 10) == 11
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert value_depth(cyclic, 50) == 51


def load(nodes: list[dict[str, Any]], edges: list[dict[str, Any]] | None = None) -> Workflow:
    return Workflow.model_validate(
        {"id": "wf", "name": "Limits", "nodes": nodes, "edges": edges or []}
    )


def test_a_schema_ten_thousand_levels_deep_is_refused_by_name_in_code_and_file() -> None:
    deep = load([agent_node("a", output_schema=nested_schema(10_000))])

    problems = workflow_problems(deep)

    assert [p.code for p in problems] == ["LimitExceeded"]
    assert problems[0].detail == "max_schema_depth" and problems[0].node_id == "a"
    assert "node 'a': output_schema nests 20,001 levels" in problems[0].message
    text = json.dumps(load([agent_node("a")]).to_json_dict()).replace(
        '"output_schema": {', '"output_schema": {"x": ' + nested_text(10_000) + ", ", 1
    )
    with pytest.raises(LimitExceeded) as caught:
        Workflow.load_json(text)
    assert caught.value.limit == "max_json_depth"
    assert "over the limit max_json_depth (128 levels)" in str(caught.value)


def test_a_schema_just_inside_the_depth_limit_passes() -> None:
    ok = load([agent_node("a", output_schema=nested_schema(31))])  # 63 levels

    assert workflow_problems(ok) == []


@pytest.mark.parametrize(
    ("build", "limit"),
    [
        (lambda: load([agent_node(f"n{i}") for i in range(10_000)]), "max_nodes"),
        (
            lambda: load(
                [agent_node("a"), agent_node("b")],
                [{"id": f"e{i}", "from": "a", "to": "b"} for i in range(2_001)],
            ),
            "max_edges",
        ),
        (
            lambda: load([agent_node("a", output_schema={"description": "x" * 200_000})]),
            "max_schema_bytes",
        ),
        (lambda: load([agent_node("a", task_prompt="x" * 1_100_000)]), "max_workflow_bytes"),
    ],
    ids=["nodes", "edges", "schema bytes", "workflow bytes"],
)
def test_each_workflow_limit_is_named_and_stops_the_other_rules(build: Any, limit: str) -> None:
    started = time.monotonic()
    problems = workflow_problems(build())

    assert problems and {p.code for p in problems} == {"LimitExceeded"}
    assert problems[0].detail == limit
    assert f"over the limit {limit}" in problems[0].message
    assert time.monotonic() - started < 5.0


def test_runs_recorded_before_the_limits_replay_without_them() -> None:
    big = load([agent_node(f"n{i}") for i in range(MAX_NODES.value + 1)])

    assert workflow_problems(big, limits=False) == []
    old = engine.start(big, "run-old", 0, limits=False)
    assert not old.snapshot.finished and not old.snapshot.limits
    new = engine.start(big, "run-new", 0)
    assert new.snapshot.status == "failed"
    assert "max_nodes" in (new.snapshot.terminal_error or "")


def test_an_entrypoint_over_the_limit_ends_the_run_at_once_and_is_not_recorded_whole() -> None:
    text = "é" * (MAX_ENTRYPOINT_BYTES.value // 2 + 1)

    plan = engine.start(load([agent_node("a")]), "run-long", 0, entrypoint_text=text)

    assert plan.snapshot.status == "failed"
    assert "over the limit max_entrypoint_bytes" in (plan.snapshot.terminal_error or "")
    started = next(e for e in plan.events if e.type == "RunStarted")
    assert len(started.entrypoint_text) < 2_000  # type: ignore[attr-defined]


def test_texts_over_the_message_limit_are_refused_and_ignored_in_short() -> None:
    wf = workflow([agent_node("ask", requestUserInput=True)])
    d = run(wf, {"ask": [ask("Name?")]})
    long = "x" * (MAX_MESSAGE_BYTES.value + 1)
    for action in (
        InputGiven(node_id="ask", text=long),
        MessageSent(node_id="ask", text=long),
        RetryRequested(node_id="ask", message=long),
        ApprovalDecided(approval_id="none", allow=False, reason=long),
    ):
        reason = engine.check(d.snapshot, action)
        assert reason is not None and "over the limit max_message_bytes" in reason

    plan = d.feed(InputGiven(node_id="ask", text=long))

    ignored = [e for e in plan.events if e.type == "ActionIgnored"]
    assert len(ignored) == 1
    assert len(json.dumps(ignored[0].action)) < 2_000  # type: ignore[attr-defined]
    assert d.snapshot.nodes["ask"].awaiting
    assert engine.check(d.snapshot, InputGiven(node_id="ask", text="x" * 1000)) is None


def test_every_limit_is_in_the_readme_table_with_its_value() -> None:
    readme = README.read_text(encoding="utf-8")
    for limit in LIMITS:
        row = re.search(rf"^\| `{limit.name}` \| ([^|]+) \|", readme, re.MULTILINE)
        assert row is not None, f"README has no row for {limit.name}"
        assert f"{limit.value:,}" in row.group(1), (limit.name, row.group(1))


def test_the_json_depth_limit_leaves_room_for_pydantic_and_history() -> None:
    # Temporal payloads go through pydantic, which refuses JSON deeper than about 250 levels;
    # a workflow in a run's input sits about six levels down.
    assert MAX_JSON_DEPTH.value + 10 < 250


def test_a_reply_whose_text_nests_past_the_limit_is_plain_text_not_a_crash() -> None:
    from openflow.engine.classify import classify_reply
    from openflow.engine.request import ModelReply

    deep = '{"summary": ' + "[" * 50_000 + "]" * 50_000 + "}"
    result = classify_reply(
        ModelReply(wire="chat_completions", text=deep), {"type": "object"}
    )  # no RecursionError from reading the text as JSON
    assert result.outcome.kind != "completed"
