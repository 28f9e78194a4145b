"""`apply_patch`: the `*** Begin Patch` format of OpenAI's apply_patch tool.

    *** Begin Patch
    *** Add File: path          every following line starts with '+'
    *** Update File: path
    *** Move to: new/path       optional, renames the updated file
    @@ optional context line    then ' ' context, '-' removed, '+' added lines
    *** End of File             optional, anchors the last chunk at the end
    *** Delete File: path
    *** End Patch

The whole patch is checked and computed in memory first; files are written only if every hunk
applies, so a failing patch changes nothing.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from openflow.activities.tools.base import (
    FILE_MUTATION_KEY,
    FileChange,
    FileOp,
    InvalidArgs,
    NotFound,
    ThreadTool,
    ToolContext,
    ToolOutput,
)
from openflow.activities.tools.files import decode, file_change, split_lines
from openflow.activities.tools.sandbox import NotARegularFile, Resolved, Sandbox

TOOL = "apply_patch"
BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, UPDATE, DELETE, MOVE = (
    "*** Add File: ",
    "*** Update File: ",
    "*** Delete File: ",
    "*** Move to: ",
)
EOF_MARK = "*** End of File"
_FORMAT_HINT = (
    "send '*** Begin Patch', then '*** Add File: p' / '*** Update File: p' (with @@ hunks) / "
    "'*** Delete File: p' sections, then '*** End Patch'"
)
_PATH_LINE = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+)$")


@dataclass
class Chunk:
    """One @@ hunk of an Update File section: ordered (' '|'-'|'+', text) lines."""

    context: str | None = None
    lines: list[tuple[str, str]] = field(default_factory=list)
    at_eof: bool = False

    @property
    def old(self) -> list[str]:
        """The lines the hunk expects (context and removed)."""
        return [text for kind, text in self.lines if kind != "+"]


@dataclass
class Section:
    """One file operation of a patch."""

    kind: str
    path: str
    move_to: str | None = None
    added: list[str] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)


def _bad(problem: str) -> InvalidArgs:
    return InvalidArgs(TOOL, problem, _FORMAT_HINT)


def parse_patch(text: str) -> list[Section]:
    """Parse patch text into sections, or raise InvalidArgs naming the offending line."""
    lines = [line.rstrip("\r") for line in text.strip().split("\n")]
    if not lines or lines[0].strip() != BEGIN:
        raise _bad(f"the patch must start with {BEGIN!r}")
    if lines[-1].strip() != END:
        raise _bad(f"the patch must end with {END!r}")
    body = lines[1:-1]
    sections: list[Section] = []
    i = 0
    while i < len(body):
        line = body[i]
        if line.startswith(ADD):
            section = Section("add", line[len(ADD) :].strip())
            i += 1
            while i < len(body) and not body[i].startswith("*** "):
                if not body[i].startswith("+"):
                    raise _bad(f"line {i + 2}: every line of an added file must start with '+'")
                section.added.append(body[i][1:])
                i += 1
        elif line.startswith(DELETE):
            section = Section("delete", line[len(DELETE) :].strip())
            i += 1
        elif line.startswith(UPDATE):
            section = Section("update", line[len(UPDATE) :].strip())
            i += 1
            if i < len(body) and body[i].startswith(MOVE):
                section.move_to = body[i][len(MOVE) :].strip()
                i += 1
            i = _parse_chunks(body, i, section)
            if not section.chunks:
                raise _bad(f"'*** Update File: {section.path}' has no @@ hunk")
        elif not line.strip():
            i += 1
            continue
        else:
            raise _bad(f"line {i + 2}: unexpected {line[:80]!r}")
        if not section.path:
            raise _bad(f"line {i + 1}: a file section needs a path")
        sections.append(section)
    if not sections:
        raise _bad("the patch contains no file sections")
    return sections


def _parse_chunks(body: list[str], i: int, section: Section) -> int:
    chunk: Chunk | None = None
    while i < len(body):
        line = body[i]
        if line.startswith("*** ") and line.strip() != EOF_MARK:
            break
        if line.startswith("@@"):
            chunk = Chunk(context=line[2:].strip() or None)
            section.chunks.append(chunk)
        elif line.strip() == EOF_MARK:
            if chunk is None:
                raise _bad(f"line {i + 2}: {EOF_MARK!r} before any hunk line")
            chunk.at_eof = True
        else:
            if chunk is None:
                chunk = Chunk()
                section.chunks.append(chunk)
            if line == "" or line[0] in " -+":
                chunk.lines.append((line[:1] or " ", line[1:]))
            else:
                raise _bad(
                    f"line {i + 2}: hunk lines start with ' ', '-' or '+', got {line[:80]!r}"
                )
        i += 1
    return i


_PUNCT = str.maketrans(
    {
        "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-",
        "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " ",
    }
)  # fmt: skip


def _loose(line: str) -> str:
    return unicodedata.normalize("NFC", line).translate(_PUNCT).strip()


def seek(lines: list[str], pattern: list[str], start: int, at_eof: bool) -> int | None:
    """First index >= start where `pattern` matches: exactly, then ignoring spacing/punctuation."""
    if not pattern:
        return start
    if len(pattern) > len(lines):
        return None
    last = len(lines) - len(pattern)
    candidates = ([last] if at_eof else []) + list(range(start, last + 1))
    for norm in (lambda s: s, str.rstrip, str.strip, _loose):
        wanted = [norm(p) for p in pattern]
        for index in candidates:
            if all(norm(lines[index + k]) == wanted[k] for k in range(len(pattern))):
                return index
    return None


def _replacement(chunk_lines: list[tuple[str, str]], matched: list[str]) -> list[str]:
    """New lines for a matched region; context lines keep the file's own text."""
    out: list[str] = []
    position = 0
    for kind, text in chunk_lines:
        if kind == "+":
            out.append(text)
            continue
        if kind == " ":
            out.append(matched[position])
        position += 1
    return out


