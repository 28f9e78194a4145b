"""What every built-in tool shares: the call context, the output shape and the error forms.

Errors (each renders as the spec's `[kind] ...` result text, spec 4.5):

    ToolError
    ├── NotFound            [not_found] {what} — {hint}
    ├── PermissionDenied    [permission_denied] {detail}
    ├── InvalidArgs         [invalid_args] {tool}: {problem} — {hint}
    ├── ToolTimeout         [timeout] {tool} timed out after {n}s — {hint}
    ├── Cancelled           [cancelled] {tool} was cancelled
    └── Failed              [failed] {detail}
"""

from __future__ import annotations

import abc
import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from openflow.engine.transcript import ToolCall

Tier = Literal["read", "write"]
Concurrency = Literal["shared", "exclusive", "node_exclusive"]
FileOp = Literal["create", "update", "delete", "rename"]

FILE_MUTATION_KEY = "file-mutation"


def _ignore_event(_event: dict[str, Any]) -> None:
    """Default sink for contexts built without an event consumer."""


@dataclass
class ToolContext:
    """Where and for whom a tool batch runs; the callbacks carry events out of the batch."""

    run_id: str
    node_id: str
    execution_dir: Path
    run_dir: Path
    conversation: str = ""
    retry_policy: tuple[int, int] = (3, 1000)
    emit: Callable[[dict[str, Any]], None] = _ignore_event
    live: Callable[[dict[str, Any]], None] = _ignore_event
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    env: Mapping[str, str] = field(default_factory=dict)
    #: The worker's $OPENFLOW_HOME, hidden from confined tool processes.
    home: Path | None = None

    def __post_init__(self) -> None:
        self.execution_dir = Path(self.execution_dir)
        self.run_dir = Path(self.run_dir)
        if not self.conversation:
            self.conversation = self.node_id

    @property
    def artifacts_dir(self) -> Path:
        """Folder of spilled outputs and plan drafts (`run://PLAN.md`)."""
        return self.run_dir / "artifacts"


class ToolError(Exception):
    """A tool call that failed in a way the model should read and react to."""

    kind: ClassVar[str] = "failed"
    retryable: ClassVar[bool] = False

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def render(self) -> str:
        """The exact error text the model sees."""
        return f"[{self.kind}] {self.detail}"

    def is_retryable(self) -> bool:
        """Whether the executor retries the call (spec 4.5: timeouts and transient failures)."""
        return self.retryable


class NotFound(ToolError):
    kind = "not_found"

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(f"{what} — {hint}")


class PermissionDenied(ToolError):
    kind = "permission_denied"


class InvalidArgs(ToolError):
    kind = "invalid_args"

    def __init__(self, tool: str, problem: str, hint: str) -> None:
        super().__init__(f"{tool}: {problem} — {hint}")


class ToolTimeout(ToolError):
    kind = "timeout"
    retryable = True

    def __init__(self, tool: str, seconds: float, hint: str, output: str = "") -> None:
        text = f"{tool} timed out after {seconds:g}s — {hint}"
        if output:
            text += f"\n\nOutput before the timeout:\n{output}"
        super().__init__(text)


class Cancelled(ToolError):
    kind = "cancelled"

    def __init__(self, tool: str) -> None:
        super().__init__(f"{tool} was cancelled")


_RETRYABLE_FAILURE = re.compile(
    r"timeout|timed out|connection reset|connection refused|temporarily unavailable"
    r"|\b502\b|\b503\b|\b429\b",
    re.IGNORECASE,
)


class Failed(ToolError):
    kind = "failed"

    def is_retryable(self) -> bool:
        return bool(_RETRYABLE_FAILURE.search(self.detail))


@dataclass(frozen=True)
class Snapshot:
    """A file's content before a mutation (None when the file did not exist)."""

    path: str
    content: bytes | None


@dataclass(frozen=True)
class FileChange:
    """One file a tool changed, with what it held before."""

    path: str
    op: FileOp
    before: Snapshot
    rename_to: str | None = None
    diff_summary: str | None = None
    #: SHA-256 of what the change left (at `rename_to` for a rename); None after a delete.
    after_sha256: str | None = None


@dataclass(frozen=True)
class ReadRecord:
    """A local file a node read, with a short outline of its definitions (`input.reads`)."""

    path: str
    outline: str | None = None

    def as_dict(self) -> dict[str, str]:
        """The `input.reads` entry."""
        record = {"path": self.path}
        if self.outline:
            record["outline"] = self.outline
        return record


@dataclass(frozen=True)
class FileStamp:
    """mtime and length of a single file, the validity key of a cached read."""

    path: str
    mtime_ns: int
    size: int


@dataclass
class ToolOutput:
    """What a tool produced; the executor turns it into a ToolResult and events."""

    content: str
    is_error: bool = False
    output_meta: dict[str, Any] | None = None
    artifact_ids: tuple[str, ...] = ()
    changes: list[FileChange] = field(default_factory=list)
    reads: list[ReadRecord] = field(default_factory=list)
    cacheable: bool = False
    stamp: FileStamp | None = None


class Tool(abc.ABC):
    """A built-in tool: its schema, how it may run beside others, and what it does."""

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]
    tier: ClassVar[Tier] = "write"
    concurrency: ClassVar[Concurrency] = "exclusive"
    mutates: ClassVar[bool] = False

    def validate(self, args: dict[str, Any]) -> None:
        """Check arguments against the schema; raise InvalidArgs naming the first problem."""
        validator = _validators.get(type(self))
        if validator is None:
            validator = _validators[type(self)] = Draft202012Validator(self.parameters)
        error = best_match(validator.iter_errors(args))
        if error is None:
            return
        where = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
        ).lstrip(".")
        problem = f"{where}: {error.message}" if where else error.message
        raise InvalidArgs(self.name, problem, f"fix the arguments to match the {self.name} schema")

    def lock_keys(self, ctx: ToolContext, args: dict[str, Any]) -> list[str]:
        """Run-wide exclusive locks this call needs (spec 4.5); shared tools need none."""
        if self.concurrency == "shared":
            return []
        return [f"tool:{self.name}"]

    @abc.abstractmethod
    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        """Execute the call; raise ToolError for results the model should see as errors."""


_validators: dict[type[Tool], Draft202012Validator] = {}


class ThreadTool(Tool):
    """A tool whose work is blocking file I/O, run in a worker thread.

    A thread cannot be interrupted: a read stops at its next `check_cancel`, while a file
    mutation that has started is allowed to finish and report, so its locks stay held until
    the file is written and its change is recorded.
    """

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        work = asyncio.ensure_future(asyncio.to_thread(self.run_sync, ctx, args))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            if not self.mutates:
                raise
            return await work

    @abc.abstractmethod
    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        """Blocking body of the tool."""


def check_cancel(ctx: ToolContext, tool: str) -> None:
    """Stop a long loop in a worker thread once the batch is cancelled."""
    if ctx.cancel.is_set():
        raise Cancelled(tool)


def intent_free(args: dict[str, Any]) -> dict[str, Any]:
    """Arguments without the UI-only intent fields (`_i`, `intent`)."""
    return {k: v for k, v in args.items() if k not in ("_i", "intent")}


__all__ = [
    "FILE_MUTATION_KEY",
    "Cancelled",
    "Concurrency",
    "Failed",
    "FileChange",
    "FileOp",
    "FileStamp",
    "InvalidArgs",
    "NotFound",
    "PermissionDenied",
    "ReadRecord",
    "Snapshot",
    "ThreadTool",
    "Tier",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolTimeout",
    "check_cancel",
    "intent_free",
]
