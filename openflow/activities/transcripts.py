"""A conversation's transcript in the run store, as model turns append to and read it.

Lines parsed once are not parsed again, and a log this worker left unchanged is not read again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from openflow.activities.lru import Lru
from openflow.activities.run_files import RunFiles
from openflow.activities.store import KeyNotFound, LogConflict
from openflow.engine.state import StoredItemRef
from openflow.engine.transcript import TranscriptItem

_ITEM: TypeAdapter[TranscriptItem] = TypeAdapter(TranscriptItem)

#: Lines, their items, and the log's stamp when they were read.
_Seen = tuple[list[str], list[TranscriptItem], tuple[int, int] | None]


def line(data: Any) -> str:
    """One transcript line: compact, keys sorted."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class Unwritten:
    """A turn's delta not yet in its log: the log's first `base` lines (and their items) as
    they are, and the lines (and items) that go after them, with the reply (`write_after`)."""

    base: int
    kept_lines: list[str]
    kept_items: list[TranscriptItem]
    lines: list[str]
    items: list[TranscriptItem]

    @property
    def persisted(self) -> int:
        """The log's length once the delta is written."""
        return self.base + len(self.lines)


class Transcripts:
    """The transcripts of runs, with what this worker last read of each."""

    def __init__(self, files: RunFiles) -> None:
        self.files = files
        self._seen: Lru[tuple[str, str], _Seen] = Lru(64)

    def delta_lines(self, run_id: str, items: Any, key: str) -> list[str]:
        """The transcript lines of a turn's delta items (a reference with an empty store key
        names lines of the transcript `key` itself, read before this turn appends)."""
        blobs: dict[str, list[Any]] = {}
        return [text for item in items for text in self._resolve(run_id, item, blobs, key)]

    def _resolve(
        self, run_id: str, item: Any, blobs: dict[str, list[Any]], transcript_key: str
    ) -> list[str]:
        """The lines of one delta item: itself, or the stored items it refers to."""
        store = self.files.store
        if not isinstance(item, StoredItemRef):
            return [line(item.model_dump(mode="json"))]
        if not item.store_key:
            own = blobs.get("")
            if own is None:
                own = blobs[""] = store.read_lines(run_id, transcript_key)
            if item.index < 0 or item.index + item.count > len(own):
                raise KeyNotFound(f"{transcript_key} holds fewer lines than referred to")
            return list(own[item.index : item.index + item.count])
        stored = blobs.get(item.store_key)
        if stored is None:
            try:
                stored = json.loads(self.files.stored_bytes(run_id, item.store_key))
            except ValueError as exc:
                raise KeyNotFound(f"{item.store_key} cannot be read: {exc}") from exc
            if not isinstance(stored, list):
                raise KeyNotFound(f"{item.store_key} is not a stored item list")
            blobs[item.store_key] = stored
        if item.index < 0 or item.index + item.count > len(stored):
            raise KeyNotFound(f"{item.store_key} holds fewer items than referred to")
        return [line(x) for x in stored[item.index : item.index + item.count]]

    def read(self, run_id: str, key: str) -> list[TranscriptItem]:
        """The stored transcript's items."""
        stamp = self.files.stamp(run_id, key)
        seen = self._seen.get((run_id, key))
        if seen is not None and stamp is not None and seen[2] == stamp:
            return list(seen[1])
        lines = self.files.store.read_lines(run_id, key)
        seen_lines, seen_items = (seen[0], seen[1]) if seen is not None else ([], [])
        items: list[TranscriptItem] = []
        for i, text in enumerate(lines):
            if i < len(seen_lines) and seen_lines[i] == text:
                items.append(seen_items[i])
            else:
                items.append(_ITEM.validate_json(text))
        self._seen.put((run_id, key), (lines, items, stamp))
        return items

    def appended(
        self, run_id: str, key: str, base: int, lines: list[str]
    ) -> list[TranscriptItem] | None:
        """The transcript as the append just made it, when that is known without reading it.

        A store whose appends report the log's generation (PostgreSQL) tells whether anyone
        else wrote since this worker last saw the log; a log has one writer at a time.
        """
        after = self.files.appended_stamp(run_id, key)
        if after is None:
            return self._first_lines(run_id, key, base, lines)
        seen = self._seen.get((run_id, key))
        if base == 0:
            kept_lines: list[str] = []
            kept_items: list[TranscriptItem] = []
        elif seen is None or seen[2] is None or len(seen[0]) < base:
            return None
        elif after[1] == seen[2][1] + (1 if lines else 0):
            # Only this append changed the log since (an append of nothing changes nothing).
            kept_lines, kept_items = seen[0][:base], seen[1][:base]
        else:
            return None
        items = [*kept_items, *(_ITEM.validate_json(text) for text in lines)]
        all_lines = [*kept_lines, *lines]
        if len(all_lines) != after[0]:
            return None
        self._seen.put((run_id, key), (all_lines, items, after))
        return list(items)

    def _first_lines(
        self, run_id: str, key: str, base: int, lines: list[str]
    ) -> list[TranscriptItem] | None:
        """On a store that keeps stamps (the local disk), a log appended to from its start
        holds just the lines appended (a log has one writer at a time): no need to read it."""
        if base != 0 or self.files.remote():
            return None
        stamp = self.files.stamp(run_id, key)
        if stamp is None:
            return None
        items = [_ITEM.validate_json(text) for text in lines]
        self._seen.put((run_id, key), (list(lines), items, stamp))
        return list(items)

    def unwritten(self, run_id: str, key: str, base: int, lines: list[str]) -> Unwritten:
        """The transcript as appending `lines` after its first `base` lines will make it, read
        (when this worker does not know the log as it is) but not written: the turn writes
        the delta with its reply (`write_after`). A log of fewer than `base` lines is a
        `LogConflict`, as the append would be."""
        if base == 0:
            kept_lines: list[str] = []
            kept_items: list[TranscriptItem] = []
        else:
            stamp = self.files.stamp(run_id, key)
            seen = self._seen.get((run_id, key))
            if seen is None or stamp is None or seen[2] != stamp:
                self.read(run_id, key)
                seen = self._seen.get((run_id, key))
            held = len(seen[0]) if seen is not None else 0
            if seen is None or held < base:
                raise LogConflict(
                    f"log {run_id}/{key} holds {held} lines but the caller expected {base}; "
                    "the run store lost data: resume the run from a checkpoint whose files exist"
                )
            kept_lines, kept_items = seen[0][:base], seen[1][:base]
        items = [_ITEM.validate_json(text) for text in lines]
        return Unwritten(base, kept_lines, kept_items, list(lines), items)

    def write_after(
        self, run_id: str, key: str, delta: Unwritten, items: list[TranscriptItem]
    ) -> None:
        """Write a turn's delta and then `items` (its reply) in one append (synced), and
        remember the log as it left it."""
        lines = [line(item.model_dump(mode="json")) for item in items]
        self.files.store.append_lines(run_id, key, [*delta.lines, *lines], expected_len=delta.base)
        self._seen.put(
            (run_id, key),
            (
                [*delta.kept_lines, *delta.lines, *lines],
                [*delta.kept_items, *delta.items, *items],
                # As the append left the log, under its lock (no stat after it).
                self.files.left_stamp(run_id, key),
            ),
        )

    def append(self, run_id: str, key: str, persisted: int, items: list[TranscriptItem]) -> None:
        """Append `items` after the first `persisted` lines (synced), remembering them when
        this worker saw the lines before."""
        lines = [line(item.model_dump(mode="json")) for item in items]
        self.files.store.append_lines(run_id, key, lines, expected_len=persisted)
        seen = self._seen.get((run_id, key))
        if seen is not None and len(seen[0]) == persisted:
            stamp = self.files.appended_stamp(run_id, key)
            stamp = stamp if stamp is not None else self.files.stamp(run_id, key)
            self._seen.put((run_id, key), ([*seen[0], *lines], [*seen[1], *items], stamp))


__all__ = ["Transcripts", "Unwritten", "line"]
