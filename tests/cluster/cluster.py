"""A cluster on one machine: worker and API processes that share only Temporal, PostgreSQL and
the workspace volume, each with its own `OPENFLOW_HOME`.

`WORKER_VARIABLES` and `API_VARIABLES` are the environment each process gets, exactly as
`docker/docker-compose.yml` sets it for its `worker` and `api` services (a test checks that).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]

WORKER_VARIABLES = (
    "OPENFLOW_HOME",
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "OPENFLOW_TASK_QUEUE",
    "OPENFLOW_DATABASE_URL",
    "OPENFLOW_WORKSPACES",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
)
"""What every worker is given; nothing else of OpenFlow's or Temporal's reaches it."""

API_VARIABLES = (
    "OPENFLOW_HOME",
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "OPENFLOW_TASK_QUEUE",
    "OPENFLOW_DATABASE_URL",
    "OPENFLOW_API_KEYS",
)
"""What every API process is given."""

COMPOSE = ROOT / "docker" / "docker-compose.yml"

_MAIN = "import sys; from openflow.cli import main; sys.exit(main(sys.argv[1:]))"


def process_env(values: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """This process's environment without OpenFlow's or Temporal's variables, plus `names`."""
    missing = sorted(set(names) - set(values))
    extra = sorted(set(values) - set(names))
    assert not missing and not extra, f"variables missing {missing}, not expected {extra}"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENFLOW_", "TEMPORAL_")) and not k.endswith("_API_KEY")
    }
    env.update(values)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Process:
    """One `openflow` command in a process of its own, its output in `log`."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    ready: str
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-c", _MAIN, *self.args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Until this start's output says `ready`."""
        marker = f"--- start {self.starts}\n".encode()
        deadline = time.monotonic() + timeout
        while True:
            text = self.log.read_bytes()
            if self.ready.encode() in text[text.rfind(marker) :]:
                return
            assert self.process is not None
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.name} did not start:\n{self.log.read_text()[-3000:]}")
            await asyncio.sleep(0.05)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9, as a crashed machine would."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Cluster:
    """Worker and API processes of one test; stopped on exit."""

    processes: list[Process] = field(default_factory=list)

    def add(self, process: Process) -> Process:
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.stop()


def compose_file() -> dict[str, Any] | None:
    """docker/docker-compose.yml parsed, or None without PyYAML."""
    try:
        import yaml
    except ImportError:
        return None
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def api_healthcheck() -> list[str] | None:
    """The compose file's healthcheck of the API service (a command list), None without PyYAML."""
    data = compose_file()
    if data is None:
        return None
    test: list[str] = data["services"]["api"]["healthcheck"]["test"]
    assert test[0] == "CMD", test
    return test[1:]


# --- Server-Sent Events ---------------------------------------------------------------------

Frame = dict[str, Any]
SSE = {"Accept": "text/event-stream"}


def data_of(frame: Frame) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(frame["data"])
    return parsed


async def follow(
    http: httpx.AsyncClient,
    run_id: str,
    *,
    headers: Mapping[str, str] | None = None,
    live_after: int = 0,
    until: Callable[[Frame], bool] | None = None,
    timeout: float = 60.0,
) -> tuple[list[Frame], bool]:
    """Read SSE frames until `until` holds (then hang up) or the server ends the stream."""

    async def read() -> tuple[list[Frame], bool]:
        frames: list[Frame] = []
        current: Frame = {}
        async with http.stream(
            "GET",
            f"/runs/{run_id}/events",
            params={"live_after": live_after},
            headers={**SSE, **(headers or {})},
        ) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line == "":
                    if current:
                        frames.append(current)
                        if until is not None and until(current):
                            return frames, False
                    current = {}
                elif line.startswith(":"):
                    current.setdefault("comments", []).append(line[1:].strip())
                else:
                    name, _, value = line.partition(":")
                    current[name] = value[1:] if value.startswith(" ") else value
        return frames, True

    return await asyncio.wait_for(read(), timeout)


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


async def poll(
    check: Callable[[], Any], what: str, timeout: float = 60.0, every: float = 0.1
) -> Any:
    """Await `check()` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            found = await check()
            if found:
                return found
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        await asyncio.sleep(every)
