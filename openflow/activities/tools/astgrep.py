"""`ast_grep` and `ast_edit`: structural search and rewrite through the `ast-grep` binary.

Registered only when the binary resolves (the `ast-grep-cli` package provides it). Rewrites are
computed from ast-grep's JSON output and applied here, so edits are recorded like every other
file mutation and a failing operation restores the files it already touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from openflow.activities.tools.base import (
    FILE_MUTATION_KEY,
    Cancelled,
    Failed,
    FileChange,
    InvalidArgs,
    NotFound,
    Tool,
    ToolContext,
    ToolOutput,
    ToolTimeout,
)
from openflow.activities.tools.confine import jail_for
from openflow.activities.tools.files import file_change
from openflow.activities.tools.process import kill_group, spawn, tool_env
from openflow.activities.tools.sandbox import Resolved, Sandbox
from openflow.engine.transcript import ToolCall

AST_GREP_MATCH_CAP = 500
AST_GREP_TIMEOUT_S = 120
_LINE_CHARS = 400


def ast_grep_binary() -> str | None:
    """Path of the `ast-grep` executable, on PATH or next to this Python."""
    found = shutil.which("ast-grep")
    if found:
        return found
    beside = Path(sys.executable).parent / "ast-grep"
    return os.fspath(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _paths(ctx: ToolContext, tool: str, raw: object) -> list[Resolved]:
    if not isinstance(raw, list) or not raw or not all(isinstance(p, str) for p in raw):
        raise InvalidArgs(tool, "'paths' must be a non-empty array of strings", "e.g. ['src']")
    sandbox = Sandbox(ctx.execution_dir)
    resolved = [sandbox.resolve(p, tool, arg="paths") for p in raw]
    for item in resolved:
        if not item.exists:
            raise NotFound(f"{item.rel!r} does not exist", "check the path with ls or find")
    return resolved


async def _matches(
    ctx: ToolContext,
    tool: str,
    binary: str,
    pattern: str,
    paths: list[Resolved],
    lang: str | None,
    rewrite: str | None = None,
) -> list[dict[str, Any]]:
    """Run `ast-grep run --json=stream` and return its matches, without duplicates."""
    argv = [binary, "run", "--pattern", pattern, "--json=stream"]
    if lang:
        argv += ["--lang", lang]
    if rewrite is not None:
        argv += ["--rewrite", rewrite]
    argv += ["--", *[p.rel for p in paths]]
    proc = await spawn(
        argv,
        cwd=Sandbox(ctx.execution_dir).root,
        env=tool_env(ctx.env),
        merge_stderr=False,
        jail=jail_for(ctx, tool),
    )
    talk = asyncio.create_task(proc.communicate())
    cancelled = asyncio.create_task(ctx.cancel.wait())
    try:
        done, _ = await asyncio.wait(
            {talk, cancelled}, timeout=AST_GREP_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if talk not in done:
            kill_group(proc.pid, signal.SIGKILL)
            if cancelled in done:
                raise Cancelled(tool)
            raise ToolTimeout(tool, AST_GREP_TIMEOUT_S, "search fewer paths at once")
        stdout, stderr = talk.result()
    finally:
        cancelled.cancel()
        if proc.returncode is None:
            kill_group(proc.pid, signal.SIGKILL)
    problem = stderr.decode("utf-8", errors="replace").strip()
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and problem):
        raise Failed(f"ast-grep failed: {problem[:2000] or f'exit code {proc.returncode}'}")
    seen: set[tuple[str, int]] = set()
    matches = []
    for line in stdout.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        match = json.loads(line)
        key = (os.path.normpath(match["file"]), match["range"]["byteOffset"]["start"])
        if key not in seen:
            seen.add(key)
            matches.append(match)
    return matches


class AstGrepTool(Tool):
    name = "ast_grep"
    description = (
        "Structural code search with ast-grep: 'pat' is code with metavariables ($X one node, "
        "$$$ many), e.g. 'console.log($A)'. Prints 'path:line:code' per match, at most 500. "
        "The language comes from each file's extension unless 'lang' is given."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pat": {"type": "string", "description": "ast-grep pattern."},
            "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "lang": {"type": "string", "description": "Language, e.g. python, typescript."},
        },
        "required": ["pat", "paths"],
    }
    tier = "read"
    concurrency = "shared"

    def __init__(self, binary: str) -> None:
        self.binary = binary

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        paths = _paths(ctx, self.name, args["paths"])
        found = await _matches(ctx, self.name, self.binary, args["pat"], paths, args.get("lang"))
        if not found:
            where = ", ".join(p.rel for p in paths)
            return ToolOutput(content=f"No matches for {args['pat']!r} in {where}.", cacheable=True)
        found.sort(key=lambda m: (m["file"], m["range"]["byteOffset"]["start"]))
        lines = []
        for match in found[:AST_GREP_MATCH_CAP]:
            text = match.get("lines", match.get("text", "")).split("\n")[0][:_LINE_CHARS]
            rel = Path(os.path.normpath(match["file"])).as_posix()
            lines.append(f"{rel}:{match['range']['start']['line'] + 1}:{text}")
        if len(found) > AST_GREP_MATCH_CAP:
            lines.append(f"[{AST_GREP_MATCH_CAP} of {len(found)} matches shown — narrow paths]")
        return ToolOutput(content="\n".join(lines), cacheable=True)


def _rewrite(data: bytes, matches: list[dict[str, Any]]) -> tuple[bytes, int]:
    """Apply non-overlapping replacements, outermost first; returns new bytes and the count."""
    spans = []
    for match in matches:
        offsets = match.get("replacementOffsets") or match["range"]["byteOffset"]
        spans.append((offsets["start"], offsets["end"], match.get("replacement", "")))
    spans.sort(key=lambda s: (s[0], -s[1]))
    kept: list[tuple[int, int, str]] = []
    for start, end, replacement in spans:
        if kept and start < kept[-1][1]:
            continue
        kept.append((start, end, replacement))
    out = bytearray(data)
    for start, end, replacement in reversed(kept):
        out[start:end] = replacement.encode("utf-8")
    return bytes(out), len(kept)


class AstEditTool(Tool):
    name = "ast_edit"
    description = (
        "Structural rewrite with ast-grep: each op replaces code matching 'pat' with 'out' "
        "(metavariables carry over, e.g. pat 'foo($A)' out 'bar($A)') in 'paths'. Ops apply in "
        "order; if one fails, no file is changed."
    )
    parameters = {
        "type": "object",
        "properties": {
            "ops": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {"pat": {"type": "string"}, "out": {"type": "string"}},
                    "required": ["pat", "out"],
                },
            },
            "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "lang": {"type": "string", "description": "Language, e.g. python, typescript."},
        },
        "required": ["ops", "paths"],
    }
    mutates = True

    def __init__(self, binary: str) -> None:
        self.binary = binary

    def lock_keys(self, ctx: ToolContext, args: dict[str, Any]) -> list[str]:
        sandbox = Sandbox(ctx.execution_dir)
        raw = args.get("paths") if isinstance(args.get("paths"), list) else []
        return sorted({sandbox.lock_key(p) for p in raw or []} | {FILE_MUTATION_KEY})

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        paths = _paths(ctx, self.name, args["paths"])
        sandbox = Sandbox(ctx.execution_dir)
        originals: dict[str, bytes] = {}
        counts: dict[str, int] = {}
        try:
            for op in args["ops"]:
                found = await _matches(
                    ctx, self.name, self.binary, op["pat"], paths, args.get("lang"), op["out"]
                )
                by_file: dict[str, list[dict[str, Any]]] = {}
                for match in found:
                    by_file.setdefault(match["file"], []).append(match)
                for name, file_matches in sorted(by_file.items()):
                    target = sandbox.resolve(name, self.name)
                    sandbox.check_writable(target.rel, self.name)
                    data = sandbox.read_bytes(target.rel)[0]
                    originals.setdefault(target.rel, data)
                    new, count = _rewrite(data, file_matches)
                    if new != data:
                        sandbox.write_bytes(target.rel, new, self.name)
                        counts[target.rel] = counts.get(target.rel, 0) + count
        except BaseException:
            for rel, data in originals.items():
                sandbox.write_bytes(rel, data, self.name)
            raise
        changes: list[FileChange] = []
        for rel, before in sorted(originals.items()):
            after = sandbox.read_bytes(rel)[0]
            if after != before:
                changes.append(file_change(rel, "update", before, after))
        if not changes:
            where = ", ".join(p.rel for p in paths)
            return ToolOutput(content=f"No matches in {where}; nothing was changed.")
        total = sum(counts.values())
        lines = [f"Rewrote {total} matches in {len(changes)} files:"]
        lines += [f"M {c.path} ({counts.get(c.path, 0)})" for c in changes]
        return ToolOutput(content="\n".join(lines), changes=changes)


__all__ = ["AstEditTool", "AstGrepTool", "ast_grep_binary"]
