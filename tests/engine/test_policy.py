"""Tool tiers, the approval matrix and Plan Mode's capability (spec 4.1, 4.5, 11)."""

from __future__ import annotations

from typing import Any

import pytest

from openflow.engine.policy import (
    NON_SOURCE_PLAN_REASON,
    SEAL_TOOL,
    approval_decision,
    batch_has_side_effects,
    is_docs_markdown,
    mutation_paths,
    plan_verdict,
    planning_tool_names,
    tool_concurrency,
    tool_tier,
)
from openflow.engine.state import ChangeEvidencePacket, canonical_sha256


@pytest.mark.parametrize(
    ("name", "args", "tier"),
    [
        ("read", None, "read"),
        ("ls", None, "read"),
        ("openflow_update_todo_list", None, "read"),
        ("write", {"path": "a"}, "write"),
        ("bash", {"command": "ls -la src"}, "read"),
        ("bash", {"command": "find . -name '*.py'"}, "read"),
        ("bash", {"command": "find . -delete"}, "write"),
        ("bash", {"command": "find . -execdir rm {} +"}, "write"),
        ("bash", {"command": "ls | wc -l"}, "write"),
        ("bash", {"command": "ls $HOME"}, "write"),
        ("bash", {"command": "cat a"}, "write"),
        ("bash", None, "write"),
        ("mcp/fs/read_file", None, "write"),
        (SEAL_TOOL, None, "write"),
        ("made_up", None, "write"),
    ],
)
def test_tiers_go_by_name_with_plain_ls_and_find_as_reads(
    name: str, args: dict[str, Any] | None, tier: str
) -> None:
    assert tool_tier(name, args) == tier


@pytest.mark.parametrize(
    ("mode", "read", "write"),
    [
        ("read_only", "allow", "deny"),
        ("write", "allow", "prompt"),
        ("always_ask", "prompt", "prompt"),
        ("yolo", "allow", "allow"),
    ],
)
def test_approval_matrix_enforces_read_only(mode: str, read: str, write: str) -> None:
    assert (approval_decision(mode, "read"), approval_decision(mode, "write")) == (read, write)


def test_concurrency_classes_and_side_effects() -> None:
    assert [tool_concurrency(n) for n in ("read", "bash", "write", "openflow_call_subagent")] == [
        "shared",
        "node_exclusive",
        "exclusive",
        "shared",
    ]
    assert not batch_has_side_effects(["read", "bash"], [{}, {"command": "ls"}])
    assert batch_has_side_effects(["read", "edit"], [{}, {"path": "a"}])


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("docs/notes.md", True),
        ("./docs/design/plan.md", True),
        ("docs/notes.MD", False),
        ("docs/notes.txt", False),
        ("docs/../src/main.md", False),
        ("/docs/notes.md", False),
        ("c:docs/notes.md", False),
        ("src/docs/notes.md", False),
        ("docs/.md", False),
        ("docs", False),
    ],
)
def test_planning_writes_are_limited_to_repo_relative_docs_markdown(path: str, ok: bool) -> None:
    assert is_docs_markdown(path) is ok


def test_mutation_paths_read_hashline_sections() -> None:
    args = {"input": "¶docs/a.md#12\nnew text\n¶src/b.py#3\nmore"}
    assert mutation_paths("edit", args) == ["docs/a.md", "src/b.py"]
    assert mutation_paths("write", {"path": "x", "input": "¶y#1"}) == ["x"]


PLAN = "run://PLAN.md"


@pytest.mark.parametrize(
    ("name", "args", "where", "verdict", "reason"),
    [
        ("read", {"path": "a"}, "planning", "normal", None),
        ("write", {"path": PLAN}, "source", "allow", None),
        ("edit", {"path": PLAN}, "source-ro", "allow", None),
        (SEAL_TOOL, {}, "source", "prompt", None),
        (SEAL_TOOL, {}, "planning", "deny", NON_SOURCE_PLAN_REASON),
        ("write", {"path": PLAN}, "planning", "deny", NON_SOURCE_PLAN_REASON),
        ("write", {"path": "docs/a.md"}, "planning", "normal", None),
        ("write", {"path": "docs/a.md"}, "planning-ro", "deny", "read-only"),
        ("write", {"path": "src/a.py"}, "planning", "deny", "docs/**/*.md"),
        ("edit", {"input": "¶docs/a.md#1\n¶src/b.py#2"}, "planning", "deny", "docs/**/*.md"),
        ("bash", {"command": "ls"}, "planning", "deny", "bash cannot run"),
        ("mcp/github/create_issue", {}, "planning", "deny", "not available while the plan"),
        ("apply_patch", {}, "planning", "deny", "not available while the plan"),
        ("bash", {"command": "make"}, "execution", "normal", None),
        ("write", {"path": PLAN}, "execution", "deny", "plan is sealed"),
        (SEAL_TOOL, {}, "execution", "deny", "plan is sealed"),
        ("write", {"path": PLAN}, "off", "deny", "no Plan Mode"),
        ("write", {"path": "src/a.py"}, "off", "normal", None),
    ],
)
def test_plan_mode_capability(
    name: str, args: dict[str, Any], where: str, verdict: str, reason: str | None
) -> None:
    got, why = plan_verdict(
        name,
        args,
        plan_mode=where != "off",
        planning=where.startswith(("planning", "source")),
        is_source=where.startswith("source"),
        read_only=where.endswith("-ro"),
    )
    assert got == verdict
    if reason is None:
        assert why is None
    else:
        assert why is not None and reason in why
        if verdict == "deny" and reason != NON_SOURCE_PLAN_REASON:
            assert why.startswith("blocked by Plan Mode")


def test_planning_catalog() -> None:
    names = ["bash", "edit", "ls", "read", "write"]
    assert planning_tool_names(names, read_only=False, is_source=False) == [
        "edit",
        "ls",
        "read",
        "write",
    ]
    assert planning_tool_names(names, read_only=True, is_source=False) == ["ls", "read"]
    assert planning_tool_names(names, read_only=True, is_source=True) == [
        "edit",
        "ls",
        "read",
        "write",
        SEAL_TOOL,
    ]


def test_change_evidence_packet_hashes_canonical_json_and_detects_tampering() -> None:
    content = {"b": [1, {"y": 2, "x": 1}], "a": "é"}
    packet = ChangeEvidencePacket.freeze("freeze", content)
    assert packet.sha256 == canonical_sha256({"a": "é", "b": [1, {"x": 1, "y": 2}]})
    assert packet.as_input() == {
        "schemaVersion": 1,
        "sourceNodeId": "freeze",
        "sha256": packet.sha256,
        "content": content,
    }
    assert packet.problem("freeze") is None
    assert "sha256" in str(packet.model_copy(update={"content": {}}).problem("freeze"))
    assert "pinned" in str(packet.problem("other"))
    assert ChangeEvidencePacket.model_validate_json(packet.model_dump_json()) == packet
