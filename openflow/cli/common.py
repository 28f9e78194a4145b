"""What every `openflow` command shares: exit codes, BadInput, connecting, running a command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from temporalio.client import (
    Client,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from openflow.attachments import AttachmentError
from openflow.catalog import read_workflow_bytes
from openflow.client import (
    ActionRejected,
    RunConflict,
    RunError,
    RunNotFound,
    Runs,
)
from openflow.connect import ConnectError, connect, load_target
from openflow.engine.errors import LimitExceeded, WorkflowFormatError
from openflow.engine.graph import workflow_problems
from openflow.engine.spec import Workflow
from openflow.paths import openflow_home
from openflow.server import (
    ServerError,
    task_queue,
    temporal_address,
)
from openflow.settings import SettingsError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8000
QUERY_TIMEOUT_S = 15.0
MAX_SEQ = 2**53
STOP_TIMEOUT_S = 30.0
Handler = Callable[[argparse.Namespace], int]
T = TypeVar("T")


class BadInput(Exception):
    """Input the command cannot use; main prints it as one line and exits 2."""


# --- workflow files -------------------------------------------------------------------------


def read_workflow_file(path: Path) -> Workflow:
    """Load a workflow file; raises BadInput with one line naming the file and the problem."""
    try:
        data = read_workflow_bytes(path)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file — check the path") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a folder — give the path of a workflow file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the file: {exc.strerror}") from None
    except LimitExceeded as exc:
        raise BadInput(f"{path}: {exc}") from None
    try:
        return Workflow.load_json(data)
    except (WorkflowFormatError, LimitExceeded) as exc:
        raise BadInput(f"{path}: {exc}") from None


def load_valid_workflow(path: Path) -> Workflow:
    """A workflow file that loads and validates; BadInput names its first problem."""
    workflow = read_workflow_file(path)
    problems = workflow_problems(workflow)
    if problems:
        more = (
            f" (and {len(problems) - 1} more; see `openflow validate`)" if len(problems) > 1 else ""
        )
        raise BadInput(f"{path}: {problems[0].message}{more}")
    return workflow


# --- plumbing --------------------------------------------------------------------------------


def metrics_runtime(metrics_port: int | None) -> Any | None:
    """The Temporal runtime exporting metrics, or None for the default one; BadInput if the
    port cannot be bound."""
    from openflow.telemetry import runtime

    try:
        return runtime(metrics_port)
    except (RuntimeError, ValueError) as exc:
        where = f"port {metrics_port}" if metrics_port is not None else "the OTLP endpoint"
        raise BadInput(f"metrics cannot be served on {where}: {exc}") from None


async def connect_client(runtime: Any | None = None) -> Client:
    """A client of the configured Temporal (`openflow.connect`); BadInput says what failed."""
    try:
        if runtime is not None:
            return await connect(load_target(), runtime=runtime)
        return await connect(load_target())
    except ConnectError as exc:
        raise BadInput(str(exc)) from None


async def connect_runs() -> Runs:
    """The runs on $OPENFLOW_TASK_QUEUE."""
    return Runs(await connect_client(), task_queue())


async def answer_in_time(query: Awaitable[T], run_id: str, runs: Runs) -> T:
    """A query's answer; BadInput when no worker answers in time."""
    try:
        return await asyncio.wait_for(query, QUERY_TIMEOUT_S)
    except TimeoutError:
        raise BadInput(
            f"run {run_id!r} did not answer within {QUERY_TIMEOUT_S:.0f}s; is a worker polling "
            f"task queue {runs.task_queue!r}? start one with `openflow worker`"
        ) from None


async def until_stopped(tasks: Sequence[asyncio.Task[Any]], finished_ok: bool = False) -> bool:
    """Wait for SIGINT/SIGTERM or for one of `tasks` to end.

    Returns True when a task ended first: a crash of a service (reported on stderr) or, with
    `finished_ok`, a task that finished its job.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        stopper.cancel()
    ended = [task for task in tasks if task in done]
    if not ended:
        return False
    if finished_ok and not ended[0].cancelled() and ended[0].exception() is None:
        return True
    for task in ended:
        if task.cancelled():
            print(f"{task.get_name()} was cancelled", file=sys.stderr)
        elif task.exception() is not None:
            error = task.exception()
            if isinstance(error, BadInput | RunError | ServerError):
                raise error
            print(f"{task.get_name()} stopped: {first_line(str(error))}", file=sys.stderr)
        else:
            print(f"{task.get_name()} stopped", file=sys.stderr)
    return True


def run_main(main: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine, turning what a user can fix into BadInput."""
    try:
        return asyncio.run(main)
    except RunNotFound as exc:
        raise BadInput(f"{exc}; see your runs with `openflow runs list`") from None
    except (ActionRejected, RunConflict, RunError) as exc:
        raise BadInput(str(exc)) from None
    except ServerError as exc:
        raise BadInput(server_problem(exc)) from None
    except (SettingsError, ConnectError, LimitExceeded, AttachmentError) as exc:
        raise BadInput(str(exc)) from None
    except WorkflowAlreadyStartedError as exc:
        raise BadInput(
            f"a run with id {exc.workflow_id!r} already exists; choose another --run-id"
        ) from None
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
        raise BadInput(f"the run could not answer: {first_line(str(exc))}") from None
    except RPCError as exc:
        if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
            raise BadInput(
                f"lost Temporal at {_target_address()!r} ({first_line(exc.message)}); "
                "check that the server is up"
            ) from None
        raise BadInput(f"Temporal refused the request: {first_line(exc.message)}") from None


def _target_address() -> str:
    try:
        return load_target().address
    except ConnectError:
        return temporal_address()


def server_problem(exc: ServerError) -> str:
    return first_line(str(exc)).rstrip(":") + (
        "" if "see " in str(exc) else f" (server log: {openflow_home() / 'temporal-server.log'})"
    )


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text.strip()


def new_console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def check_port_option(port: int | None, option: str) -> None:
    if port is not None and not 0 < port < 65536:
        raise BadInput(f"{option} {port}: give a TCP port between 1 and 65535")


def port_free(host: str, port: int) -> bool:
    return _bind_problem(host, port) is None


def _bind_problem(host: str, port: int) -> str | None:
    """Why this process could not listen on host:port right now, or None."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"the port is in use on {host}; choose another"
            reason = exc.strerror or str(exc)
            return f"cannot listen on {host!r} ({reason}); give an address of this machine"
    return None


def require_free_port(host: str, port: int, option: str) -> None:
    problem = _bind_problem(host, port)
    if problem is not None:
        raise BadInput(f"{option} {port}: {problem}")


def check_host(host: str, option: str) -> None:
    """A host to listen on: an IP address or a name that resolves here."""
    import socket

    if not host.strip():
        raise BadInput(f"{option} is empty; give an address to listen on, e.g. 127.0.0.1")
    try:
        socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        raise BadInput(
            f"{option} {host!r}: not an address this machine knows — give an IP address "
            "(127.0.0.1, 0.0.0.0, ::1) or a host name that resolves"
        ) from None