def apply_chunks(text: str, chunks: list[Chunk], shown: str) -> str:
    """New file text after the update chunks, or InvalidArgs naming what did not match."""
    crlf = "\r\n" in text
    lines = split_lines(text)
    cursor = 0
    replacements: list[tuple[int, int, list[str]]] = []
    for chunk in chunks:
        if chunk.context is not None:
            found = seek(lines, [chunk.context], cursor, False)
            if found is None:
                raise InvalidArgs(
                    TOOL,
                    f"could not find the @@ context line {chunk.context!r} in {shown}",
                    "read the file again and copy the context line exactly; nothing was changed",
                )
            cursor = found + 1
        ops = chunk.lines
        old = chunk.old
        if not old:
            replacements.append((len(lines), 0, [t for _, t in ops]))
            continue
        found = seek(lines, old, cursor, chunk.at_eof)
        if found is None and old[-1] == "" and ops[-1] == (" ", ""):
            ops, old = ops[:-1], old[:-1]
            found = seek(lines, old, cursor, chunk.at_eof) if old else None
        if found is None:
            expected = "\n".join(old[:8])
            raise InvalidArgs(
                TOOL,
                f"the expected lines were not found in {shown}:\n{expected}",
                "read the file again and copy the context and '-' lines exactly; "
                "nothing was changed",
            )
        matched = lines[found : found + len(old)]
        replacements.append((found, len(old), _replacement(ops, matched)))
        cursor = found + len(old)
    for start, length, new in sorted(replacements, key=lambda r: r[0], reverse=True):
        lines[start : start + length] = new
    newline = "\r\n" if crlf else "\n"
    return newline.join(lines) + newline if lines else ""


def patch_paths(text: object) -> list[str]:
    """Every path a patch names (for lock keys), without parsing it strictly."""
    if not isinstance(text, str):
        return []
    return [m.group(1).strip() for m in map(_PATH_LINE.match, text.split("\n")) if m]


