"""The reading file tools: `read` and `ls` (spec 4.6, 4.7)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openflow.activities.tools.base import (
    Failed,
    FileStamp,
    InvalidArgs,
    NotFound,
    ReadRecord,
    ThreadTool,
    ToolContext,
    ToolOutput,
)
from openflow.activities.tools.files import decode, is_binary, outline, split_lines
from openflow.activities.tools.sandbox import NotARegularFile, Sandbox
from openflow.activities.tools.spill import find_artifact

READ_LINE_CAP = 3000
ARTIFACT_READ_BYTES = 45_000
LS_ENTRY_CAP = 2000
PLAN_URI = "run://PLAN.md"
PLAN_FILE = "PLAN.md"
HANDOFF_NAMES = frozenset({"HANDOFF.md", "HANDOFF.json"})

_SELECTOR = re.compile(r"^(?P<base>.+?):(?:(?P<raw>raw)|(?P<start>\d+)(?:-(?P<end>\d*))?)$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_HANDOFF_SEGMENT = re.compile(r"^(?:[A-Za-z0-9_.-]|%[0-9A-Fa-f]{2})+$")

_PATH_SCHEMA = {
    "type": "string",
    "description": (
        "File or directory relative to the execution folder. Selectors: 'path:START-END' "
        "(1-based lines, END optional), 'path:raw' (no line numbers). Also 'artifact:{id}', "
        "'run://handoffs/{node}/HANDOFF.md|json' and 'run://PLAN.md'."
    ),
}


@dataclass(frozen=True)
class Selector:
    """How much of a text to show: a line range, or the raw text."""

    raw: bool = False
    start: int | None = None
    end: int | None = None


def split_selector(text: str) -> tuple[str, Selector]:
    """Split `path:10-20` / `path:raw` into the path and its selector."""
    match = _SELECTOR.match(text)
    if not match:
        return text, Selector()
    if match.group("raw"):
        return match.group("base"), Selector(raw=True)
    start = int(match.group("start"))
    end_text = match.group("end")
    end = int(end_text) if end_text else None
    return match.group("base"), Selector(start=start, end=end)


def render_text(
    text: str,
    selector: Selector,
    shown_as: str,
    tool: str = "read",
    byte_budget: int | None = None,
) -> str:
    """Numbered lines (`{n}\\t{line}`), at most 3000 per call, or the raw text.

    With a byte budget (artifact reads, which must not spill into yet another artifact) the
    output stops at the last whole line that fits and says where to continue.
    """
    if selector.raw and byte_budget is None:
        return text
    lines = split_lines(text)
    total = len(lines)
    if total == 0:
        return text if selector.raw else f"[{shown_as} is empty]"
    start = selector.start or 1
    if start < 1:
        raise InvalidArgs(tool, "line numbers start at 1", f"read '{shown_as}:1-{total}'")
    if start > total:
        raise InvalidArgs(
            tool,
            f"line {start} is past the end of {shown_as} ({total} lines)",
            f"pick a range within 1-{total}",
        )
    end = total if selector.end is None else min(selector.end, total)
    if end < start:
        raise InvalidArgs(
            tool, f"line range {start}-{end} is empty", "give END greater than or equal to START"
        )
    if not selector.raw:
        end = min(end, start + READ_LINE_CAP - 1)
    rendered: list[str] = []
    used = 0
    for n in range(start, end + 1):
        line = lines[n - 1] if selector.raw else f"{n}\t{lines[n - 1]}"
        size = len(line.encode("utf-8")) + 1
        if byte_budget is not None and rendered and used + size > byte_budget:
            end = n - 1
            break
        rendered.append(line)
        used += size
    body = "\n".join(rendered)
    if selector.raw and end == total:
        return text
    if end < total and (selector.end is None or end < selector.end):
        body += (
            f"\n[showing lines {start}-{end} of {total}; read '{shown_as}:{end + 1}-' for the rest]"
        )
    return body


def _text_of(data: bytes, shown_as: str) -> str:
    if is_binary(data):
        raise Failed(
            f"{shown_as} is a binary file ({len(data)} bytes) — inspect it with bash "
            "(e.g. `file` or `xxd | head`)"
        )
    return decode(data)


def list_directory(sandbox: Sandbox, rel: str, shown_as: str) -> str:
    """One entry a line, directories with a trailing `/`, symlinks with `@`."""
    entries = sandbox.scandir(rel)
    if not entries:
        return f"[{shown_as} is an empty directory]"
    marks = {"link": "@", "dir": "/", "file": ""}
    lines = [f"{name}{marks[kind]}" for name, kind in entries[:LS_ENTRY_CAP]]
    if len(entries) > LS_ENTRY_CAP:
        lines.append(
            f"[{LS_ENTRY_CAP} of {len(entries)} entries shown — use find with a glob to narrow]"
        )
    return "\n".join(lines)


def plan_path(ctx: ToolContext) -> Path:
    """Where the plan draft `run://PLAN.md` lives: `artifacts/PLAN.md` of the run."""
    return ctx.artifacts_dir / PLAN_FILE


class ReadTool(ThreadTool):
    name = "read"
    description = (
        "Read a file (numbered lines, at most 3000 per call; use 'path:START-END' for more or "
        "'path:raw' for the text without numbers), list a directory, or read an artifact "
        "('artifact:{id}'), a node handoff ('run://handoffs/{node}/HANDOFF.md') or the plan "
        "draft ('run://PLAN.md')."
    )
    parameters = {"type": "object", "properties": {"path": _PATH_SCHEMA}, "required": ["path"]}
    tier = "read"
    concurrency = "shared"

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        target = args["path"]
        if not isinstance(target, str) or not target.strip():
            raise InvalidArgs(self.name, "'path' must be a non-empty string", "e.g. 'src/app.py'")
        target = target.strip()
        if target.startswith("artifact:"):
            return self._read_artifact(ctx, target)
        if target.startswith("run://"):
            return self._read_run_uri(ctx, target)
        if _URL.match(target):
            raise Failed(
                "URL reads are not available on this worker — fetch it with bash "
                "(e.g. curl) if the network is reachable"
            )
        return self._read_local(ctx, target)

    def _read_artifact(self, ctx: ToolContext, target: str) -> ToolOutput:
        ident, selector = split_selector(target[len("artifact:") :])
        path = find_artifact(ctx.artifacts_dir, ident)
        data = None if path is None else run_files(ctx).read_or_none(run_rel(ctx, path))
        if data is None:
            raise NotFound(
                f"artifact {ident!r} does not exist in this run",
                "use the exact id from the marker line, e.g. artifact:{uuid}",
            )
        text = _text_of(data, f"artifact:{ident}")
        shown = render_text(text, selector, f"artifact:{ident}", byte_budget=ARTIFACT_READ_BYTES)
        return ToolOutput(content=shown)

    def _read_run_uri(self, ctx: ToolContext, target: str) -> ToolOutput:
        uri, selector = split_selector(target)
        path = resolve_run_uri(ctx, uri)
        data = run_files(ctx).read_or_none(run_rel(ctx, path))
        if data is None:
            raise NotFound(
                f"{uri!r} does not exist yet",
                "check the upstream handoff manifest in your input for the exact URI",
            )
        return ToolOutput(content=render_text(_text_of(data, uri), selector, uri))

    def _read_local(self, ctx: ToolContext, target: str) -> ToolOutput:
        sandbox = Sandbox(ctx.execution_dir)
        whole = sandbox.resolve(target, self.name)
        if whole.exists:
            resolved, selector = whole, Selector()
        else:
            base, selector = split_selector(target)
            resolved = sandbox.resolve(base, self.name) if base != target else whole
        missing = NotFound(
            f"{resolved.rel!r} does not exist",
            "check the path with ls or find (paths are relative to the execution folder)",
        )
        if resolved.is_dir:
            try:
                listing = list_directory(sandbox, resolved.rel, resolved.rel)
            except NotADirectoryError:
                pass  # replaced by a file since: read it below
            except FileNotFoundError:
                raise missing from None
            else:
                return ToolOutput(content=listing, cacheable=True)
        try:
            data, st = sandbox.read_bytes(resolved.rel)
        except FileNotFoundError:
            raise missing from None
        except IsADirectoryError:
            listing = list_directory(sandbox, resolved.rel, resolved.rel)
            return ToolOutput(content=listing, cacheable=True)
        except NotARegularFile:
            raise Failed(
                f"{resolved.rel} is not a regular file (a pipe, socket or device) — "
                "inspect it with bash"
            ) from None
        stamp = FileStamp(path=os.fspath(resolved.real), mtime_ns=st.st_mtime_ns, size=st.st_size)
        text = _text_of(data, resolved.rel)
        return ToolOutput(
            content=render_text(text, selector, resolved.rel),
            reads=[ReadRecord(path=resolved.rel, outline=outline(text, resolved.rel))],
            cacheable=True,
            stamp=stamp,
        )


def run_files(ctx: ToolContext) -> Sandbox:
    """The run folder as a sandbox: run resources are read and written through handles too."""
    return Sandbox(ctx.run_dir)


def run_rel(ctx: ToolContext, path: Path) -> str:
    """A run resource's path relative to the run folder."""
    return Path(os.path.relpath(path, ctx.run_dir)).as_posix()


