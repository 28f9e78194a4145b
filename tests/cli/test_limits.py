"""Hostile workflow files and entrypoints: `openflow validate` and `openflow run` refuse them
quickly, in one line naming the limit, with exit code 2 and no traceback."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from openflow.cli import main
from openflow.server import free_port
from tests.cli.conftest import Result, assert_one_line_error, node, openflow, workflow

pytestmark = pytest.mark.asyncio(loop_scope="session")


def tiny_node(node_id: str) -> dict[str, Any]:
    return {
        "id": node_id,
        "label": node_id,
        "kind": "agent",
        "position": {"x": 0, "y": 0},
        "agent": {"system_prompt": "", "task_prompt": "", "output_schema": {"type": "object"}},
    }


def unlinked(workflow_id: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"id": workflow_id, "name": workflow_id, "nodes": list(nodes), "edges": []}


def with_schema_levels(levels: int) -> str:
    """A workflow file whose one node's output_schema nests `levels` objects deep."""
    schema = '{"type":"object","properties":{"a":' * levels + '{"type":"string"}' + "}}" * levels
    return json.dumps(unlinked("deep", tiny_node("a"))).replace('{"type": "object"}', schema, 1)


def hostile_files(folder: Path) -> dict[str, tuple[Path, str]]:
    """Each hostile file and the limit it must be refused by."""
    files = {
        "schema-10000": (with_schema_levels(10_000), "max_json_depth"),
        "schema-450": (with_schema_levels(450), "max_json_depth"),
        "schema-40": (with_schema_levels(40), "max_schema_depth"),
        "nodes-10000": (
            json.dumps(unlinked("many", *(tiny_node(f"n{i}") for i in range(10_000))), indent=2),
            "max_nodes",
        ),
    }
    found = {}
    for name, (text, limit) in files.items():
        path = folder / f"{name}.workflow.json"
        path.write_text(text)
        found[name] = (path, limit)
    huge = folder / "prompt-50mb.workflow.json"
    with huge.open("w") as file:
        file.write(json.dumps(unlinked("huge", tiny_node("a")))[:-1])
        file.write(', "padding": "')
        for _ in range(50):
            file.write("x" * 1_000_000)
        file.write('"}')
    found["file-50mb"] = (huge, "max_workflow_file_bytes")
    return found


async def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    code = await asyncio.to_thread(main, list(args))
    out, err = capsys.readouterr()
    return Result(code, out, err)


def assert_refused(result: Result, limit: str) -> None:
    """Exit 2 and one line naming the limit (`validate` lists problems on stdout)."""
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.code == 2, (result.code, result.stdout[:500], result.stderr[:500])
    assert len(lines) == 1, lines[:3]
    assert f"over the limit {limit}" in lines[0], lines[0]
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr


async def test_hostile_workflow_files_are_refused_by_validate_and_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", address)
    files = hostile_files(tmp_path)
    for name, (path, limit) in files.items():
        for command in (["validate", str(path)], ["run", str(path), "--detach"]):
            started = time.monotonic()
            assert_refused(await in_process(capsys, *command), limit)
            assert time.monotonic() - started < 10, (name, command)
    # The same through the installed command, as a user runs it.
    env = {"OPENFLOW_HOME": str(tmp_path), "OPENFLOW_TEMPORAL_ADDRESS": address}
    deepest = str(files["schema-10000"][0])
    for result in await asyncio.gather(
        openflow(env, "validate", deepest), openflow(env, "run", deepest, "--detach")
    ):
        assert_refused(result, "max_json_depth")


async def test_an_entrypoint_over_the_limit_is_refused_before_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    good = tmp_path / "solo.workflow.json"
    good.write_text(json.dumps(workflow("solo", node("solo"))))
    entry = tmp_path / "entrypoint.txt"
    with entry.open("w") as file:
        for _ in range(50):
            file.write("x" * 1_000_000)

    from_file = await in_process(capsys, "run", str(good), "--input-file", str(entry))
    both = await in_process(capsys, "run", str(good), "--input", "x", "--input-file", "-")
    on_the_line = await in_process(capsys, "run", str(good), "--input", "é" * 131_073)

    assert_one_line_error(
        from_file, "--input-file", "50,000,000 bytes", "over the limit max_entrypoint_bytes"
    )
    assert_one_line_error(both, "not allowed with argument --input")
    assert_one_line_error(on_the_line, "--input", "over the limit max_entrypoint_bytes")
