"""The tool catalog a node is offered, and the ast-grep tools when the binary is installed."""

from __future__ import annotations

import pytest

from openflow.activities.tools import default_registry
from openflow.activities.tools.astgrep import ast_grep_binary

BUILTINS = [
    "apply_patch",
    "bash",
    "edit",
    "find",
    "ls",
    "openflow_update_todo_list",
    "read",
    "search",
    "write",
]
AST_TOOLS = ["ast_edit", "ast_grep"]
needs_ast_grep = pytest.mark.skipif(ast_grep_binary() is None, reason="ast-grep is not installed")


def test_default_registry_holds_the_builtins() -> None:
    names = default_registry().names()
    expected = sorted(
        BUILTINS + ["openflow_write_plan_artifact"] + (AST_TOOLS if ast_grep_binary() else [])
    )
    assert names == expected
    assert "web_search" not in names


def test_the_seal_tool_is_offered_only_to_a_plan_source_while_planning() -> None:
    registry = default_registry()
    seal = "openflow_write_plan_artifact"
    assert seal not in [s.name for s in registry.specs("execution")]
    assert seal not in [s.name for s in registry.specs("planning")]
    assert seal in [s.name for s in registry.specs("planning", plan_source=True)]


def test_specs_are_sorted_and_carry_the_intent_property() -> None:
    specs = default_registry().specs()
    assert [s.name for s in specs] == sorted(s.name for s in specs)
    for spec in specs:
        assert spec.parameters["type"] == "object"
        assert spec.parameters["properties"]["_i"]["type"] == "string"
        assert "_i" not in spec.parameters.get("required", [])
    by_name = {s.name: s for s in specs}
    assert (by_name["read"].tier, by_name["read"].concurrency) == ("read", "shared")
    assert (by_name["write"].tier, by_name["write"].concurrency) == ("write", "exclusive")
    assert (by_name["bash"].tier, by_name["bash"].concurrency) == ("write", "node_exclusive")


def test_read_only_nodes_see_only_read_tools() -> None:
    names = [s.name for s in default_registry().specs(read_only=True)]
    expected = ["find", "ls", "openflow_update_todo_list", "read", "search"]
    if ast_grep_binary():
        expected = ["ast_grep", *expected]
    assert names == expected


def test_planning_offers_reads_plus_write_and_edit_with_a_plan_note() -> None:
    registry = default_registry()
    planning = {s.name: s for s in registry.specs("planning")}
    assert "bash" not in planning and "apply_patch" not in planning
    assert "Plan Mode" in planning["write"].description
    assert "Plan Mode" in planning["edit"].description
    assert "run://PLAN.md" not in planning["write"].description
    source = {s.name: s for s in registry.specs("planning", read_only=True, plan_source=True)}
    assert "run://PLAN.md" in source["write"].description
    reader = [s.name for s in registry.specs("planning", read_only=True)]
    assert "write" not in reader and "edit" not in reader


def test_registering_a_name_twice_is_refused() -> None:
    registry = default_registry()
    tool = registry.get("read")
    assert tool is not None
    with pytest.raises(ValueError, match="already registered"):
        registry.register(tool)


@needs_ast_grep
async def test_ast_grep_finds_structural_matches(harness) -> None:
    (harness.workdir / "a.py").write_text("def f(x):\n    return foo(x, 1)\n\nprint(foo(2, 3))\n")
    (harness.workdir / "b.js").write_text("const a = foo(1, 2);\n")
    result = await harness.one("ast_grep", {"pat": "foo($A, $B)", "paths": ["."]})
    assert result.content.splitlines() == [
        "a.py:2:    return foo(x, 1)",
        "a.py:4:print(foo(2, 3))",
        "b.js:1:const a = foo(1, 2);",
    ]
    none = await harness.one("ast_grep", {"pat": "bar($A)", "paths": ["a.py"]})
    assert none.content == "No matches for 'bar($A)' in a.py."
    missing = await harness.one("ast_grep", {"pat": "x", "paths": ["nope"]})
    assert missing.content.startswith("[not_found] 'nope' does not exist")
    outside = await harness.one("ast_grep", {"pat": "x", "paths": ["../"]})
    assert outside.content.startswith("[permission_denied]")


@needs_ast_grep
async def test_ast_edit_rewrites_and_records_changes(harness) -> None:
    (harness.workdir / "a.py").write_text("print(foo(2, 3))\nfoo(1, 2)\n")
    ops = [{"pat": "foo($A, $B)", "out": "bar($B, $A)"}, {"pat": "bar($A, $B)", "out": "baz($A)"}]
    outcome = await harness.run(("ast_edit", {"ops": ops, "paths": ["a.py"]}))
    assert (harness.workdir / "a.py").read_text() == "print(baz(3))\nbaz(2)\n"
    assert outcome.results[0].content.startswith("Rewrote 4 matches in 1 files:")
    [record] = outcome.changed_files
    assert (record["path"], record["op"]) == ("a.py", "update")
    [batch] = harness.of_type("EditBatchRecorded")
    assert batch["batch"]["snapshots"][0]["content"] == "print(foo(2, 3))\nfoo(1, 2)\n"
