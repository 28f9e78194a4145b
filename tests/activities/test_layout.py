"""The activities a worker registers keep their shipped names, and their modules import one way."""

from __future__ import annotations

import ast
from pathlib import Path

from temporalio import activity

from openflow.worker import make_activities

ACTIVITIES = Path(__file__).resolve().parents[2] / "openflow" / "activities"
PACKAGE = "openflow.activities"


def test_every_activity_keeps_the_name_history_records(tmp_path: Path) -> None:
    acts = make_activities(tmp_path, provider_factory=None)
    names = []
    for method in acts.all():
        definition = activity._Definition.from_callable(method)
        assert definition is not None
        names.append(definition.name)
    # Literal names: recorded histories and CONTRACT 3 spell them so.
    assert sorted(names) == [
        "model_turn",
        "prepare_run",
        "read_receipt",
        "revert_batch",
        "tool_batch",
        "write_handoff",
    ]


def _imports(path: Path) -> set[str]:
    """The modules of the package's top level that a module imports, at any depth in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            rest = node.module[len(PACKAGE) :].lstrip(".")
            if rest:
                found.add(rest.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_the_activity_modules_import_one_way() -> None:
    modules = {path.stem: _imports(path) for path in ACTIVITIES.glob("*.py")}
    graph = {name: sorted(deps & modules.keys()) for name, deps in modules.items()}

    def cycle_from(name: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        if name in path:
            return (*path, name)
        for dep in graph[name]:
            found = cycle_from(dep, (*path, name))
            if found is not None:
                return found
        return None

    cycles = [found for name in sorted(graph) if (found := cycle_from(name, ())) is not None]
    assert not cycles, " -> ".join(cycles[0])
