"""A run's tool-visible files on a worker whose run store is not on its disk.

Tools read and write a run's files as paths: spilled outputs and plan drafts under
`artifacts/`, handoffs under `handoffs/`, before-snapshots under `snapshots/`. With a remote
store a batch runs in a local copy outside `$OPENFLOW_HOME`: before it, what changed in the
store under `artifacts/` and `handoffs/` is copied in; after it, every file the batch added or
changed is put back, so the store stays the only record and any worker can run the next batch.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["PULLED_PREFIXES", "RunStaging"]

PULLED_PREFIXES = ("artifacts/", "handoffs/")
_KEEP_RUNS = 64


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class RunStaging:
    """Per-run local copies of store files, kept for the last runs this worker saw."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="openflow-"))
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, tuple[str, int, int]]] = {}

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def folder(self, run_id: str) -> Path:
        return self.root / run_id

    def _known(self, run_id: str) -> dict[str, tuple[str, int, int]]:
        with self._lock:
            known = self._runs.pop(run_id, None)
            if known is None:
                known = {}
                while len(self._runs) >= _KEEP_RUNS:
                    old = next(iter(self._runs))
                    self._runs.pop(old)
                    shutil.rmtree(self.folder(old), ignore_errors=True)
            self._runs[run_id] = known
            return known

    def pull(self, store: Any, run_id: str) -> dict[str, tuple[int, int]]:
        """Copy in what the store holds under PULLED_PREFIXES; return the files' stamps."""
        folder = self.folder(run_id)
        folder.mkdir(parents=True, exist_ok=True)
        known = self._known(run_id)
        for prefix in PULLED_PREFIXES:
            listed = getattr(store, "digests", None)
            digests = (
                listed(run_id, prefix)
                if listed is not None
                else {key: "" for key in store.list(run_id, prefix)}
            )
            for key, digest in digests.items():
                path = folder / key
                seen = known.get(key)
                stat = _stat(path)
                if seen is not None and stat is not None and seen == (digest, *stat):
                    continue
                data = store.get_bytes(run_id, key)
                path.parent.mkdir(parents=True, exist_ok=True)
                temp = path.with_name(f".pull-{path.name}")
                temp.write_bytes(data)
                os.replace(temp, path)
                after = _stat(path)
                if after is not None:
                    known[key] = (_md5(data), *after)
        return self._stamps(folder)

    def local(self, run_id: str) -> dict[str, tuple[int, int]]:
        """The stamps of the run's local copy as it is, for a batch that reads none of it."""
        folder = self.folder(run_id)
        folder.mkdir(parents=True, exist_ok=True)
        self._known(run_id)
        return self._stamps(folder)

    def changed(self, run_id: str, before: dict[str, tuple[int, int]]) -> list[str]:
        """The keys of the files added or changed since `before` (a scan of the local copy)."""
        stamps = self._stamps(self.folder(run_id))
        return sorted(key for key, stamp in stamps.items() if before.get(key) != stamp)

    def push(self, store: Any, run_id: str, keys: list[str]) -> None:
        """Put the local files under `keys` into the store."""
        folder = self.folder(run_id)
        known = self._known(run_id)
        for key in keys:
            path = folder / key
            data = path.read_bytes()
            store.put_bytes(run_id, key, data)
            stamp = _stat(path)
            if stamp is not None:
                known[key] = (_md5(data), *stamp)

    @staticmethod
    def _stamps(folder: Path) -> dict[str, tuple[int, int]]:
        stamps: dict[str, tuple[int, int]] = {}
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                if name.startswith((".pull-", ".tmp-")) or name.endswith(".tmp"):
                    continue
                path = Path(dirpath) / name
                stat = _stat(path)
                if stat is not None:
                    stamps[path.relative_to(folder).as_posix()] = stat
        return stamps


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns
