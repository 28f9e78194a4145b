"""The `openflow` command.

Each subcommand is one `cmd_<name>(args) -> int` function, registered in `build_parser()`.
Exit codes: 0 success, 1 the thing that ran failed, 2 bad input (always one line, no traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TypeVar

import uvicorn
from rich.console import Console
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from openflow import contracts as c
from openflow.backends import open_backends
from openflow.catalog import read_workflow_bytes
from openflow.client import (
    ActionRejected,
    RunConflict,
    RunError,
    RunNotFound,
    Runs,
    check_run_id,
)
from openflow.connect import ConnectError, connect, load_target
from openflow.database import DatabaseError
from openflow.engine.errors import LimitExceeded, WorkflowFormatError
from openflow.engine.graph import workflow_problems
from openflow.engine.limits import MAX_ENTRYPOINT_BYTES, check_entrypoint, check_message
from openflow.engine.spec import Workflow
from openflow.follow import (
    Follower,
    FollowOutcome,
    answer_hint,
    describe_pause,
    file_live_source,
    find_pauses,
    usage_text,
)
from openflow.paths import openflow_home
from openflow.server import (
    DEFAULT_ADDRESS,
    EmbeddedServer,
    ServerError,
    ensure_search_attributes,
    free_port,
    run_server_forever,
    task_queue,
    temporal_address,
    temporal_namespace,
)
from openflow.settings import SettingsError, load_settings, runtime_settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8000
QUERY_TIMEOUT_S = 15.0
MAX_SEQ = 2**53
STOP_TIMEOUT_S = 30.0
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
DEMO_EXAMPLE = "release_notes"
DEMO_ENTRYPOINT = (
    "Changes since v1.4: resumable runs after a crash; `openflow runs list` filters by status; "
    "the HTTP API streams token deltas over SSE; fixed a race where two approvals of the same "
    "batch were both applied; dropped Python 3.10 support."
)
PROVIDER_KEYS = (("ANTHROPIC_API_KEY", "anthropic"), ("OPENAI_API_KEY", "openai"))

Handler = Callable[[argparse.Namespace], int]
T = TypeVar("T")


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

    demo = commands.add_parser(
        "demo",
        help="run the bundled example on an embedded server, worker and API",
        description="Start an embedded Temporal server, a worker and the HTTP API, run the "
        "bundled example workflow and keep everything up until Ctrl-C.",
    )
    demo.add_argument(
        "--exit",
        action="store_true",
        help="stop everything once the run ends; exit 0 if it completed",
    )
    _add_stack_options(demo)
    demo.set_defaults(handler=cmd_demo)

    dev = commands.add_parser(
        "dev",
        help="embedded server + worker + API until Ctrl-C",
        description="Start an embedded Temporal server, a worker and the HTTP API until Ctrl-C.",
    )
    _add_stack_options(dev)
    dev.set_defaults(handler=cmd_dev)

    server = commands.add_parser(
        "server",
        help="the embedded Temporal server, in the foreground",
        description="Run the embedded Temporal dev server on $OPENFLOW_TEMPORAL_ADDRESS "
        f"(default {DEFAULT_ADDRESS}), its database in $OPENFLOW_HOME, until Ctrl-C.",
    )
    server.add_argument(
        "--ui-port", type=int, metavar="N", help="Web UI port (default: the gRPC port + 1000)"
    )
    server.set_defaults(handler=cmd_server)

    worker = commands.add_parser(
        "worker",
        help="a worker for $OPENFLOW_TASK_QUEUE, until Ctrl-C",
        description="Run a worker that executes runs from $OPENFLOW_TASK_QUEUE on "
        "$OPENFLOW_TEMPORAL_ADDRESS until Ctrl-C.",
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve Prometheus metrics at http://0.0.0.0:N/metrics",
    )
    worker.set_defaults(handler=cmd_worker)

    api = commands.add_parser(
        "api", help="the HTTP API", description="Serve the HTTP API (OpenAPI at /docs)."
    )
    api.add_argument("--host", default=DEFAULT_API_HOST, help=f"default {DEFAULT_API_HOST}")
    api.add_argument(
        "--port", type=int, default=DEFAULT_API_PORT, help=f"default {DEFAULT_API_PORT}"
    )
    api.set_defaults(handler=cmd_api)

    validate = commands.add_parser(
        "validate",
        help="check a workflow file",
        description="Check a workflow file: print 'ok', or each problem on its own line.",
    )
    validate.add_argument("file", metavar="FILE", type=Path, help="the .workflow.json file")
    validate.set_defaults(handler=cmd_validate)

    run = commands.add_parser(
        "run",
        help="start a run of a workflow file and follow it",
        description="Start a run and follow it: live progress, and prompts for input and "
        "approvals. Without a terminal it follows until the run ends or waits for a person, "
        "then prints how to answer and exits 0 with the run paused.",
    )
    run.add_argument("file", metavar="FILE", type=Path, help="the .workflow.json file")
    entry = run.add_mutually_exclusive_group()
    entry.add_argument("--input", default="", metavar="TEXT", help="the entrypoint text")
    entry.add_argument(
        "--input-file",
        type=Path,
        metavar="FILE",
        help="read the entrypoint text from FILE ('-' for standard input)",
    )
    run.add_argument("--run-id", metavar="ID", help="the run id (default run-<uuid>)")
    run.add_argument("--project", type=Path, metavar="DIR", help="the folder tools work in")
    run.add_argument("--detach", action="store_true", help="print the run id once started and exit")
    run.set_defaults(handler=cmd_run)

    runs = commands.add_parser(
        "runs", help="look at and act on runs", description="Look at and act on runs."
    )
    actions = runs.add_subparsers(
        title="actions", dest="action", metavar="ACTION", parser_class=_Parser
    )
    actions.required = True
    _add_runs_actions(actions)
    return parser


def _add_stack_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ui-port", type=int, metavar="N", help="Web UI port (default: the gRPC port + 1000)"
    )
    parser.add_argument("--api-host", default=DEFAULT_API_HOST, metavar="HOST")
    parser.add_argument(
        "--api-port",
        type=int,
        metavar="N",
        help=f"HTTP API port (default {DEFAULT_API_PORT}, or a free one when that is taken)",
    )


def _add_runs_actions(actions: Any) -> None:
    listing = actions.add_parser("list", help="one run a line, run id first, newest first")
    listing.add_argument(
        "--status", choices=["running", "paused", "stopped", "completed", "failed"]
    )
    listing.add_argument("--workflow", metavar="WORKFLOW_ID", help="only runs of this workflow")
    listing.set_defaults(handler=cmd_runs_list)

    show = actions.add_parser("show", help="a run's status, nodes and pauses")
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print the run state as JSON")
    show.set_defaults(handler=cmd_runs_show)

    events = actions.add_parser("events", help="a run's durable events")
    events.add_argument("run_id", metavar="ID")
    events.add_argument("--after", type=int, default=0, metavar="N", help="only events after seq N")
    events.add_argument("--json", action="store_true", help="print the events as a JSON list")
    events.set_defaults(handler=cmd_runs_events)

    give = actions.add_parser("input", help="answer a node waiting for input")
    give.add_argument("run_id", metavar="ID")
    give.add_argument("node_id", metavar="NODE")
    give.add_argument("text", metavar="TEXT")
    give.set_defaults(handler=cmd_runs_input)

    for name, allow in (("approve", True), ("deny", False)):
        decide = actions.add_parser(name, help=f"{name} a pending tool batch")
        decide.add_argument("run_id", metavar="ID")
        decide.add_argument("approval_id", metavar="APPROVAL")
        decide.add_argument("--reason", metavar="TEXT")
        decide.set_defaults(handler=cmd_runs_decide, allow=allow)

    retry = actions.add_parser("retry", help="retry a failed or interrupted node")
    retry.add_argument("run_id", metavar="ID")
    retry.add_argument("node_id", metavar="NODE")
    retry.add_argument("--message", metavar="TEXT", help="a note the node sees on its retry")
    retry.set_defaults(handler=cmd_runs_retry)

    message = actions.add_parser("message", help="send a message to a live node")
    message.add_argument("run_id", metavar="ID")
    message.add_argument("node_id", metavar="NODE")
    message.add_argument("text", metavar="TEXT")
    message.set_defaults(handler=cmd_runs_message)

    stop = actions.add_parser("stop", help="stop a run (it can be resumed)")
    stop.add_argument("run_id", metavar="ID")
    stop.set_defaults(handler=cmd_runs_stop)

    resume = actions.add_parser("resume", help="continue a stopped, paused or failed run")
    resume.add_argument("run_id", metavar="ID")
    resume.set_defaults(handler=cmd_runs_resume)


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


# --- one piece each: server, worker, api ---------------------------------------------------


def cmd_server(args: argparse.Namespace) -> int:
    """`openflow server`: the embedded Temporal server in the foreground until Ctrl-C."""
    _check_port_option(args.ui_port, "--ui-port")
    try:
        return run_server_forever(ui_port=args.ui_port)
    except ServerError as exc:
        raise BadInput(_server_problem(exc)) from None


def cmd_worker(args: argparse.Namespace) -> int:
    """`openflow worker`: a worker on $OPENFLOW_TASK_QUEUE until Ctrl-C or SIGTERM."""
    metrics_port = getattr(args, "metrics_port", None)
    if metrics_port is not None:
        _check_port_option(metrics_port, "--metrics-port")
    return _run(serve_worker(metrics_port=metrics_port))


async def serve_worker(home: Path | None = None, metrics_port: int | None = None) -> int:
    """Run a worker against $OPENFLOW_TEMPORAL_ADDRESS until a signal; what `worker.py` runs."""
    from openflow.worker import build_worker

    harden_worker_process()
    home = home or openflow_home()
    open_backends(home)  # a database that cannot be used stops the worker here, in one line
    client = await connect_client(runtime=_metrics_runtime(metrics_port))
    await _ensure_search_attributes(client)
    queue = task_queue()
    worker = build_worker(client, queue, home)
    running = asyncio.create_task(worker.run(), name="worker")
    print(
        f"Worker on {load_target().describe()}, "
        f"task queue {queue!r}, home {home}. Press Ctrl-C to stop.",
        flush=True,
    )
    failed = await _until_stopped([running])
    if not failed:
        await worker.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    print("Worker stopped.", flush=True)
    return EXIT_FAILED if failed else EXIT_OK


def harden_worker_process() -> None:
    """Make this process's environment unreadable to the tool processes it starts."""
    from openflow.activities.tools.process import harden_process

    try:
        harden_process()
    except OSError as exc:
        print(f"warning: could not harden the worker process: {exc}", file=sys.stderr)


