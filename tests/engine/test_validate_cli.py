"""`openflow validate FILE`: 'ok' and exit 0, or the problems and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from openflow.cli import build_parser, main
from openflow.engine.errors import ValidationCode

REPO = Path(__file__).resolve().parents[2]
BROKEN = REPO / "tests" / "fixtures" / "broken"
COMPAT_DIR = REPO / ".." / "shared" / "compat"
COMPAT_FILES = sorted(COMPAT_DIR.glob("*.workflow.json")) if COMPAT_DIR.is_dir() else []
needs_compat = pytest.mark.skipif(
    not COMPAT_FILES, reason=f"no compat workflows under {COMPAT_DIR}"
)

# fixture file -> (the rule it breaks, what the message must name)
BROKEN_FIXTURES: dict[str, tuple[ValidationCode, str]] = {
    "empty_workflow.json": ("EmptyWorkflow", "no nodes"),
    "duplicate_node_id.json": ("DuplicateNodeId", "node 'draft'"),
    "invalid_handoff_template.json": ("InvalidHandoffTemplate", "node 'report'"),
    "invalid_output_schema.json": ("InvalidOutputSchema", "node 'plan'"),
    "invalid_mcp_context_selection.json": ("InvalidMcpContextSelection", "node 'research'"),
    "duplicate_edge_id.json": ("DuplicateEdgeId", "edge 'link'"),
    "self_edge.json": ("SelfEdge", "edge 'loop-loop'"),
    "missing_endpoint.json": ("MissingEndpoint", "edge 'draft-review'"),
    "plan_mode_source_missing.json": ("PlanModeSourceMissing", "'freeze'"),
    "plan_mode_source_not_interactive.json": ("PlanModeSourceNotInteractive", "node 'freeze'"),
    "cycle.json": ("Cycle", "'a' -> 'b' -> 'c' -> 'a'"),
    "schema_over_limit.json": ("LimitExceeded", "node 'plan': output_schema nests 81 levels"),
}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "openflow.cli", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
    )


@needs_compat
@pytest.mark.parametrize("path", COMPAT_FILES, ids=lambda p: p.name)
def test_compat_files_are_ok(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(path)])

    out, err = capsys.readouterr()
    assert code == 0
    assert out == "ok\n"
    assert err == ""


def test_every_rule_that_a_file_can_break_has_a_broken_fixture() -> None:
    covered = {code for code, _ in BROKEN_FIXTURES.values()}

    assert covered == set(get_args(ValidationCode)) - {"InternalConsistency"}


@pytest.mark.parametrize(("name", "expected"), BROKEN_FIXTURES.items(), ids=list(BROKEN_FIXTURES))
def test_broken_files_print_each_problem_and_exit_2(
    name: str, expected: tuple[ValidationCode, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, names = expected

    code = main(["validate", str(BROKEN / name)])

    out, err = capsys.readouterr()
    assert code == 2
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert names in lines[0]
    assert " — " in lines[0]
    assert "ok" not in lines
    assert err == ""


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("not_json.json", "not valid JSON: Expecting value at line 1, column 1"),
        ("not_a_workflow.json", "not an OpenFlow workflow: id is missing"),
        ("no_such_file.json", "no such file"),
    ],
)
def test_unreadable_files_get_one_line_and_exit_2(
    name: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = BROKEN / name

    code = main(["validate", str(path)])

    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(str(path))
    assert expected in err


def test_a_folder_gets_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(BROKEN)])

    _, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1
    assert "is a folder" in err


def test_every_problem_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = (BROKEN / "cycle.json").read_text(encoding="utf-8")
    path = tmp_path / "two.workflow.json"
    path.write_text(
        broken.replace('"to": "a"', '"to": "ghost"').replace('"id": "a-b"', '"id": "b-c"')
    )

    code = main(["validate", str(path)])

    out, _ = capsys.readouterr()
    assert code == 2
    assert out.splitlines() == [
        "edge 'b-c': more than one edge has this id — give each edge a unique id",
        "edge 'c-a': 'to' names node 'ghost', which does not exist — point it at an existing "
        "node or remove the edge",
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [([], "required: COMMAND"), (["launch"], "invalid choice"), (["validate"], "FILE")],
)
def test_usage_errors_are_one_line(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)

    _, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1
    assert expected in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--help"]) == 0
    assert "FILE" in capsys.readouterr().out


def test_the_parser_sets_a_handler_per_subcommand() -> None:
    args = build_parser().parse_args(["validate", "x.json"])

    assert callable(args.handler)
    assert args.file == Path("x.json")


@needs_compat
def test_as_a_process_a_compat_file_is_ok() -> None:
    result = run_cli("validate", str(COMPAT_FILES[0]))

    assert (result.returncode, result.stdout, result.stderr) == (0, "ok\n", "")


@pytest.mark.parametrize("name", ["not_json.json", "not_a_workflow.json", "missing.json"])
def test_as_a_process_bad_files_never_show_a_traceback(name: str) -> None:
    result = run_cli("validate", str(BROKEN / name))

    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.count("\n") == 1


def test_as_a_process_a_broken_workflow_exits_2_naming_the_node() -> None:
    result = run_cli("validate", str(BROKEN / "invalid_output_schema.json"))

    assert result.returncode == 2
    assert result.stdout.startswith("node 'plan': output_schema is not a valid JSON Schema")
    assert "Traceback" not in result.stderr
