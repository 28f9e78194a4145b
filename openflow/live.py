"""The live channel: what a run shows as it happens but never writes to history.

Token deltas and streaming tool output are too many and too large for Temporal history, and
nobody needs them after the fact. Activities `publish` them; followers (the CLI, the API's
event stream) `subscribe` by run id. Each event gets a per-run `live_seq`, so a follower that
reconnects asks for the events after the last one it saw. A run never waits on the channel and
never fails because of it: the durable run events (the `events` query) remain the record.

`FileLiveChannel` is the embedded default: one append-only JSONL file per run under the run
root, written under `flock` so publishers in several worker processes on one machine share a
sequence, capped by rotation, and tailed by polling (no inotify, works on any filesystem).

A cluster whose workers and API run on different machines backs the protocol with a broker.
With Redis streams, for instance: `publish` is `XADD openflow:live:<run_id> MAXLEN ~ 10000 *
data <json>` sent without awaiting a reply (a fire-and-forget task or a pipeline flushed by a
background thread), with `live_seq` taken from `INCR openflow:live-seq:<run_id>` inside the same
`MULTI` (or from the entry id's sequence part); `subscribe` is a loop of `XREAD BLOCK 1000
STREAMS openflow:live:<run_id> <last id>`, starting from the entry whose `live_seq` follows
`after`, with keys expiring a day after the run's last event. NATS JetStream or Kafka fit the
same shape (a subject or partition per run, the message sequence as `live_seq`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol, runtime_checkable

__all__ = ["FileLiveChannel", "LiveChannel", "SEQ_FIELD"]

logger = logging.getLogger(__name__)

SEQ_FIELD = "live_seq"
"""The key every subscribed event carries: its position in the run's live stream (from 1)."""

LIVE_FILE = "live.jsonl"
ROTATED_FILE = "live.1.jsonl"


@runtime_checkable
class LiveChannel(Protocol):
    """Per-run stream of ephemeral events between activities and followers."""

    def publish(self, run_id: str, event: dict[str, Any]) -> None:
        """Send one JSON-able event; returns at once and never raises."""
        ...

    def subscribe(self, run_id: str, after: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Yield the run's events with `live_seq` greater than `after`, then new ones as they come."""
        ...


class FileLiveChannel:
    """A live channel in files: `<root>/<run_id>/live.jsonl`, rotated to `live.1.jsonl`."""

    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int = 4 * 1024 * 1024,
        poll_interval: float = 0.05,
    ) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.poll_interval = poll_interval
        self._failed = False
        # run id -> (identity of the live file, last seq) as this process last wrote it
        self._tails: dict[str, tuple[tuple[int, int, int], int]] = {}

    def __repr__(self) -> str:
        return f"FileLiveChannel({str(self.root)!r})"

    def _folder(self, run_id: str) -> Path:
        if not run_id or run_id in (".", "..") or any(ch in run_id for ch in "/\\\0"):
            raise ValueError(f"run id {run_id!r} must be one path component")
        return self.root / run_id

    def publish(self, run_id: str, event: dict[str, Any]) -> None:
        """Append the event with the run's next `live_seq`; failures are logged once, never raised."""
        try:
            self._append(run_id, event)
        # A run must never fail because its followers cannot be fed.
        except Exception as exc:
            if not self._failed:
                self._failed = True
                logger.warning(
                    "live events for run %r (and later ones) are not delivered: %s: %s; "
                    "check that %s is writable",
                    run_id,
                    type(exc).__name__,
                    exc,
                    self.root,
                )

    def _append(self, run_id: str, event: dict[str, Any]) -> None:
        folder = self._folder(run_id)
        path = folder / LIVE_FILE
        while True:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except FileNotFoundError:
                folder.mkdir(parents=True, exist_ok=True)
                continue
            with os.fdopen(fd, "ab") as handle:
                fcntl.flock(fd, fcntl.LOCK_EX)
                stat = os.fstat(fd)
                try:
                    current = os.stat(path)
                except FileNotFoundError:
                    continue
                if current.st_ino != stat.st_ino:
                    continue  # rotated between open and lock: write to the new file
                seq = self._last_seq(run_id, folder, _identity(stat)) + 1
                line = json.dumps({**event, SEQ_FIELD: seq}, default=str, ensure_ascii=False)
                handle.write(line.encode() + b"\n")
                handle.flush()
                if len(self._tails) > 4096:
                    self._tails.clear()
                if os.fstat(fd).st_size >= self.max_bytes:
                    os.replace(path, folder / ROTATED_FILE)
                    self._tails.pop(run_id, None)
                else:
                    self._tails[run_id] = (_identity(os.fstat(fd)), seq)
                return

    def _last_seq(self, run_id: str, folder: Path, identity: tuple[int, int, int]) -> int:
        known = self._tails.get(run_id)
        if known is not None and known[0] == identity:
            return known[1]
        for name in (LIVE_FILE, ROTATED_FILE):
            seq = _last_seq_in(folder / name)
            if seq is not None:
                return seq
        return 0

    async def subscribe(
        self, run_id: str, after: int = 0, *, poll_interval: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield events after `after` from the files, then tail them until the caller stops."""
        folder = self._folder(run_id)
        interval = self.poll_interval if poll_interval is None else poll_interval
        cursor = after
        handle: BinaryIO | None = None
        pending = b""
        try:
            while True:
                if handle is None:
                    handle = _open_existing(folder / LIVE_FILE)
                    if handle is not None:
                        # Events older than the open file may sit in the rotated one.
                        for event in _read_events(folder / ROTATED_FILE):
                            if event[SEQ_FIELD] > cursor:
                                cursor = event[SEQ_FIELD]
                                yield event
                        pending = b""
                if handle is None:
                    await asyncio.sleep(interval)
                    continue
                chunk = handle.read()
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        parsed = _parse(line)
                        if parsed is not None and parsed[SEQ_FIELD] > cursor:
                            cursor = parsed[SEQ_FIELD]
                            yield parsed
                    continue
                if _rotated_away(folder / LIVE_FILE, handle):
                    handle.close()
                    handle = None
                    continue
                await asyncio.sleep(interval)
        finally:
            if handle is not None:
                handle.close()


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    """Inode, size and change time: equal only if nobody touched the file since."""
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _open_existing(path: Path) -> BinaryIO | None:
    try:
        return path.open("rb")
    except FileNotFoundError:
        return None


def _rotated_away(path: Path, handle: BinaryIO) -> bool:
    try:
        return os.stat(path).st_ino != os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def _parse(line: bytes) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        event = json.loads(line)
        if isinstance(event, dict) and isinstance(event.get(SEQ_FIELD), int):
            return event
    return None


def _read_events(path: Path) -> list[dict[str, Any]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    events = (_parse(line) for line in data.split(b"\n"))
    return [event for event in events if event is not None]


def _last_seq_in(path: Path) -> int | None:
    """The `live_seq` of the last complete event in a live file, reading only its tail."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            window = 4096
            while True:
                start = max(0, size - window)
                handle.seek(start)
                data = handle.read(size - start)
                lines = data.split(b"\n")
                complete = lines[1:] if start > 0 else lines
                for line in reversed(complete):
                    event = _parse(line)
                    if event is not None:
                        seq: int = event[SEQ_FIELD]
                        return seq
                if start == 0:
                    return None
                window *= 4
    except FileNotFoundError:
        return None
