"""File helpers shared by the file tools: atomic writes, text decoding, diff summaries, outlines."""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import uuid
from pathlib import Path

from openflow.activities.tools.base import FileChange, FileOp, FileStamp, Snapshot

BINARY_SNIFF_BYTES = 8192
_DIFF_LINE_LIMIT = 20_000
_SNIPPET_CHARS = 80

_OUTLINE = re.compile(
    r"^\s*(?:export\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?"
    r"(def|class|fn|struct|enum|trait|impl|interface|type|function|func|module)\s+"
    r"([A-Za-z_$][\w$]*)"
)
_HEADING = re.compile(r"^(#{1,3})\s+(\S.*)$")
_OUTLINE_ITEMS = 12


def is_binary(data: bytes) -> bool:
    """Whether bytes look like a binary file (a NUL in the first 8 KiB)."""
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def decode(data: bytes) -> str:
    """Text of a file; undecodable bytes become U+FFFD rather than failing the call."""
    return data.decode("utf-8", errors="replace")


def split_lines(text: str) -> list[str]:
    """Lines as editors number them: split on LF, drop a trailing CR, no phantom last line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one rename, keeping an existing file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.openflow-{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_bytes_or_none(path: Path) -> bytes | None:
    """A file's bytes, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def stamp_of(path: Path) -> FileStamp:
    """mtime and size of a file, for cache validity."""
    stat = path.stat()
    return FileStamp(path=os.fspath(path), mtime_ns=stat.st_mtime_ns, size=stat.st_size)


def diff_summary(before: bytes | None, after: bytes | None) -> str | None:
    """`+added -removed|first changed line`, e.g. `+1|fn main()`; None when nothing changed."""
    old = split_lines(decode(before)) if before else []
    new = split_lines(decode(after)) if after else []
    if old == new and (before or b"") == (after or b""):
        return None
    if len(old) > _DIFF_LINE_LIMIT or len(new) > _DIFF_LINE_LIMIT:
        return f"{len(before or b'')} -> {len(after or b'')} bytes"
    added = removed = 0
    snippet = ""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        removed += i2 - i1
        added += j2 - j1
        if not snippet:
            changed = new[j1:j2] or old[i1:i2]
            snippet = next((line.strip() for line in changed if line.strip()), "")
    parts = [f"+{added}"] if added else []
    if removed:
        parts.append(f"-{removed}")
    summary = " ".join(parts) or "~0"
    if snippet:
        summary += "|" + snippet[:_SNIPPET_CHARS]
    return summary


def file_change(
    rel: str,
    op: FileOp,
    before: bytes | None,
    after: bytes | None,
    rename_to: str | None = None,
) -> FileChange:
    """A FileChange record with its before-snapshot and diff summary."""
    return FileChange(
        path=rel,
        op=op,
        before=Snapshot(path=rel, content=before),
        rename_to=rename_to,
        diff_summary=diff_summary(before, after),
        after_sha256=hashlib.sha256(after).hexdigest() if after is not None else None,
    )


def outline(text: str, path: str) -> str | None:
    """A short list of a file's definitions or headings, for `input.reads`."""
    items: list[str] = []
    markdown = path.lower().endswith((".md", ".markdown"))
    for line in split_lines(text):
        if markdown:
            heading = _HEADING.match(line)
            if heading:
                items.append(heading.group(2).strip()[:_SNIPPET_CHARS])
        else:
            match = _OUTLINE.match(line)
            if match:
                items.append(f"{match.group(1)} {match.group(2)}")
        if len(items) >= _OUTLINE_ITEMS:
            break
    return ", ".join(items) or None


__all__ = [
    "atomic_write",
    "decode",
    "diff_summary",
    "file_change",
    "is_binary",
    "outline",
    "read_bytes_or_none",
    "split_lines",
    "stamp_of",
]
