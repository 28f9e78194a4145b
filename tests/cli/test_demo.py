"""`openflow demo --exit`: a fresh home, its own server, worker and API, the example run end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from openflow.server import free_port
from tests.cli.conftest import openflow

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_demo_runs_the_example_to_completion_and_exits_0(tmp_path: Path) -> None:
    home = tmp_path / "home"
    grpc, ui, api = free_port(), free_port(), free_port()
    env = {"OPENFLOW_HOME": str(home), "OPENFLOW_TEMPORAL_ADDRESS": f"127.0.0.1:{grpc}"}

    result = await openflow(
        env, "demo", "--exit", "--ui-port", str(ui), "--api-port", str(api), timeout=120
    )

    assert result.code == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    match = re.search(r"Run id:\s+(run-[0-9a-f-]+)", result.stdout)
    assert match, result.stdout
    run_id = match.group(1)
    assert f"http://127.0.0.1:{ui}/namespaces/default/workflows/{run_id}" in result.stdout
    assert f"http://127.0.0.1:{api}" in result.stdout
    assert f"Run {run_id} completed." in result.stdout
    for label in ("Collect changes", "Draft notes", "Check upgrade risks", "Publish"):
        assert f"✔ {label} completed" in result.stdout
    assert "approved automatically" in result.stdout
    assert "suggestion [workflow] (publish): Hand the risks to the notes" in result.stdout

    run_dir = home / "runs" / run_id
    notes = (run_dir / "workspace" / "RELEASE_NOTES.md").read_text()
    assert "## Upgrade notes" in notes
    assert (run_dir / "handoffs" / "notes" / "HANDOFF.md").read_text().startswith("# Release")
    assert not (home / "settings.json").exists(), "the demo must not write the user's settings"
    handoff = json.loads((run_dir / "handoffs" / "publish" / "HANDOFF.json").read_text())
    assert handoff["file"] == "RELEASE_NOTES.md"