def resolve_run_uri(ctx: ToolContext, uri: str) -> Path:
    """Map `run://handoffs/{segment}/HANDOFF.md|json` and `run://PLAN.md` into the run folder."""
    if uri == PLAN_URI:
        return plan_path(ctx)
    parts = uri[len("run://") :].split("/")
    if (
        len(parts) == 3
        and parts[0] == "handoffs"
        and parts[1] not in (".", "..")
        and _HANDOFF_SEGMENT.match(parts[1])
        and parts[2] in HANDOFF_NAMES
    ):
        return ctx.run_dir / "handoffs" / parts[1] / parts[2]
    raise NotFound(
        f"{uri!r} is not a readable run resource",
        "use run://handoffs/{node}/HANDOFF.md, run://handoffs/{node}/HANDOFF.json or run://PLAN.md",
    )


class LsTool(ThreadTool):
    name = "ls"
    description = (
        "List a directory of the execution folder ('.' is the folder itself); directories end "
        "with '/', symlinks with '@'."
    )
    parameters = {
        "type": "object",
        "properties": {"path": {**_PATH_SCHEMA, "description": "Directory to list; '.' = root."}},
        "required": ["path"],
    }
    tier = "read"
    concurrency = "shared"

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        sandbox = Sandbox(ctx.execution_dir)
        resolved = sandbox.resolve(args.get("path") or ".", self.name)
        missing = NotFound(f"{resolved.rel!r} does not exist", "list '.' to see what is there")
        if not resolved.exists:
            raise missing
        try:
            return ToolOutput(content=list_directory(sandbox, resolved.rel, resolved.rel))
        except FileNotFoundError:
            raise missing from None
        except NotADirectoryError:
            size = sandbox.stat(resolved.rel).st_size
            return ToolOutput(content=f"{resolved.rel} ({size} bytes, a file — use read)")


__all__ = [
    "HANDOFF_NAMES",
    "PLAN_URI",
    "READ_LINE_CAP",
    "LsTool",
    "ReadTool",
    "Selector",
    "list_directory",
    "plan_path",
    "render_text",
    "resolve_run_uri",
    "run_files",
    "run_rel",
    "split_selector",
]
