"""The `openflow` command.

Each subcommand is one `cmd_<name>(args) -> int` function, registered in `build_parser()`
(`openflow.cli.parser`). Exit codes: 0 success, 1 the thing that ran failed, 2 bad input
(always one line, no traceback).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from openflow.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BadInput,
    Handler,
    first_line,
)
from openflow.cli.parser import build_parser, check_arguments, check_environment
from openflow.database import DatabaseError
from openflow.settings import runtime_settings

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "BadInput",
    "build_parser",
    "main",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (console scripts pass it to sys.exit).

    Called without `argv` it is the process's entry point and ends the process itself.
    """
    code = _main(argv)
    if argv is None:
        _end_process(code)
    return code


def _main(argv: Sequence[str] | None) -> int:
    _tolerate_unencodable_output()
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0].startswith("-") and words[0] not in ("-h", "--help"):
        print(
            f"openflow: error: unrecognized option {words[0]!r}: a command comes first "
            "(see 'openflow --help')",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:
        return _exit_code(exc)
    handler: Handler = args.handler
    try:
        check_environment()
        check_arguments(args)
        return handler(args)
    except BadInput as exc:
        print(first_line(str(exc)), file=sys.stderr)
        return EXIT_BAD_INPUT
    except DatabaseError as exc:
        print(first_line(str(exc)), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`openflow runs list | head -1`): nothing left to say.
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        if _debug():
            raise
        print(
            f"openflow: unexpected error: {type(exc).__name__}: {first_line(str(exc))} "
            "(set OPENFLOW_DEBUG=1 to see where)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _debug() -> bool:
    """OPENFLOW_DEBUG set to anything: unexpected errors show their traceback."""
    return bool(runtime_settings(only=("debug",)).debug)


def _silence_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _end_process(code: int) -> NoReturn:
    """Exit without interpreter teardown.

    The Temporal client's native threads can call into a finalizing interpreter and abort it
    (temporalio/sdk-python#300), which would turn a clean exit into a crash with code 134.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            _silence_stdout()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)


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
