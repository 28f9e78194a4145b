"""A run's latest snapshot, held compactly while the run waits for a person.

A paused run may wait for months in a worker's cache, and its snapshot is many small pydantic
objects (each with its own field dict and set of fields set): several times their bytes. While
nothing is in flight, the run holds the snapshot as compressed bytes instead, with what runs of
one workflow share (the workflow, its callable agents, a plan's evidence packet) kept by
reference, and reads it back when a step, a handler or a query next needs it.

The bytes are a pickle: they never leave the worker's memory, and they read back exactly the
objects held (the snapshot's JSON leaves out what its legacy flattened form has no field for,
such as a budget pause's mark), so the engine's next step plans what it would have.
"""

from __future__ import annotations

import io
import pickle
import zlib
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from openflow.engine.state import RunSnapshot

#: Fields kept by reference, not copied into the bytes (the engine never changes them in place).
SHARED_FIELDS = ("workflow", "agents", "packet")


class _Pickler(pickle.Pickler):
    def __init__(self, out: io.BytesIO, shared: tuple[Any, ...]) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self._ids = {id(value): i for i, value in enumerate(shared) if value is not None}

    def persistent_id(self, obj: Any) -> int | None:
        return self._ids.get(id(obj))


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, shared: tuple[Any, ...]) -> None:
        super().__init__(io.BytesIO(data))
        self._shared = shared

    def persistent_load(self, pid: Any) -> Any:
        return self._shared[pid]


class HeldSnapshot:
    """The run's snapshot, or its compressed bytes and its shared parts while the run is idle."""

    __slots__ = ("_packed", "_shared", "_snapshot", "finished")

    def __init__(self) -> None:
        self._snapshot: RunSnapshot | None = None
        self._packed: bytes | None = None
        self._shared: tuple[Any, ...] = ()
        #: Whether the run has ended (read without unpacking the snapshot).
        self.finished = False

    def get(self) -> RunSnapshot | None:
        """The snapshot (read back and kept, if it was packed)."""
        if self._packed is not None:
            snapshot = _Unpickler(zlib.decompress(self._packed), self._shared).load()
            assert isinstance(snapshot, RunSnapshot)
            self._snapshot, self._packed, self._shared = snapshot, None, ()
        return self._snapshot

    def set(self, snapshot: RunSnapshot | None) -> None:
        self._snapshot, self._packed, self._shared = snapshot, None, ()
        self.finished = snapshot is not None and snapshot.finished

    def pack(self) -> None:
        """Hold the snapshot as compressed bytes until it is next needed."""
        snapshot = self._snapshot
        if snapshot is None:
            return
        shared = tuple(getattr(snapshot, name) for name in SHARED_FIELDS)
        out = io.BytesIO()
        _Pickler(out, shared).dump(snapshot)
        self._packed = zlib.compress(out.getvalue(), 1)
        self._shared = shared
        self._snapshot = None

    @property
    def packed(self) -> bool:
        return self._packed is not None


__all__ = ["SHARED_FIELDS", "HeldSnapshot"]
