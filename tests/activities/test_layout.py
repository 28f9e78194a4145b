"""The activities a worker registers keep their shipped names, and their modules import one way."""

from __future__ import annotations

import json
import subprocess
import sys
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


#: Lists what each module imports from the package, in a fresh interpreter: threads other
#: tests leave behind may be compiling, and CPython 3.11's AST builder is not safe beside them.
_IMPORTS_SCRIPT = """
import ast, json, sys
from pathlib import Path
package = sys.argv[2]
found = {}
for path in sorted(Path(sys.argv[1]).glob("*.py")):
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package):
            rest = node.module[len(package):].lstrip(".")
            if rest:
                names.add(rest.split(".")[0])
            else:
                names.update(alias.name for alias in node.names)
    found[path.stem] = sorted(names)
print(json.dumps(found))
"""


def _imports() -> dict[str, set[str]]:
    """Each module's imports of the package's top-level modules, at any depth in the file."""
    out = subprocess.run(
        [sys.executable, "-c", _IMPORTS_SCRIPT, str(ACTIVITIES), PACKAGE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {name: set(deps) for name, deps in json.loads(out).items()}


def test_the_activity_modules_import_one_way() -> None:
    modules = _imports()
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
