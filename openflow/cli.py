"""The `openflow` command.

Each subcommand is one `cmd_<name>(args) -> int` function, registered in `build_parser()`.
Exit codes: 0 success, 1 the thing that ran failed, 2 bad input (always one line, no traceback).
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from openflow.engine.errors import WorkflowFormatError
from openflow.engine.graph import workflow_problems
from openflow.engine.spec import Workflow

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace], int]


class BadInput(Exception):
    """Input the command cannot use; main prints it as one line and exits 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand; each sets `handler` to its cmd_ function."""
    parser = _Parser(prog="openflow", description="Run OpenFlow agent workflows on Temporal.")
    commands = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", parser_class=_Parser
    )
    commands.required = True

    validate = commands.add_parser(
        "validate",
        help="check a workflow file",
        description="Check a workflow file: print 'ok', or each problem on its own line.",
    )
    validate.add_argument("file", metavar="FILE", type=Path, help="the .workflow.json file")
    validate.set_defaults(handler=cmd_validate)
    return parser


def read_workflow_file(path: Path) -> Workflow:
    """Load a workflow file; raises BadInput with one line naming the file and the problem."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file — check the path") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a folder — give the path of a workflow file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the file: {exc.strerror}") from None
    try:
        return Workflow.load_json(data)
    except WorkflowFormatError as exc:
        raise BadInput(f"{path}: {exc}") from None


def cmd_validate(args: argparse.Namespace) -> int:
    """`openflow validate FILE`: 'ok' and 0, or one line per problem and 2."""
    workflow = read_workflow_file(args.file)
    problems = workflow_problems(workflow)
    if not problems:
        print("ok")
        return EXIT_OK
    for problem in problems:
        print(problem.message)
    return EXIT_BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (console scripts pass it to sys.exit)."""
    _tolerate_unencodable_output()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return _exit_code(exc)
    handler: Handler = args.handler
    try:
        return handler(args)
    except BadInput as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return EXIT_OK
    if isinstance(exc.code, int):
        return exc.code
    return EXIT_BAD_INPUT


def _tolerate_unencodable_output() -> None:
    """Never crash on a terminal that cannot show a character (e.g. an em dash)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


if __name__ == "__main__":
    raise SystemExit(main())
