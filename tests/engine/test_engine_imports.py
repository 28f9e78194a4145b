"""The engine stays pure: it imports only the stdlib, pydantic, networkx and jsonschema."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "openflow" / "engine"
ALLOWED_PACKAGES = {"pydantic", "networkx", "jsonschema"}
ENGINE_FILES = sorted(ENGINE.rglob("*.py"))


def imported_modules(path: Path) -> list[str]:
    """Absolute names of the modules a file imports (relative imports resolved)."""
    package = ".".join(path.relative_to(ENGINE.parent.parent).with_suffix("").parts[:-1])
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names.append(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.append(node.module)
    return names


def is_allowed(module: str) -> bool:
    top = module.split(".")[0]
    return (
        top in sys.stdlib_module_names
        or top in ALLOWED_PACKAGES
        or module == "openflow.engine"
        or module.startswith("openflow.engine.")
    )


def test_the_engine_has_files() -> None:
    assert ENGINE / "spec.py" in ENGINE_FILES


@pytest.mark.parametrize("path", ENGINE_FILES, ids=lambda p: p.name)
def test_engine_module_imports_only_allowed_packages(path: Path) -> None:
    forbidden = [name for name in imported_modules(path) if not is_allowed(name)]

    assert forbidden == [], (
        f"{path.name} imports {forbidden}; the engine may import only the standard library, "
        "pydantic, networkx, jsonschema and openflow.engine"
    )


def test_the_check_catches_a_forbidden_import() -> None:
    assert not is_allowed("temporalio.workflow")
    assert not is_allowed("httpx")
    assert not is_allowed("openflow.activities.store")
    assert is_allowed("openflow.engine.spec")
    assert is_allowed("json")
