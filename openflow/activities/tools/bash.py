"""`bash`: a shell command in its own process group, streamed live, killed as a whole."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import signal
from typing import Any

from openflow.activities.tools.base import (
    Cancelled,
    InvalidArgs,
    NotFound,
    Tool,
    ToolContext,
    ToolOutput,
    ToolTimeout,
)
from openflow.activities.tools.confine import jail_for
from openflow.activities.tools.process import kill_group, spawn, tool_env
from openflow.activities.tools.sandbox import Sandbox
from openflow.engine.transcript import ToolCall

logger = logging.getLogger(__name__)

BASH = "/bin/bash"
DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 3600
CAPTURE_HEAD_BYTES = 4 * 1024 * 1024
CAPTURE_TAIL_BYTES = 4 * 1024 * 1024
LIVE_CAP_BYTES = 2 * 1024 * 1024
DRAIN_GRACE_S = 1.0
_READ_CHUNK = 65536
_TERM_GRACE_S = 0.5


class _Capture:
    """Keeps the first and last few MiB of a stream and counts what fell in between."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = CAPTURE_HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * CAPTURE_TAIL_BYTES:
                del self.tail[: len(self.tail) - CAPTURE_TAIL_BYTES]

    def text(self) -> str:
        tail = self.tail[-CAPTURE_TAIL_BYTES:]
        omitted = self.total - len(self.head) - len(tail)
        body = self.head.decode("utf-8", errors="replace")
        if omitted > 0:
            body += f"\n[... {omitted} bytes of output omitted ...]\n"
        return body + bytes(tail).decode("utf-8", errors="replace")


class _LiveStream:
    """Sends output to the live channel as ToolUpdated deltas; never fails the call.

    Each update carries only the new text (`output_meta.delta`), with the byte offset at which
    it starts, so followers append rather than replace.
    """

    def __init__(self, ctx: ToolContext, call: ToolCall) -> None:
        self.ctx = ctx
        self.call = call
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.sent = 0
        self.stopped = False

    def send(self, data: bytes, final: bool = False) -> None:
        if self.stopped:
            return
        text = self.decoder.decode(data, final=final)
        if not text:
            return
        if self.sent + len(data) > LIVE_CAP_BYTES:
            text = "\n[live output stopped here; the result holds the rest]\n"
            self.stopped = True
        update = {
            "type": "ToolUpdated",
            "node_id": self.ctx.node_id,
            "tool_call_id": self.call.id,
            "tool_name": self.call.name,
            "content": text,
            "output_meta": {"delta": True, "offset": self.sent},
        }
        self.sent += len(data)
        try:
            self.ctx.live(update)
        except Exception:  # the live channel is best-effort by design
            logger.warning("live update for tool call %s was dropped", self.call.id, exc_info=True)


async def _pump(stream: asyncio.StreamReader, capture: _Capture, live: _LiveStream) -> None:
    while True:
        data = await stream.read(_READ_CHUNK)
        if not data:
            live.send(b"", final=True)
            return
        capture.add(data)
        live.send(data)


async def _stop_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the whole group, then SIGKILL it after a short grace."""
    kill_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), _TERM_GRACE_S)
    kill_group(proc.pid, signal.SIGKILL)


def _timeout_of(args: dict[str, Any]) -> float:
    value = args.get("timeout", DEFAULT_TIMEOUT_S)
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidArgs("bash", "'timeout' must be a positive number of seconds", "e.g. 600")
    if value > MAX_TIMEOUT_S:
        raise InvalidArgs(
            "bash",
            f"'timeout' {value:g}s is over the {MAX_TIMEOUT_S}s maximum",
            f"use at most {MAX_TIMEOUT_S}, or split the work into shorter commands",
        )
    return float(value)


def _render(output: str, code: int | None) -> str:
    body = output.rstrip("\n")
    if code is not None and code < 0:
        status = f"[killed by signal {-code}]"
    else:
        status = f"[exit code {code}]"
    return f"{body}\n{status}" if body else f"[no output] {status}"


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a bash command in the execution folder (or 'cwd' inside it). Output (stdout and "
        "stderr together) streams live; the result ends with the exit code. 'timeout' in seconds "
        "(default 300, max 3600). Background processes are stopped when the command ends."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command line."},
            "timeout": {"type": "number", "description": "Seconds (default 300, max 3600)."},
            "env": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Extra environment variables.",
            },
            "cwd": {"type": "string", "description": "Working folder relative to the root."},
        },
        "required": ["command"],
    }
    concurrency = "node_exclusive"
    mutates = True

    def lock_keys(self, ctx: ToolContext, args: dict[str, Any]) -> list[str]:
        return [f"{ctx.node_id}\x1ftool:bash"]

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        command = args["command"]
        if not command.strip():
            raise InvalidArgs(self.name, "'command' is empty", "pass the command line to run")
        timeout = _timeout_of(args)
        cwd = Sandbox(ctx.execution_dir).resolve(args.get("cwd") or ".", self.name, arg="cwd")
        if not cwd.is_dir:
            raise NotFound(f"cwd {cwd.rel!r} is not a directory", "pass an existing folder")
        env = tool_env(ctx.env, args.get("env"))

        jail = jail_for(ctx, self.name)
        proc = await spawn([BASH, "-c", command], cwd=cwd.real, env=env, jail=jail)
        assert proc.stdout is not None
        capture = _Capture()
        reader = asyncio.create_task(_pump(proc.stdout, capture, _LiveStream(ctx, call)))
        exited = asyncio.create_task(proc.wait())
        cancelled = asyncio.create_task(ctx.cancel.wait())
        try:
            done, _ = await asyncio.wait(
                {exited, cancelled}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if exited not in done:
                await _stop_group(proc)
                await self._finish_reading(reader)
                if cancelled in done:
                    raise Cancelled(self.name)
                raise ToolTimeout(
                    self.name,
                    timeout,
                    "raise 'timeout' (max 3600) or split the work; do not start servers that "
                    "keep running",
                    output=capture.text().rstrip("\n"),
                )
            try:
                await asyncio.wait_for(asyncio.shield(reader), DRAIN_GRACE_S)
            except TimeoutError:
                kill_group(proc.pid, signal.SIGKILL)
                await self._finish_reading(reader)
            kill_group(proc.pid, signal.SIGKILL)
            code = proc.returncode
            return ToolOutput(
                content=_render(capture.text(), code),
                is_error=code != 0,
                output_meta={"exit_code": code},
            )
        finally:
            for task in (exited, cancelled):
                task.cancel()
            if proc.returncode is None:
                kill_group(proc.pid, signal.SIGKILL)
            if not reader.done():
                reader.cancel()

    @staticmethod
    async def _finish_reading(reader: asyncio.Task[None]) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(reader), DRAIN_GRACE_S * 2)
        except TimeoutError:
            reader.cancel()


__all__ = ["DEFAULT_TIMEOUT_S", "MAX_TIMEOUT_S", "BashTool"]
