"""Large tool output goes to an artifact; the model sees its head and tail (spec 4.6)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openflow.activities.tools.sandbox import Sandbox

SPILL_THRESHOLD_BYTES = 50_000
SHOWN_HEAD_BYTES = 20_000
SHOWN_TAIL_BYTES = 20_000

_SAFE_TOOL = re.compile(r"[^A-Za-z0-9_.]+")


@dataclass(frozen=True)
class Spilled:
    """Output after spilling: what the model sees and where the whole text went."""

    content: str
    artifact_id: str
    path: Path
    size_bytes: int
    truncation: dict[str, Any]


def _line_count(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def spill_if_large(artifacts_dir: Path, tool_name: str, content: str) -> Spilled | None:
    """Write `content` to `artifacts/{uuid}-{tool}.txt` when it is over 50,000 bytes."""
    data = content.encode("utf-8")
    if len(data) <= SPILL_THRESHOLD_BYTES:
        return None
    artifact_id = str(uuid.uuid4())
    path = artifacts_dir / f"{artifact_id}-{_SAFE_TOOL.sub('_', tool_name)}.txt"
    # Through handles on the run folder: a link planted where the run folder is shared with
    # the execution folder cannot send the output elsewhere.
    Sandbox(artifacts_dir.parent).write_bytes(f"{artifacts_dir.name}/{path.name}", data, tool_name)

    head = data[:SHOWN_HEAD_BYTES].decode("utf-8", errors="ignore")
    tail = data[-SHOWN_TAIL_BYTES:].decode("utf-8", errors="ignore")
    shown_bytes = len(head.encode("utf-8")) + len(tail.encode("utf-8"))
    elided_bytes = len(data) - shown_bytes
    total_lines = _line_count(content)
    shown_lines = _line_count(head) + _line_count(tail)
    elided_lines = max(total_lines - shown_lines, 0)
    marker = (
        f"\n[... {elided_bytes} bytes ({elided_lines} lines) elided; the full output "
        f"({len(data)} bytes, {total_lines} lines) is saved as artifact:{artifact_id} — "
        f"read it with read path='artifact:{artifact_id}:START-END' ...]\n"
    )
    truncation = {
        "strategy": "middle",
        "totalBytes": len(data),
        "shownBytes": shown_bytes,
        "elidedBytes": elided_bytes,
        "totalLines": total_lines,
        "shownLines": shown_lines,
        "elidedLines": elided_lines,
    }
    return Spilled(
        content=head + marker + tail,
        artifact_id=artifact_id,
        path=path,
        size_bytes=len(data),
        truncation=truncation,
    )


def find_artifact(artifacts_dir: Path, artifact_id: str) -> Path | None:
    """The file of an artifact id: `{id}-{tool}.txt`, `{id}-plan.md` or exactly `{id}`."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", artifact_id) or not artifacts_dir.is_dir():
        return None
    exact = artifacts_dir / artifact_id
    if exact.is_file():
        return exact
    prefix = f"{artifact_id}-"
    matches = sorted(
        p
        for p in artifacts_dir.glob(f"{prefix}*")
        if p.is_file() and "-" not in p.name[len(prefix) :] and not p.name.endswith(".tmp")
    )
    return matches[0] if matches else None


__all__ = [
    "SHOWN_HEAD_BYTES",
    "SHOWN_TAIL_BYTES",
    "SPILL_THRESHOLD_BYTES",
    "Spilled",
    "find_artifact",
    "spill_if_large",
]
