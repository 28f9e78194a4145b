"""The run files every activity shares: the run store, the run's workspace, and what this
worker keeps of the files a run writes once (its profiles, catalog and folder)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from openflow import contracts as c
from openflow.activities.hops import Hops
from openflow.activities.lru import Lru
from openflow.activities.store import RunStore
from openflow.settings import runtime_settings

log = logging.getLogger(__name__)
T = TypeVar("T")

PROFILES_KEY = "profiles.json"
CATALOG_KEY = "catalog.json"
RUN_KEY = "run.json"


def require_folder(folder: Path, what: str = "the run's folder") -> None:
    """Fail the activity retryably when `folder` is not visible here (another worker may see it)."""
    if folder.is_dir():
        return
    from temporalio.exceptions import ApplicationError

    raise ApplicationError(
        f"{what} {str(folder)!r} is not visible on this worker; mount the shared workspace "
        "volume (or the project folder) at the same path on every worker",
        type=c.RUN_FOLDER_MISSING,
    )


class RunFiles:
    """The run store and the folders of runs, as one worker sees them."""

    def __init__(self, home: Path, store: RunStore, env: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.store = store
        self.env = dict(env if env is not None else os.environ)
        self._files: Lru[tuple[str, str], Any] = Lru(1024)
        #: What those files hold, by content: runs of one workflow store the same catalog and
        #: profiles, so a worker holding hundreds of them keeps one parsed copy.
        self._contents: Lru[bytes, Any] = Lru(64)
        self._batches: Lru[tuple[str, str], bytes] = Lru(64)
        self._written: Lru[tuple[str, str], tuple[tuple[int, int], bytes]] = Lru(256)
        self._writer = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="openflow-cache")
        self._later: collections.deque[tuple[str, str, bytes]] = collections.deque()
        self._workspaces: str | None = None
        #: Blocking calls of activities on a local store (`off_loop`).
        self.hops = Hops()

    # --- what the store can tell ----------------------------------------------------------

    def remote(self) -> bool:
        """Whether the store is read over the network (never on the event loop).

        Local stores can tell whether a log changed (`stamp`); remote ones cannot cheaply.
        """
        return (
            bool(getattr(self.store, "remote", False)) or getattr(self.store, "stamp", None) is None
        )

    def stamp(self, run_id: str, key: str) -> tuple[int, int] | None:
        """The log's current stamp, when the store keeps one."""
        stamp = getattr(self.store, "stamp", None)
        return stamp(run_id, key) if stamp is not None else None

    def left_stamp(self, run_id: str, key: str) -> tuple[int, int] | None:
        """The log's stamp as this worker's last append to it left it (a local store), else
        its current stamp (`stamp`)."""
        left = getattr(self.store, "left_stamp", None)
        found = left(run_id, key) if left is not None else None
        return found if found is not None else self.stamp(run_id, key)

    def appended_stamp(self, run_id: str, key: str) -> tuple[int, int] | None:
        """The log's stamp as this worker's last append left it (length, generation), when
        the store reports it (PostgreSQL)."""
        appended = getattr(self.store, "appended_stamp", None)
        return appended(run_id, key) if appended is not None else None

    def off_loop(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]:
        """`fn(*args)` in a thread: on a local store in a hop it shares with the calls made
        beside it (`Hops`: a turn's writes, a start's files); on a remote one in a thread of its
        own (`asyncio.to_thread`), so calls that wait on the network never wait on each other."""
        if self.remote():
            return asyncio.to_thread(fn, *args)
        return self.hops.run(fn, *args)

    # --- files a run writes once ----------------------------------------------------------

    def json_file(self, run_id: str, key: str) -> Any:
        """A JSON file a run writes once at its start (profiles, catalog), read once a worker;
        None when it is not there."""
        cached = self._files.get((run_id, key))
        if cached is not None:
            return cached
        try:
            data = self.shared_json(self.store.get_bytes(run_id, key))
        except FileNotFoundError:
            return None
        self._files.put((run_id, key), data)
        return data

    def keep_json(self, run_id: str, key: str, raw: bytes) -> None:
        """Keep a JSON file this worker just stored for the run (`json_file` then has it)."""
        self._files.put((run_id, key), self.shared_json(raw))

    def shared_json(self, raw: bytes) -> Any:
        """`raw` parsed, the same object for every run that stored the same bytes (callers
        read it and never change it)."""
        data = self._contents.get(raw)
        if data is None:
            data = json.loads(raw)
            self._contents.put(raw, data)
        return data

    def keep_batch(self, run_id: str, key: str, data: bytes) -> None:
        """Keep a batch's stored results: the node's next turn usually runs here and refers to
        them."""
        self._batches.put((run_id, key), data)

    def keep_written(self, run_id: str, key: str, data: bytes) -> None:
        """Keep what this worker just stored under `key` (a handoff: the next nodes' calls,
        usually made here, read it into their input), on a store that keeps stamps."""
        stamp = self.stamp(run_id, key)
        if stamp is not None:
            self._written.put((run_id, key), (stamp, data))

    def stored_bytes(self, run_id: str, key: str, *, kept: bool = True) -> bytes:
        """What is stored under `key`, from what this worker kept of what it stored (batches;
        handoffs still there as it left them) when it has it (and `kept`), else from the store.

        What was kept may be older than the store's (another worker's write within the
        stamp's resolution): callers check what they read against what they expect, and read
        again with `kept=False` when it is not."""
        if kept:
            found = self._batches.get((run_id, key))
            if found is not None:
                return found
            written = self._written.get((run_id, key))
            if written is not None and written[0] == self.stamp(run_id, key):
                return written[1]
        return self.store.get_bytes(run_id, key)

    def cache_blob(
        self, run_id: str, key: str, data: bytes, *, with_next_write: bool = False
    ) -> None:
        """Store a blob that only caches what history holds, off the turn's critical path.

        Unsynced and written in the background: if it is lost (a crash) or not there yet when a
        later call looks, that call reports its reference missing and the engine sends the items
        themselves. `with_next_write`: on a local store the blob waits for the next write this
        worker makes off the event loop (`write_cached`), which spares it a thread hop of its own.
        """
        if with_next_write and not self.remote():
            self._later.append((run_id, key, data))
            return
        self._writer.submit(self._put_cached, run_id, key, data)

    def write_cached(self) -> None:
        """Write the blobs waiting for a write, on this thread (never the event loop's)."""
        while self._later:
            try:
                run_id, key, data = self._later.popleft()
            except IndexError:  # another thread took the last one
                return
            self._put_cached(run_id, key, data)

    def flush_cached(self) -> None:
        """Write the blobs still waiting in the background (a turn that stored nothing)."""
        if self._later:
            self._writer.submit(self.write_cached)

    def _put_cached(self, run_id: str, key: str, data: bytes) -> None:
        try:
            self.store.put_bytes(run_id, key, data, sync=False)
        except Exception as exc:  # a cache write failing only costs a resend
            log.warning("could not store %s for run %s: %s", key, run_id, exc)

    # --- the run's folder -----------------------------------------------------------------

    def make_execution_dir(self, run_id: str, project_dir: str | None) -> str:
        """The folder the run's tools work in: its project, or its own workspace (created).

        The workspace is `$OPENFLOW_WORKSPACES/<run_id>` when that is set (a volume every worker
        mounts), else `$OPENFLOW_HOME/runs/<run_id>/workspace`. A folder this worker cannot see
        fails the activity retryably (another worker may see it); it is never made elsewhere.
        """
        if project_dir:
            require_folder(Path(project_dir))
            return project_dir
        root = self.workspaces()
        if not root:
            folder = self.default_workspace(run_id)
            folder.mkdir(parents=True, exist_ok=True)
            return str(folder)
        require_folder(Path(root), "OPENFLOW_WORKSPACES")
        folder = Path(root) / run_id
        folder.mkdir(exist_ok=True)
        return str(folder)

    def workspaces(self) -> str:
        """`OPENFLOW_WORKSPACES` as this worker's environment sets it ("" when not)."""
        if self._workspaces is None:
            self._workspaces = runtime_settings(self.env, only=("workspaces",)).workspaces or ""
        return self._workspaces

    def default_workspace(self, run_id: str) -> Path:
        return self.home / "runs" / run_id / "workspace"

    def execution_dir(self, run_id: str) -> str:
        """The folder `prepare_run` chose for the run (reads the store: may block)."""
        run = self.json_file(run_id, RUN_KEY)
        folder = run.get("execution_dir") if isinstance(run, dict) else None
        return str(folder or self.default_workspace(run_id))


__all__ = ["CATALOG_KEY", "PROFILES_KEY", "RUN_KEY", "RunFiles", "require_folder"]
