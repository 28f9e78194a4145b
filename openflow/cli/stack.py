"""`openflow server`, `worker`, `api` and `dev`: the pieces, one at a time or all in one process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from temporalio.client import (
    Client,
)
from temporalio.service import RPCError

from openflow.backends import open_backends
from openflow.cli.common import (
    DEFAULT_API_PORT,
    EXIT_FAILED,
    EXIT_OK,
    BadInput,
    check_host,
    check_port_option,
    connect_client,
    metrics_runtime,
    port_free,
    require_free_port,
    run_main,
    server_problem,
    until_stopped,
)
from openflow.connect import ConnectError, load_target
from openflow.paths import openflow_home
from openflow.payloads import data_converter as pydantic_data_converter
from openflow.pools import WorkerPools
from openflow.server import (
    EmbeddedServer,
    ServerError,
    ensure_search_attributes,
    free_port,
    run_server_forever,
    task_queue,
    temporal_address,
    temporal_namespace,
)
from openflow.settings import SettingsError

# --- one piece each: server, worker, api ---------------------------------------------------


def cmd_server(args: argparse.Namespace) -> int:
    """`openflow server`: the embedded Temporal server in the foreground until Ctrl-C."""
    check_port_option(args.ui_port, "--ui-port")
    try:
        return run_server_forever(ui_port=args.ui_port)
    except ServerError as exc:
        raise BadInput(server_problem(exc)) from None


def cmd_worker(args: argparse.Namespace) -> int:
    """`openflow worker`: a worker on $OPENFLOW_TASK_QUEUE until Ctrl-C or SIGTERM."""
    metrics_port = getattr(args, "metrics_port", None)
    if metrics_port is not None:
        check_port_option(metrics_port, "--metrics-port")
    pools = worker_pools(args)
    return run_main(serve_worker(metrics_port=metrics_port, pools=pools))


def worker_pools(args: argparse.Namespace) -> WorkerPools:
    """The worker's sizes: its flags, else the OPENFLOW_* variables (checked, one line each)."""
    from openflow.settings import parse_pollers, parse_pool, parse_seconds

    try:
        pools = WorkerPools.from_environment()
    except SettingsError as exc:
        raise BadInput(str(exc)) from None
    changes: dict[str, Any] = {}
    for flag, field, parse in (
        ("--model-pool", "model", parse_pool),
        ("--tool-pool", "tool", parse_pool),
        ("--workflow-cache", "workflow_cache", parse_pool),
        ("--sticky-timeout", "sticky_timeout_s", parse_seconds),
        ("--workflow-pollers", "workflow_pollers", parse_pollers),
    ):
        text = getattr(args, flag[2:].replace("-", "_"), None)
        if text is None:
            continue
        try:
            changes[field] = parse(str(text))
        except ValueError as exc:
            raise BadInput(f"{flag} {text!r}: {exc}") from None
    return dataclasses.replace(pools, **changes)


async def serve_worker(
    home: Path | None = None,
    metrics_port: int | None = None,
    pools: WorkerPools | None = None,
) -> int:
    """Run a worker against $OPENFLOW_TEMPORAL_ADDRESS until a signal; what `worker.py` runs."""
    from openflow.contracts import tool_task_queue
    from openflow.worker import build_worker

    harden_worker_process()
    home = home or openflow_home()
    open_backends(home)  # a database that cannot be used stops the worker here, in one line
    client = await connect_client(runtime=metrics_runtime(metrics_port))
    await _ensure_search_attributes(client)
    queue = task_queue()
    worker = build_worker(client, queue, home, pools=pools)
    running = asyncio.create_task(worker.run(), name="worker")
    sizes = pools or WorkerPools.from_environment()
    print(
        f"Worker on {load_target().describe()}, "
        f"task queue {queue!r} (model pool {sizes.model}, tool pool {sizes.tool} "
        f"on {tool_task_queue(queue)!r}), home {home}. Press Ctrl-C to stop.",
        flush=True,
    )
    failed = await until_stopped([running])
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

    check_host(args.host, "--host")
    check_port_option(args.port, "--port")
    require_free_port(args.host, args.port, "--port")
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
                self._client,
                self.task_queue,
                self.home,
                activities=activities,
                api_url=self.api_url,
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


def local_stack(args: argparse.Namespace, worker_env: dict[str, str] | None = None) -> LocalStack:
    check_host(args.api_host, "--api-host")
    check_port_option(args.ui_port, "--ui-port")
    check_port_option(args.api_port, "--api-port")
    api_port = args.api_port
    if api_port is None:
        api_port = DEFAULT_API_PORT if port_free(args.api_host, DEFAULT_API_PORT) else None
        api_port = api_port or free_port(args.api_host)
    else:
        require_free_port(args.api_host, api_port, "--api-port")
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
    return run_main(_dev(local_stack(args)))


async def _dev(stack: LocalStack) -> int:
    async with stack:
        print(f"Temporal:  {stack.server.address} (namespace {stack.server.namespace!r})")
        print(f"Web UI:    {stack.server.ui_url}")
        print(f"Pages:     {stack.api_url}/ui")
        print(f"HTTP API:  {stack.api_url}  (docs at {stack.api_url}/docs)")
        print(f"Worker:    task queue {stack.task_queue!r}, home {stack.home}")
        print("Press Ctrl-C to stop.", flush=True)
        failed = await until_stopped(stack.tasks)
    print("Stopped.", flush=True)
    return EXIT_FAILED if failed else EXIT_OK
