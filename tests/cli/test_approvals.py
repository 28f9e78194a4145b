"""`openflow runs approve|deny` call by call: the options, their one-line errors, a real run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from openflow.cli import main
from openflow.cli.approvals import approval_action
from openflow.cli.parser import build_parser
from openflow.client import Runs
from openflow.server import free_port
from openflow.testing import write_scripted_settings
from tests.api.test_approvals import decided_by, writes
from tests.cli.conftest import (
    Result,
    assert_one_line_error,
    node,
    openflow,
    wait_state,
    workflow,
    write_workflow,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")


def action(*args: str) -> dict[str, object]:
    parsed = build_parser().parse_args(["runs", *args])
    return approval_action(parsed).model_dump(exclude_defaults=True, exclude_none=True)


async def test_the_options_name_each_calls_decision() -> None:
    assert action("approve", "r", "b1") == {"kind": "approval", "approval_id": "b1", "allow": True}
    assert action("deny", "r", "b1", "--reason", "no") == {
        "kind": "approval",
        "approval_id": "b1",
        "allow": False,
        "reason": "no",
    }
    assert action(
        "approve", "r", "b1", "--deny-call", "c2=not that", "--deny-call", "c3", "--by", "Ada"
    ) == {
        "kind": "approval",
        "approval_id": "b1",
        "allow": True,
        "decisions": [
            {"call_id": "c2", "allow": False, "reason": "not that"},
            {"call_id": "c3", "allow": False},
        ],
        "by": "Ada",
    }
    # --call approves only the calls it names; --edit approves its call with new arguments.
    only = action(
        "approve", "r", "b1", "--call", "c1", "--edit", "c2", '{"path": "docs/a.md"}',
        "--remember", "write:docs/",
    )  # fmt: skip
    assert only["allow"] is False
    assert only["decisions"] == [
        {"call_id": "c1", "allow": True},
        {"call_id": "c2", "allow": True, "arguments": {"path": "docs/a.md"}},
    ]
    assert only["remember"] == {"tool": "write", "path_prefix": "docs/"}
    assert action("deny", "r", "b1", "--call", "c1", "--remember", "read")["remember"] == {
        "tool": "read"
    }


async def test_bad_options_are_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    base = ["runs", "approve", "run-x", "b1"]
    cases = [
        (["--edit", "c1", "{bad"], "--edit c1: the arguments are not JSON"),
        (["--edit", "c1", "[1, 2]"], "--edit c1: give the arguments as a JSON object"),
        (["--edit", "c1"], "--edit: expected 2 arguments"),
        (["--call", "c1", "--deny-call", "c1=no"], "call 'c1' is decided twice"),
        (["--edit", "c1", "{}", "--edit", "c1", '{"a": 1}'], "call 'c1' is decided twice"),
        (["--deny-call", "=why"], "--deny-call: give a call id"),
        (["--remember", "write:"], "--remember: the path prefix after 'write:' is empty"),
        (["--remember", ":docs/"], "--remember: give a tool name"),
        (["--by", "x" * 201], "--by: String should have at most 200 characters"),
        (["--by", "Ada\tL"], "--by: give a name of printable characters"),
        (["--deny-call", "c1=" + "x" * 70_000], "--deny-call c1: the reason is"),
    ]
    revoke = ["runs", "revoke", "run-x"]
    for extra, expected in [
        (["write:"], "TOOL: the path prefix after 'write:' is empty"),
        ([":docs"], "TOOL: give a tool name"),
        (["write", "--by", "a\tb"], "--by: give a name of printable characters"),
    ]:
        code = await asyncio.to_thread(main, [*revoke, *extra])
        out, err = capsys.readouterr()
        assert_one_line_error(Result(code, out, err), expected)
    for extra, expected in cases:
        code = await asyncio.to_thread(main, [*base, *extra])
        out, err = capsys.readouterr()
        assert_one_line_error(Result(code, out, err), expected)


async def test_calls_denied_one_by_one_through_the_cli(
    openflow_env: dict[str, str], runs: Runs, tmp_path: Path, client: Client
) -> None:
    home = Path(openflow_env["OPENFLOW_HOME"])
    script = [writes("a", "b"), writes("c", "d"), {"submit": {"summary": "done"}}]
    write_scripted_settings(home, {"act": script})
    path = write_workflow(tmp_path, workflow("calls", node("act")))
    started = await openflow(openflow_env, "run", str(path), "--detach", "--run-id", "run-calls")
    assert started.code == 0, started.stderr
    state = await wait_state(runs, "run-calls", lambda s: s.pending_approvals)
    batch = state.pending_approvals[0].approval_id
    shown = await openflow(openflow_env, "runs", "show", "run-calls")
    assert "call c-a: write(content=a, path=a.txt)" in shown.stdout, shown.stdout
    assert "call c-b: write(content=b, path=b.txt)" in shown.stdout, shown.stdout
    assert f"per call: openflow runs approve run-calls {batch} --deny-call CALL_ID=REASON" in (
        shown.stdout
    )

    first = await openflow(
        openflow_env, "runs", "approve", "run-calls", batch, "--deny-call", "c-b=not b",
        "--remember", "write:zz/", "--by", "Ada",
    )  # fmt: skip
    assert first.code == 0, first.stderr
    assert first.lines == [
        f"decided {batch!r}: 0 approved, 1 denied by call, any other call approved; "
        "run run-calls is running"
    ]
    state = await wait_state(
        runs,
        "run-calls",
        lambda s: s.pending_approvals and s.pending_approvals[0].approval_id != batch,
    )
    second = state.pending_approvals[0].approval_id
    assert [(g.tool, g.path_prefix) for g in state.grants] == [("write", "zz/")]
    revoked = await openflow(
        openflow_env, "runs", "revoke", "run-calls", "write:zz/", "--by", "Ada"
    )
    assert revoked.lines == ["revoked 'write:zz/'; run run-calls is paused"], revoked.stderr
    again = await openflow(openflow_env, "runs", "revoke", "run-calls", "write:zz/")
    assert_one_line_error(again, "no grant 'write:zz/' to revoke (grants: none)")
    denied = await openflow(
        openflow_env, "runs", "approve", "run-calls", second,
        "--deny-call", "c-c=later", "--deny-call", "c-d", "--reason", "later", "--by", "Ada",
    )  # fmt: skip
    assert denied.code == 0, denied.stderr
    assert denied.lines == [
        f"decided {second!r}: 0 approved, 2 denied by call, any other call approved; "
        "run run-calls is running"
    ]

    state = await wait_state(runs, "run-calls", lambda s: s.status == "completed")
    events = await runs.events("run-calls")
    denials = {e.tool_call_id: e.reason for e in events if e.type == "ToolDenied"}
    assert denials == {"c-b": "not b", "c-c": "later", "c-d": "later"}
    written = [p.name for p in (home / "runs" / "run-calls" / "workspace").glob("*.txt")]
    assert written == ["a.txt"]
    assert await decided_by(client, "run-calls") == ["Ada", "Ada", "Ada"]
