"""`--attach` and `--allow-concurrent` through the `openflow` command."""

from __future__ import annotations

from pathlib import Path

import pytest

from openflow.client import Runs
from openflow.engine.limits import MAX_ATTACHMENT_BYTES
from openflow.testing import write_scripted_settings
from tests.cli.conftest import (
    assert_one_line_error,
    node,
    openflow,
    wait_state,
    workflow,
    write_workflow,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_file_that_cannot_be_attached_is_refused_in_one_line(
    openflow_home: Path, tmp_path: Path
) -> None:
    env = {"OPENFLOW_HOME": str(openflow_home)}
    path = write_workflow(tmp_path, workflow("attaching", node("look")))
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (MAX_ATTACHMENT_BYTES.value + 1))

    missing = await openflow(env, "run", str(path), "--attach", str(tmp_path / "nope.png"))
    assert_one_line_error(missing, "nope.png", "no such file")
    too_big = await openflow(env, "run", str(path), "--attach", str(big))
    assert_one_line_error(too_big, "big.txt", "max_attachment_bytes")
    folder = await openflow(env, "runs", "input", "run-x", "look", "hi", "--attach", str(tmp_path))
    assert_one_line_error(folder, "is a folder")
    message = await openflow(env, "runs", "message", "run-x", "look", "hi", "--attach", str(big))
    assert_one_line_error(message, "big.txt", "max_attachment_bytes")


async def test_a_second_run_on_a_folder_is_refused_naming_the_first_unless_allowed(
    openflow_env: dict[str, str], runs: Runs, tmp_path: Path
) -> None:
    home = Path(openflow_env["OPENFLOW_HOME"])
    write_scripted_settings(home, {"ask": [{"ask": "Which file?"}, {"echo": True}]})
    project = tmp_path / "project"
    project.mkdir()
    path = write_workflow(tmp_path, workflow("gated", node("ask", requestUserInput=True)))
    first = await openflow(
        openflow_env, "run", str(path), "--project", str(project), "--detach", "--run-id", "run-a"
    )
    assert first.code == 0, first.stderr
    await wait_state(runs, "run-a", lambda s: s.awaiting_node_ids == ["ask"])

    refused = await openflow(openflow_env, "run", str(path), "--project", str(project), "--detach")
    assert_one_line_error(
        refused, "run 'run-a' is changing the project folder", "--allow-concurrent"
    )
    allowed = await openflow(
        openflow_env,
        "run",
        str(path),
        "--project",
        str(project),
        "--detach",
        "--allow-concurrent",
        "--run-id",
        "run-b",
    )
    assert allowed.code == 0, allowed.stderr

    notes = tmp_path / "notes.md"
    notes.write_text("# Use this one\n")
    answered = await openflow(
        openflow_env, "runs", "input", "run-a", "ask", "this", "--attach", str(notes)
    )
    assert answered.code == 0, answered.stderr
    state = await wait_state(runs, "run-a", lambda s: s.status == "completed")
    [said] = [m for m in state.chat_logs["ask"] if m.content == "this"]
    assert [a.name for a in said.attachments] == ["notes.md"]
