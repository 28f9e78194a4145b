"""The `revert_batch` activity: put the files one edit batch changed back as they were.

Every file is checked before any is written: each must still hold what the batch left (its
SHA-256, or absent where the batch deleted or moved it away), else nothing changes and the
error names the file. Before-contents come from the batch's snapshots: inline text, or the
run store's `snapshots/<sha256>`. A live run reverts in this activity; a finished one in the
calling process (`openflow.client.Runs.revert`), with the same `revert`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from temporalio import activity

from openflow import contracts as c
from openflow.activities.heartbeat import heartbeating
from openflow.activities.run_files import RunFiles
from openflow.activities.store import RunStore
from openflow.activities.tools.files import atomic_write
from openflow.engine.events import EditBatch, FileSnapshot


class RevertRefused(Exception):
    """Why a batch cannot be reverted; nothing was changed."""


class RevertBatchActivity:
    """Reverts edit batches in run execution folders, reading snapshots from the run store."""

    def __init__(self, files: RunFiles) -> None:
        self.files = files

    @activity.defn(name=c.ACTIVITY_REVERT)
    async def revert_batch(self, inp: c.RevertInput) -> c.RevertResult:
        return await heartbeating(asyncio.to_thread(revert, self.files.store, inp))


def revert(store: RunStore, inp: c.RevertInput) -> c.RevertResult:
    """Revert the batch, or say which file stops it (nothing is written then)."""
    return _Revert(store).run(inp)


class _Revert:
    def __init__(self, store: RunStore) -> None:
        self.store = store

    def run(self, inp: c.RevertInput) -> c.RevertResult:
        try:
            plan = [self._planned(inp, snap) for snap in inp.batch.snapshots]
        except RevertRefused as refused:
            return c.RevertResult(error=str(refused))
        for target, before, moved in plan:
            if moved is not None:
                moved.unlink(missing_ok=True)
            if before is None:
                target.unlink(missing_ok=True)
            else:
                atomic_write(target, before)
        return c.RevertResult(paths=[snap.path for snap in inp.batch.snapshots])

    def _planned(
        self, inp: c.RevertInput, snap: FileSnapshot
    ) -> tuple[Path, bytes | None, Path | None]:
        """The file to restore, what to put back (None: remove it) and a moved copy to remove."""
        batch = inp.batch
        if not snap.after_known:
            raise RevertRefused(
                f"edit batch {batch.batch_id!r} was recorded without what it wrote to "
                f"{snap.path!r}, so a later change cannot be ruled out; revert it by hand"
            )
        root = Path(inp.execution_dir)
        target = _inside(root, snap.path)
        moved = _inside(root, snap.rename_to) if snap.rename_to else None
        if (moved is not None or snap.after_sha256 is None) and target.exists():
            raise RevertRefused(
                f"{snap.path!r} exists again since edit batch {batch.batch_id!r}; revert refused"
            )
        if moved is not None or snap.after_sha256 is not None:
            left_at, shown = (moved, snap.rename_to) if moved is not None else (target, snap.path)
            if _digest(left_at) != snap.after_sha256:
                raise RevertRefused(
                    f"{shown!r} has changed since edit batch {batch.batch_id!r}; revert refused"
                )
        return target, self._before(inp, batch, snap), moved

    def _before(self, inp: c.RevertInput, batch: EditBatch, snap: FileSnapshot) -> bytes | None:
        if not snap.existed:
            return None
        if snap.content is not None:
            return snap.content.encode("utf-8")
        try:
            return self.store.get_bytes(inp.run_id, f"snapshots/{snap.sha256}")
        except FileNotFoundError:
            raise RevertRefused(
                f"the run store no longer holds what {snap.path!r} was before edit batch "
                f"{batch.batch_id!r}"
            ) from None


def _inside(root: Path, path: str) -> Path:
    """`path` in the execution folder; one that leads outside it is refused."""
    full = Path(os.path.realpath(root / path))
    real_root = Path(os.path.realpath(root))
    if full != real_root and real_root not in full.parents:
        raise RevertRefused(f"{path!r} is outside the run's folder")
    return full


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise RevertRefused(f"{str(path)!r} is a folder now") from None


__all__ = ["RevertBatchActivity", "RevertRefused", "revert"]