async def _ensure_search_attributes(client: Client) -> None:
    try:
        await ensure_search_attributes(client)
    except ServerError as exc:
        print(f"warning: {exc}", file=sys.stderr)
    except RPCError as exc:
        print(
            f"warning: could not check OpenFlow's search attributes ({exc.message}); "
            "register them with `temporal operator search-attribute create`",
            file=sys.stderr,
        )


def cmd_api(args: argparse.Namespace) -> int:
    """`openflow api`: the HTTP API on --host/--port until Ctrl-C."""
    from openflow.api.app import serve
    from openflow.api.errors import UnsafeBind

    _check_host(args.host, "--host")
    _check_port_option(args.port, "--port")
    _require_free_port(args.host, args.port, "--port")
    try:
        serve(args.host, args.port, openflow_home())
    except (UnsafeBind, SettingsError, ConnectError) as exc:
        raise BadInput(str(exc)) from None
    return EXIT_OK


# --- dev and demo: everything in one process -----------------------------------------------


class LocalStack:
    """An embedded Temporal server, a worker and the HTTP API in this process."""

    def __init__(
        self,
        home: Path,
        *,
        address: str,
        ui_port: int | None,
        api_host: str,
        api_port: int,
        worker_env: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.server = EmbeddedServer(home, address, ui_port=ui_port, namespace=temporal_namespace())
        self.api_host = api_host
        self.api_port = api_port
        self.worker_env = worker_env
        self.task_queue = task_queue()
        self.tasks: list[asyncio.Task[Any]] = []
        self._client: Client | None = None
        self._worker: Any = None
        self._api: EmbeddedApiServer | None = None

    @property
    def client(self) -> Client:
        assert self._client is not None, "use LocalStack in `async with`"
        return self._client

    @property
    def api_url(self) -> str:
        host = f"[{self.api_host}]" if ":" in self.api_host else self.api_host
        return f"http://{host}:{self.api_port}"

    def run_url(self, run_id: str) -> str:
        """The Web UI page of one run."""
        return f"{self.server.ui_url}/namespaces/{self.server.namespace}/workflows/{run_id}"

    async def __aenter__(self) -> LocalStack:
        from openflow.api.app import create_app
        from openflow.worker import build_worker, make_activities

        harden_worker_process()
        await self.server.start()
        try:
            self._client = await self.server.connect(data_converter=pydantic_data_converter)
            activities = make_activities(self.home, env=self.worker_env)
            self._worker = build_worker(
                self._client, self.task_queue, self.home, activities=activities
            )
            self.tasks.append(asyncio.create_task(self._worker.run(), name="worker"))
            app = create_app(
                self._client,
                home=self.home,
                task_queue=self.task_queue,
                temporal_ui_url=self.server.ui_url,
            )
            config = uvicorn.Config(
                app, host=self.api_host, port=self.api_port, log_level="warning", lifespan="on"
            )
            self._api = EmbeddedApiServer(config)
            self.tasks.append(asyncio.create_task(self._api.serve(), name="api"))
            await self._wait_api_started(self._api, self.tasks[-1])
        except BaseException:
            await self.close()
            raise
        return self

    async def _wait_api_started(self, api: EmbeddedApiServer, task: asyncio.Task[Any]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30.0
        while not api.started:
            if task.done():
                raise ServerError(
                    f"the HTTP API could not start on {self.api_url}; choose another --api-port"
                )
            if loop.time() > deadline:
                raise ServerError(f"the HTTP API did not start on {self.api_url} within 30s")
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        """Stop the API, the worker and the server, in that order."""
        if self._api is not None:
            self._api.should_exit = True
        if self._worker is not None and self._worker.is_running:
            with contextlib.suppress(Exception):
                await self._worker.shutdown()
        for task in self.tasks:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 15.0)
        self.tasks.clear()
        await self.server.stop()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class EmbeddedApiServer(uvicorn.Server):
    """A uvicorn server that leaves SIGINT and SIGTERM to the process running it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _stack(args: argparse.Namespace, worker_env: dict[str, str] | None = None) -> LocalStack:
    _check_host(args.api_host, "--api-host")
    _check_port_option(args.ui_port, "--ui-port")
    _check_port_option(args.api_port, "--api-port")
    api_port = args.api_port
    if api_port is None:
        api_port = DEFAULT_API_PORT if _port_free(args.api_host, DEFAULT_API_PORT) else None
        api_port = api_port or free_port(args.api_host)
    else:
        _require_free_port(args.api_host, api_port, "--api-port")
    return LocalStack(
        openflow_home(),
        address=temporal_address(),
        ui_port=args.ui_port,
        api_host=args.api_host,
        api_port=api_port,
        worker_env=worker_env,
    )


def cmd_dev(args: argparse.Namespace) -> int:
    """`openflow dev`: embedded server, worker and API until Ctrl-C."""
    return _run(_dev(_stack(args)))


async def _dev(stack: LocalStack) -> int:
    async with stack:
        print(f"Temporal:  {stack.server.address} (namespace {stack.server.namespace!r})")
        print(f"Web UI:    {stack.server.ui_url}")
        print(f"Pages:     {stack.api_url}/ui")
        print(f"HTTP API:  {stack.api_url}  (docs at {stack.api_url}/docs)")
        print(f"Worker:    task queue {stack.task_queue!r}, home {stack.home}")
        print("Press Ctrl-C to stop.", flush=True)
        failed = await _until_stopped(stack.tasks)
    print("Stopped.", flush=True)
    return EXIT_FAILED if failed else EXIT_OK


@dataclass(frozen=True)
class DemoPlan:
    """What the demo runs and with which provider."""

    workflow: Workflow
    provider_id: str
    worker_env: dict[str, str]


def demo_plan(home: Path, examples: Path = EXAMPLES_DIR) -> DemoPlan:
    """The bundled example and a provider: a key's provider when one is set, else scripted."""
    workflow_path = examples / f"{DEMO_EXAMPLE}.workflow.json"
    script_path = examples / f"{DEMO_EXAMPLE}.script.json"
    if not workflow_path.is_file() or not script_path.is_file():
        raise BadInput(
            f"the bundled example is missing from {examples}; run the demo from a source "
            'checkout installed with `pip install -e ".[dev]"`'
        )
    workflow = load_valid_workflow(workflow_path)
    env = dict(os.environ)
    for variable, provider_id in PROVIDER_KEYS:
        if env.get(variable, "").strip():
            return DemoPlan(workflow, provider_id, env)
    try:
        settings = load_settings(home)
    except SettingsError as exc:
        raise BadInput(str(exc)) from None
    profile = settings.profile("scripted")
    if profile is not None and (profile.script is not None or profile.script_path):
        raise BadInput(
            f"the 'scripted' profile in {home / 'settings.json'} has its own script; run the demo "
            "with another home, e.g. `OPENFLOW_HOME=~/.openflow-demo openflow demo`"
        )
    env["OPENFLOW_SCRIPT"] = str(script_path)
    return DemoPlan(workflow, "scripted", env)


def cmd_demo(args: argparse.Namespace) -> int:
    """`openflow demo`: the bundled example, end to end, on an embedded stack."""
    plan = demo_plan(openflow_home())
    stay_up = not args.exit and sys.stdin.isatty()
    return _run(_demo(_stack(args, worker_env=plan.worker_env), plan, stay_up))


async def _demo(stack: LocalStack, plan: DemoPlan, stay_up: bool) -> int:
    console = _console()
    async with stack:
        runs = Runs(stack.client, stack.task_queue)
        run_id = await runs.start(
            plan.workflow, entrypoint=DEMO_ENTRYPOINT, provider_id=plan.provider_id
        )
        console.print(f"Demo: {plan.workflow.name!r} with the {plan.provider_id!r} provider")
        console.print(f"Run id:    {run_id}")
        console.print(f"Web UI:    {stack.run_url(run_id)}", soft_wrap=True)
        console.print(f"Pages:     {stack.api_url}/ui/runs/{run_id}", soft_wrap=True)
        console.print(f"HTTP API:  {stack.api_url}/runs/{run_id}", soft_wrap=True)
        follower = Follower(
            runs,
            run_id,
            console,
            interactive=True,
            auto_approve=True,
            live=file_live_source(stack.home),
            labels={node.id: node.label for node in plan.workflow.nodes},
        )
        outcome = await _follow_until_stopped(follower)
        if outcome is None:
            return EXIT_INTERRUPTED
        code = EXIT_OK if outcome.status == "completed" else EXIT_FAILED
        console.print(f"Run {run_id} {outcome.status}.")
        workspace = stack.home / "runs" / run_id
        console.print(f"Run id:    {run_id}")
        console.print(f"Web UI:    {stack.run_url(run_id)}", soft_wrap=True)
        console.print(f"Pages:     {stack.api_url}/ui", soft_wrap=True)
        console.print(f"HTTP API:  {stack.api_url}  (docs at {stack.api_url}/docs)", soft_wrap=True)
        console.print(f"Run files: {workspace}", soft_wrap=True)
        if stay_up:
            console.print("Everything stays up for inspection. Press Ctrl-C to stop.")
            failed = await _until_stopped(stack.tasks)
            if failed:
                code = EXIT_FAILED
    return code


async def _follow_until_stopped(follower: Follower) -> FollowOutcome | None:
    """Follow a run; None when Ctrl-C or SIGTERM came first."""
    following = asyncio.create_task(follower.run())
    if await _until_stopped([following], finished_ok=True):
        return following.result()
    return None


# --- run a workflow file -------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    """`openflow run FILE`: start a run and follow it (or print its id with --detach)."""
    workflow = load_valid_workflow(args.file)
    project = None
    if args.project is not None:
        if not args.project.is_dir():
            raise BadInput(f"--project {args.project}: no such folder — give an existing folder")
        project = str(args.project.resolve())
    if args.input_file is not None:
        args.input = read_entrypoint_file(args.input_file)
    if not args.detach:
        open_backends(openflow_home())  # the live channel: an unusable database stops us here
    return _run(_start_and_follow(args, workflow, project))


def read_entrypoint_file(path: Path) -> str:
    """`--input-file`: the entrypoint text of a UTF-8 file ('-': standard input), bounded."""
    limit = MAX_ENTRYPOINT_BYTES.value
    where = "standard input" if str(path) == "-" else str(path)
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with path.open("rb") as file:
                data = file.read(limit + 1)
    except FileNotFoundError:
        raise BadInput(f"--input-file {path}: no such file — check the path") from None
    except IsADirectoryError:
        raise BadInput(f"--input-file {path}: is a folder — give a text file") from None
    except OSError as exc:
        raise BadInput(f"--input-file {path}: cannot read it: {exc.strerror}") from None
    if len(data) > limit:
        size = path.stat().st_size if where != "standard input" and path.is_file() else 0
        raise BadInput(
            "--input-file: "
            + MAX_ENTRYPOINT_BYTES.message(
                f"the entrypoint in {where}",
                max(size, limit + 1),
                "shorten it, or put the material in a file the run reads",
                verb="is at least" if size <= limit else "is",
            )
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"--input-file {where}: not UTF-8 text (byte {exc.start}) — save it as UTF-8"
        ) from None


async def _start_and_follow(
    args: argparse.Namespace, workflow: Workflow, project: str | None
) -> int:
    runs = await connect_runs()
    run_id = await runs.start(
        workflow, entrypoint=args.input, run_id=args.run_id, project_dir=project
    )
    if args.detach:
        print(run_id, flush=True)
        print(f"Web UI: {run_ui_url(run_id)}", file=sys.stderr, flush=True)
        return EXIT_OK
    console = _console()
    console.print(f"Run id:  {run_id}")
    console.print(f"Web UI:  {run_ui_url(run_id)}", soft_wrap=True)
    interactive = sys.stdin.isatty()
    follower = Follower(
        runs,
        run_id,
        console,
        interactive=interactive,
        live=file_live_source(openflow_home()),
        labels={node.id: node.label for node in workflow.nodes},
    )
    outcome = await _follow_until_stopped(follower)
    if outcome is None:
        console.print(
            f"Stopped following; the run goes on. See it with `openflow runs show {run_id}`."
        )
        return EXIT_INTERRUPTED
    return _report_outcome(console, run_id, outcome)


def _report_outcome(console: Console, run_id: str, outcome: FollowOutcome) -> int:
    if outcome.waiting:
        console.print(f"Run {run_id} is paused, waiting for:")
        for pause in outcome.pauses:
            console.print(f"  {describe_pause(pause)}", soft_wrap=True)
            console.print(f"    answer: {answer_hint(run_id, pause)}", soft_wrap=True)
        return EXIT_OK
    console.print(f"Run {run_id} {outcome.status}.")
    return EXIT_OK if outcome.status == "completed" else EXIT_FAILED


def run_ui_url(run_id: str) -> str:
    """The Web UI page of a run: $OPENFLOW_UI_URL, else the embedded server's UI port."""
    base = os.environ.get("OPENFLOW_UI_URL", "").strip().rstrip("/")
    target = load_target()
    if not base:
        host, _, port = target.address.rpartition(":")
        ui_port = int(port) + 1000 if port.isdigit() else 8233
        base = f"http://{host or '127.0.0.1'}:{ui_port}"
    return f"{base}/namespaces/{target.namespace}/workflows/{run_id}"


# --- runs ------------------------------------------------------------------------------------


def cmd_runs_list(args: argparse.Namespace) -> int:
    """`openflow runs list`: one run a line, run id first, newest first."""

    async def main() -> int:
        runs = await connect_runs()
        for run in await runs.list(status=args.status, workflow_id=args.workflow):
            awaiting = f"  awaiting {','.join(run.awaiting)}" if run.awaiting else ""
            name = run.workflow_name or run.workflow_id
            print(f"{run.run_id}  {run.status:<9}  {run.start_time or '-'}  {name}{awaiting}")
        return EXIT_OK

    return _run(main())


def cmd_runs_show(args: argparse.Namespace) -> int:
    """`openflow runs show ID`: the status and what the run waits for; --json: the state."""

    async def main() -> int:
        runs = await connect_runs()
        status = await runs.status(args.run_id)
        state = await _answer(runs.state(args.run_id), args.run_id, runs)
        if status not in ("running", "paused"):
            state["status"] = status
        if args.json:
            print(json.dumps(state, indent=2, ensure_ascii=False))
            return EXIT_OK
        events = await _answer(runs.events(args.run_id), args.run_id, runs)
        _print_run(args.run_id, state, events)
        return EXIT_OK

    return _run(main())


def _print_run(run_id: str, state: dict[str, Any], events: list[dict[str, Any]]) -> None:
    print(f"run       {run_id}")
    print(f"status    {state.get('status', 'unknown')}")
    if state.get("workflowId"):
        print(f"workflow  {state['workflowId']}")
    if state.get("lastError"):
        print(f"error     {state['lastError']}")
    usage = state.get("usage") or {}
    if usage.get("run"):
        print(f"usage     {usage_text(usage['run'])}")
    by_node = usage.get("byNode") or {}
    statuses = state.get("statusByNode") or {}
    if statuses:
        print("nodes")
        width = max(len(node) for node in statuses)
        for node, status in sorted(statuses.items()):
            spent = f"  {usage_text(by_node[node])}" if node in by_node else ""
            print(f"  {node:<{width}}  {status:<22}{spent}".rstrip())
    opened: dict[str, Any] = {}
    for event in events:
        if event.get("type") == "NodeAwaitingInput":
            opened[f"question:{event.get('node_id')}"] = str(event.get("context") or "")
    pauses = find_pauses(state, opened)
    if pauses:
        print("waiting for")
        for pause in pauses:
            print(f"  {describe_pause(pause)}")
            print(f"    answer: {answer_hint(run_id, pause)}")


def cmd_runs_events(args: argparse.Namespace) -> int:
    """`openflow runs events ID`: the durable events after --after, as lines or --json."""
    if not 0 <= args.after <= MAX_SEQ:
        raise BadInput(f"--after must be a seq number from 0 to {MAX_SEQ}")

    async def main() -> int:
        runs = await connect_runs()
        events = await _answer(runs.events(args.run_id, after=args.after), args.run_id, runs)
        if args.json:
            print(json.dumps(events, indent=2, ensure_ascii=False))
            return EXIT_OK
        for event in events:
            print(event_line(event))
        return EXIT_OK

    return _run(main())


def event_line(event: dict[str, Any], width: int = 80) -> str:
    """`  12  NodeStarted  node_id=plan model_attempt=0`: one event on one line."""
    fields = []
    for key, value in event.items():
        if key in ("seq", "type", "at_ms"):
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(text.split())
        if len(text) > width:
            text = text[: width - 1] + "…"
        fields.append(f"{key}={text}")
    return f"{event.get('seq', 0):>5}  {event.get('type', '?')}  {' '.join(fields)}".rstrip()


def cmd_runs_input(args: argparse.Namespace) -> int:
    """`openflow runs input ID NODE TEXT`: answer a node waiting for input."""
    action = c.Action(kind="input", node_id=args.node_id, text=args.text)
    return _act(args.run_id, action, f"answered {args.node_id!r}")


def cmd_runs_decide(args: argparse.Namespace) -> int:
    """`openflow runs approve|deny ID APPROVAL [--reason]`: decide a pending tool batch."""
    action = c.Action(
        kind="approval", approval_id=args.approval_id, allow=args.allow, reason=args.reason
    )
    verb = "approved" if args.allow else "denied"
    return _act(args.run_id, action, f"{verb} {args.approval_id!r}")


def cmd_runs_retry(args: argparse.Namespace) -> int:
    """`openflow runs retry ID NODE [--message]`: retry a failed or interrupted node."""
    action = c.Action(kind="retry", node_id=args.node_id, message=args.message)
    return _act(args.run_id, action, f"retrying {args.node_id!r}")


def cmd_runs_message(args: argparse.Namespace) -> int:
    """`openflow runs message ID NODE TEXT`: a message a live node sees on its next turn."""
    action = c.Action(kind="message", node_id=args.node_id, text=args.text)
    return _act(args.run_id, action, f"sent to {args.node_id!r}")


def _act(run_id: str, action: c.Action, done: str) -> int:
    async def main() -> int:
        runs = await connect_runs()
        result = await runs.act(run_id, action)
        status = result.get("status")
        print(f"{done}; run {run_id} is {status}" if status else done)
        return EXIT_OK

    return _run(main())


def cmd_runs_stop(args: argparse.Namespace) -> int:
    """`openflow runs stop ID`: stop a run and wait until it has stopped."""

    async def main() -> int:
        runs = await connect_runs()
        await runs.stop(args.run_id)
        handle = runs.client.get_workflow_handle(args.run_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_TIMEOUT_S
        while loop.time() < deadline:
            if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
                print(
                    f"stopped {args.run_id}; continue it with `openflow runs resume {args.run_id}`"
                )
                return EXIT_OK
            await asyncio.sleep(0.1)
        print(f"stop requested; run {args.run_id} is still winding down")
        return EXIT_OK

    return _run(main())


def cmd_runs_resume(args: argparse.Namespace) -> int:
    """`openflow runs resume ID`: a new execution from the run's checkpoint."""

    async def main() -> int:
        runs = await connect_runs()
        await runs.resume(args.run_id)
        print(f"resumed {args.run_id}")
        return EXIT_OK

    return _run(main())


# --- plumbing --------------------------------------------------------------------------------


def _metrics_runtime(metrics_port: int | None) -> Any | None:
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


async def _answer(query: Awaitable[T], run_id: str, runs: Runs) -> T:
    """A query's answer; BadInput when no worker answers in time."""
    try:
        return await asyncio.wait_for(query, QUERY_TIMEOUT_S)
    except TimeoutError:
        raise BadInput(
            f"run {run_id!r} did not answer within {QUERY_TIMEOUT_S:.0f}s; is a worker polling "
            f"task queue {runs.task_queue!r}? start one with `openflow worker`"
        ) from None


async def _until_stopped(tasks: Sequence[asyncio.Task[Any]], finished_ok: bool = False) -> bool:
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
            print(f"{task.get_name()} stopped: {_first_line(str(error))}", file=sys.stderr)
        else:
            print(f"{task.get_name()} stopped", file=sys.stderr)
    return True


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine, turning what a user can fix into BadInput."""
    try:
        return asyncio.run(main)
    except RunNotFound as exc:
        raise BadInput(f"{exc}; see your runs with `openflow runs list`") from None
    except (ActionRejected, RunConflict, RunError) as exc:
        raise BadInput(str(exc)) from None
    except ServerError as exc:
        raise BadInput(_server_problem(exc)) from None
    except (SettingsError, ConnectError, LimitExceeded) as exc:
        raise BadInput(str(exc)) from None
    except WorkflowAlreadyStartedError as exc:
        raise BadInput(
            f"a run with id {exc.workflow_id!r} already exists; choose another --run-id"
        ) from None
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
        raise BadInput(f"the run could not answer: {_first_line(str(exc))}") from None
    except RPCError as exc:
        if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
            raise BadInput(
                f"lost Temporal at {_target_address()!r} ({_first_line(exc.message)}); "
                "check that the server is up"
            ) from None
        raise BadInput(f"Temporal refused the request: {_first_line(exc.message)}") from None


def _target_address() -> str:
    try:
        return load_target().address
    except ConnectError:
        return temporal_address()


def _server_problem(exc: ServerError) -> str:
    return _first_line(str(exc)).rstrip(":") + (
        "" if "see " in str(exc) else f" (server log: {openflow_home() / 'temporal-server.log'})"
    )


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text.strip()


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _check_port_option(port: int | None, option: str) -> None:
    if port is not None and not 0 < port < 65536:
        raise BadInput(f"{option} {port}: give a TCP port between 1 and 65535")


def _port_free(host: str, port: int) -> bool:
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


def _require_free_port(host: str, port: int, option: str) -> None:
    problem = _bind_problem(host, port)
    if problem is not None:
        raise BadInput(f"{option} {port}: {problem}")


def _check_host(host: str, option: str) -> None:
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
        print(_first_line(str(exc)), file=sys.stderr)
        return EXIT_BAD_INPUT
    except DatabaseError as exc:
        print(_first_line(str(exc)), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`openflow runs list | head -1`): nothing left to say.
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("OPENFLOW_DEBUG"):
            raise
        print(
            f"openflow: unexpected error: {type(exc).__name__}: {_first_line(str(exc))} "
            "(set OPENFLOW_DEBUG=1 to see where)",
            file=sys.stderr,
        )
        return EXIT_FAILED


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


def check_environment() -> None:
    """Every OPENFLOW_* variable, checked before any command uses one."""
    try:
        runtime_settings()
    except SettingsError as exc:
        raise BadInput(str(exc)) from None


#: Arguments that name something that exists (a run, a node, an approval), by their metavar.
_ID_ARGUMENTS = (
    ("run_id", "ID"),
    ("node_id", "NODE"),
    ("approval_id", "APPROVAL"),
    ("workflow", "--workflow"),
)
_TEXT_ARGUMENTS = (("text", "TEXT"), ("message", "--message"), ("reason", "--reason"))
MAX_ID_CHARS = 1000


def check_arguments(args: argparse.Namespace) -> None:
    """The arguments every command shares, checked before the command connects anywhere."""
    if args.handler is cmd_run:
        if args.run_id is not None:
            if not args.run_id.strip():
                raise BadInput("--run-id is empty; give an id or leave the option out")
            try:
                check_run_id(args.run_id)
            except RunError as exc:
                raise BadInput(f"--run-id: {exc}") from None
        check_limit(check_entrypoint, args.input, "--input")
        return
    for name, metavar in _ID_ARGUMENTS:
        value = getattr(args, name, None)
        if value is None:
            continue
        if not value.strip():
            raise BadInput(f"{metavar} is empty; give one (see `openflow runs show ID`)")
        if len(value) > MAX_ID_CHARS or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise BadInput(
                f"{metavar} is not an id: give at most {MAX_ID_CHARS} printable characters"
            )
    for name, where in _TEXT_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            check_limit(lambda text: check_message(text, "the text"), value, where)


def check_limit(check: Callable[[str], None], value: str, where: str) -> None:
    """Run a limit check on an argument; BadInput names the argument and the limit."""
    try:
        check(value)
    except LimitExceeded as exc:
        raise BadInput(f"{where}: {exc}") from None


def _tolerate_unencodable_output() -> None:
    """Never crash on a terminal that cannot show a character (e.g. an em dash)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


if __name__ == "__main__":
    raise SystemExit(main())