class ApplyPatchTool(ThreadTool):
    name = TOOL
    description = (
        "Add, update, rename or delete files with one patch in the apply_patch format: "
        "'*** Begin Patch', then '*** Add File: path' (lines prefixed '+'), '*** Update File: "
        "path' (optional '*** Move to: new'; '@@ context' hunks of ' ', '-', '+' lines) or "
        "'*** Delete File: path', then '*** End Patch'. All or nothing."
    )
    parameters = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The whole patch text."}},
        "required": ["input"],
    }
    mutates = True

    def lock_keys(self, ctx: ToolContext, args: dict[str, Any]) -> list[str]:
        sandbox = Sandbox(ctx.execution_dir)
        keys = {sandbox.lock_key(path) for path in patch_paths(args.get("input"))}
        return sorted(keys | {FILE_MUTATION_KEY})

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        sections = parse_patch(args["input"])
        sandbox = Sandbox(ctx.execution_dir)
        targets: dict[str, Resolved] = {}
        for section in sections:
            for raw in (section.path, section.move_to):
                if raw is not None and raw not in targets:
                    targets[raw] = sandbox.resolve(raw, TOOL)
        for resolved in targets.values():
            if resolved.is_dir:
                raise InvalidArgs(TOOL, f"{resolved.rel!r} is a directory", "patch files only")
        for section in sections:
            if section.kind == "update":
                sandbox.check_writable(targets[section.path].rel, TOOL)

        state: dict[str, bytes | None] = {}
        original: dict[str, bytes | None] = {}

        def current(resolved: Resolved) -> bytes | None:
            if resolved.rel not in state:
                try:
                    original[resolved.rel] = sandbox.read_bytes(resolved.rel)[0]
                except FileNotFoundError:
                    original[resolved.rel] = None
                except (IsADirectoryError, NotARegularFile):
                    raise InvalidArgs(
                        TOOL, f"{resolved.rel!r} is not a regular file", "patch files only"
                    ) from None
                state[resolved.rel] = original[resolved.rel]
            return state[resolved.rel]

        summary: list[str] = []
        changes: list[FileChange] = []
        for section in sections:
            source = targets[section.path]
            before = current(source)
            if section.kind == "add":
                after = ("\n".join(section.added) + "\n").encode("utf-8")
                state[source.rel] = after
                op: FileOp = "create" if before is None else "update"
                changes.append(file_change(source.rel, op, before, after))
                summary.append(f"A {source.rel}")
                continue
            if before is None:
                raise NotFound(
                    f"{source.rel!r} does not exist",
                    "use '*** Add File:' to create it; nothing was changed",
                )
            if section.kind == "delete":
                state[source.rel] = None
                changes.append(file_change(source.rel, "delete", before, None))
                summary.append(f"D {source.rel}")
                continue
            after = apply_chunks(decode(before), section.chunks, source.rel).encode("utf-8")
            if section.move_to is not None and targets[section.move_to].rel != source.rel:
                dest = targets[section.move_to]
                if current(dest) is not None:
                    raise InvalidArgs(
                        TOOL,
                        f"cannot move {source.rel} to {dest.rel}: the destination exists",
                        "delete or update the destination instead; nothing was changed",
                    )
                state[source.rel] = None
                state[dest.rel] = after
                changes.append(file_change(source.rel, "rename", before, after, dest.rel))
                summary.append(f"R {source.rel} -> {dest.rel}")
            else:
                state[source.rel] = after
                changes.append(file_change(source.rel, "update", before, after))
                summary.append(f"M {source.rel}")

        for rel, data in state.items():
            if data == original[rel]:
                continue
            if data is None:
                sandbox.unlink(rel)
            else:
                sandbox.write_bytes(rel, data, TOOL)
        text = "Success. Updated the following files:\n" + "\n".join(summary)
        return ToolOutput(content=text, changes=changes)


__all__ = ["ApplyPatchTool", "Chunk", "Section", "apply_chunks", "parse_patch", "patch_paths"]
