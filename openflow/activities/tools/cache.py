"""Per-run cache of read-only tool results, so repeated calls cost a line (spec 4.6)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from openflow.activities.tools.base import FileStamp, ReadRecord, ToolOutput, intent_free

CACHED_TOOLS = frozenset({"read", "search", "find", "ast_grep"})
_FIRST_LINE_CHARS = 200


@dataclass
class _Entry:
    content: str
    artifact_ids: tuple[str, ...]
    output_meta: dict[str, Any] | None
    reads: list[ReadRecord]
    stamp: FileStamp | None
    epoch: int
    origin_conversation: str
    origin_call_id: str
    seen: dict[str, str] = field(default_factory=dict)


def cache_key(tool: str, args: dict[str, Any]) -> str:
    """Tool name plus the canonical JSON of its arguments (intent fields excluded)."""
    canonical = json.dumps(intent_free(args), sort_keys=True, separators=(",", ":"), default=str)
    return f"{tool}\x1f{canonical}"


def _stamp_matches(stamp: FileStamp) -> bool:
    try:
        stat = os.stat(stamp.path)
    except OSError:
        return False
    return stat.st_mtime_ns == stamp.mtime_ns and stat.st_size == stamp.size


def _first_line_and_count(content: str) -> tuple[str, int]:
    lines = content.splitlines()
    first = lines[0] if lines else ""
    if len(first) > _FIRST_LINE_CHARS:
        first = first[:_FIRST_LINE_CHARS] + "…"
    return first, len(lines)


class ResultCache:
    """Results of `read`, `search`, `find` and `ast_grep` for one run.

    A single-file read stays valid while the file keeps its mtime and length; every other
    entry stays valid until the write epoch moves (any file mutation or bash call).
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._epoch = 0

    @property
    def epoch(self) -> int:
        """The current write epoch."""
        return self._epoch

    def bump(self) -> None:
        """Invalidate every epoch-checked entry: something may have changed the files."""
        self._epoch += 1

    def __len__(self) -> int:
        return len(self._entries)

    def _valid(self, entry: _Entry) -> bool:
        if entry.stamp is not None:
            return _stamp_matches(entry.stamp)
        return entry.epoch == self._epoch

    def lookup(
        self, tool: str, args: dict[str, Any], conversation: str, call_id: str
    ) -> ToolOutput | None:
        """The cached answer for this call: a stub in the same conversation, else the content."""
        if tool not in CACHED_TOOLS:
            return None
        key = cache_key(tool, args)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if not self._valid(entry):
            del self._entries[key]
            return None
        earlier = entry.seen.get(conversation)
        if earlier is not None:
            first, count = _first_line_and_count(entry.content)
            stub = (
                f"Unchanged: this result is identical to tool call {earlier} earlier in this "
                f"conversation ({count} lines; first line: {first!r}). Use that result instead "
                "of repeating the call."
            )
            meta = {"cache": {"hit": "same_conversation", "tool_call_id": earlier}}
            return ToolOutput(content=stub, output_meta=meta, reads=list(entry.reads))
        entry.seen[conversation] = call_id
        note = (
            f"Note: node {entry.origin_conversation!r} ran this exact call (tool call "
            f"{entry.origin_call_id}) and the result is unchanged since.\n\n"
        )
        meta = dict(entry.output_meta or {})
        meta["cache"] = {
            "hit": "other_conversation",
            "tool_call_id": entry.origin_call_id,
            "conversation": entry.origin_conversation,
        }
        return ToolOutput(
            content=note + entry.content,
            output_meta=meta,
            artifact_ids=entry.artifact_ids,
            reads=list(entry.reads),
        )

    def store(
        self,
        tool: str,
        args: dict[str, Any],
        conversation: str,
        call_id: str,
        output: ToolOutput,
    ) -> None:
        """Remember a successful, cacheable result as the model saw it."""
        if tool not in CACHED_TOOLS or output.is_error or not output.cacheable:
            return
        self._entries[cache_key(tool, args)] = _Entry(
            content=output.content,
            artifact_ids=output.artifact_ids,
            output_meta=output.output_meta,
            reads=list(output.reads),
            stamp=output.stamp,
            epoch=self._epoch,
            origin_conversation=conversation,
            origin_call_id=call_id,
            seen={conversation: call_id},
        )


__all__ = ["CACHED_TOOLS", "ResultCache", "cache_key"]
