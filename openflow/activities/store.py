"""The run store: the bytes a run keeps outside Temporal history.

Transcripts (append-only JSONL), raw model replies, tool batch results, request headers,
handoffs and spilled artifacts live here, keyed by run id and a relative path such as
`transcripts/plan.jsonl` (layout in docs/architecture.md). History carries only references,
so nothing sent per turn grows with the conversation.

`FileRunStore` keeps a run under `$OPENFLOW_HOME/runs/<run_id>/`; `S3RunStore` keeps it under
`s3://<bucket>/<prefix>/<run_id>/` for workers that share no disk. Both write whole objects
atomically, and `append_lines` is idempotent under activity retries.

Errors::

    StoreError          base of every run store error
    ├── InvalidKey      a run id or key that is not a safe relative path (also a ValueError)
    ├── KeyNotFound     nothing stored under that key (also a FileNotFoundError)
    └── LogConflict     an append that expects more lines than the log holds
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import functools
import itertools
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, runtime_checkable

from botocore.exceptions import ClientError

from openflow.paths import openflow_home

__all__ = [
    "FileRunStore",
    "InvalidKey",
    "KeyNotFound",
    "LogConflict",
    "RunStore",
    "S3RunStore",
    "StoreError",
    "default_runs_root",
    "validate_key",
    "validate_run_id",
]

_TEMP_MARK = ".tmp-"


class StoreError(Exception):
    """Base of every run store error."""


class InvalidKey(StoreError, ValueError):
    """A run id or key that could escape the run's folder or is not portable."""


class KeyNotFound(StoreError, FileNotFoundError):
    """Nothing is stored under that run id and key."""


class LogConflict(StoreError):
    """An append expects the log to hold more lines than it does (the log lost lines)."""


@runtime_checkable
class RunStore(Protocol):
    """Where a run's files live; every method is safe to retry with the same arguments."""

    def put_bytes(self, run_id: str, key: str, data: bytes, *, sync: bool = True) -> None:
        """Store `data` under `key`, replacing what was there, atomically.

        `sync=False` is for blobs the run can do without (a cache of what history holds): the
        write may be lost in a machine crash, never torn.
        """
        ...

    def get_bytes(self, run_id: str, key: str) -> bytes:
        """Return what is stored under `key`; raise `KeyNotFound` when nothing is."""
        ...

    def exists(self, run_id: str, key: str) -> bool:
        """Whether something is stored under `key`."""
        ...

    def append_lines(
        self, run_id: str, key: str, lines: Iterable[str | bytes], expected_len: int
    ) -> int:
        """Append lines to the log at `key` after its first `expected_len`; return its length."""
        ...

    def read_lines(self, run_id: str, key: str, start: int = 0) -> builtins.list[str]:
        """Return the log's lines from index `start` on (a missing log is empty)."""
        ...

    def list(self, run_id: str, prefix: str = "") -> builtins.list[str]:
        """Return the sorted keys of the run that start with `prefix`."""
        ...

    def run_dir(self, run_id: str) -> Path | None:
        """The run's local folder, or None when the store is not on this machine's disk."""
        ...


def validate_run_id(run_id: str) -> str:
    """Return `run_id` if it is one safe path component, else raise `InvalidKey`."""
    if (
        not run_id
        or run_id in (".", "..")
        or any(ch in run_id for ch in "/\\\0")
        or run_id.startswith(_TEMP_MARK)
    ):
        raise InvalidKey(
            f"run id {run_id!r} must be one path component (no '/', '\\\\', '..' or NUL)"
        )
    return run_id


def validate_key(key: str) -> str:
    """Return `key` as a normalised relative POSIX path, else raise `InvalidKey`."""
    return _checked_key(key)


@functools.lru_cache(maxsize=4096)
def _checked_key(key: str) -> str:
    """`validate_key`, once a key (runs name the same few keys)."""
    if not key or "\\" in key or "\0" in key or key.startswith("/"):
        raise InvalidKey(
            f"store key {key!r} must be a non-empty relative path like 'handoffs/plan/HANDOFF.md'"
        )
    parts = key.split("/")
    if any(part in ("", ".", "..") or part.startswith(_TEMP_MARK) for part in parts):
        raise InvalidKey(
            f"store key {key!r} must not contain empty, '.' or '..' segments; "
            "use a path inside the run like 'artifacts/out.txt'"
        )
    return str(PurePosixPath(*parts))


def _encode_lines(lines: Iterable[str | bytes]) -> bytes:
    chunks: list[bytes] = []
    for line in lines:
        data = line.encode() if isinstance(line, str) else bytes(line)
        if b"\n" in data or b"\r" in data:
            raise InvalidKey("a log line must not contain a line break; serialise it as JSON")
        chunks.append(data + b"\n")
    return b"".join(chunks)


def _complete_lines(data: bytes) -> list[bytes]:
    """The newline-terminated lines of `data`; a torn last line from a crash is not a line."""
    end = data.rfind(b"\n")
    return [] if end < 0 else data[:end].split(b"\n")


_KNOWN_LOGS = 1024
_KNOWN_PATHS = 4096


def _sync(fd: int) -> None:
    """Flush a file's data, and the metadata needed to read it back, to the disk."""
    # fdatasync skips what reading does not need (times): about half the cost of fsync here.
    getattr(os, "fdatasync", os.fsync)(fd)


def _create(temp: str, folder: str) -> int:
    """A new file to write, its folder made on its first write only."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        return os.open(temp, flags, 0o666)
    except FileNotFoundError:
        os.makedirs(folder, exist_ok=True)
        return os.open(temp, flags, 0o666)


#: What names this process's temporary files (`FileRunStore.put_bytes`); a forked child names
#: its own (`_renamed_after_fork`).
_TEMP_PREFIX = f"{os.getpid()}-{uuid.uuid4().hex[:8]}-"
_temp_count = itertools.count()


def _renamed_after_fork() -> None:
    global _TEMP_PREFIX
    _TEMP_PREFIX = f"{os.getpid()}-{uuid.uuid4().hex[:8]}-"


os.register_at_fork(after_in_child=_renamed_after_fork)


def _write_all(fd: int, data: bytes, at: int | None = None) -> None:
    """Write all of `data` (at offset `at`, or where the file is)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view) if at is None else os.pwrite(fd, view, at)
        view = view[written:]
        if at is not None:
            at += written


def _read(path: str) -> bytes:
    """The whole file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        chunks = [os.read(fd, size)] if size else []
        while True:  # a file grown since, or one whose size says nothing (procfs)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _merge_log(data: bytes, new: bytes, expected_len: int, where: str) -> tuple[bytes, int]:
    lines = _complete_lines(data)
    if len(lines) < expected_len:
        raise LogConflict(
            f"log {where} holds {len(lines)} lines but the caller expected {expected_len}; "
            "the run store lost data: resume the run from a checkpoint whose files exist"
        )
    kept = b"".join(line + b"\n" for line in lines[:expected_len])
    return kept + new, expected_len + new.count(b"\n")


def default_runs_root() -> Path:
    """Where run folders live by default: `$OPENFLOW_HOME/runs`."""
    return openflow_home() / "runs"


class FileRunStore:
    """A run store on the local disk: `<root>/<run_id>/<key>`.

    Its calls work on file descriptors and path strings (`os`), not file objects and `Path`s:
    a turn makes a few of them, and that is most of what they cost besides the disk.
    """

    def __init__(self, root: Path | None = None, *, fsync: bool = True) -> None:
        self.root = Path(root) if root is not None else default_runs_root()
        self.fsync = fsync
        self._root = str(self.root)
        # Logs this store appended to: (size, change time, lines) as it left each of them.
        self._logs: dict[str, tuple[int, int, int]] = {}
        #: Each checked (run id, key)'s path: a turn names the same few keys again and again.
        self._paths: dict[tuple[str, str], str] = {}

    def __repr__(self) -> str:
        return f"FileRunStore({str(self.root)!r})"

    def _path(self, run_id: str, key: str) -> str:
        path = self._paths.get((run_id, key))
        if path is None:
            path = f"{self._root}/{validate_run_id(run_id)}/{validate_key(key)}"
            if len(self._paths) >= _KNOWN_PATHS:
                self._paths.clear()
            self._paths[(run_id, key)] = path
        return path

    def run_dir(self, run_id: str) -> Path:
        """The run's folder, created if needed."""
        path = self.root / validate_run_id(run_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def put_bytes(self, run_id: str, key: str, data: bytes, *, sync: bool = True) -> None:
        """Write `data` to a temporary file beside the target, then rename it into place."""
        path = self._path(run_id, key)
        folder, _, name = path.rpartition("/")
        # Named by this process and a count (no random bytes to ask the kernel for); a name a
        # dead process of the same id left is never reused (`_create` makes a new file only).
        temp = f"{folder}/{_TEMP_MARK}{name}.{_TEMP_PREFIX}{next(_temp_count)}"
        try:
            try:
                fd = _create(temp, folder)
            except FileExistsError:
                temp = f"{folder}/{_TEMP_MARK}{name}.{uuid.uuid4().hex}"
                fd = _create(temp, folder)
            try:
                _write_all(fd, data)
                if self.fsync and sync:
                    _sync(fd)
            finally:
                os.close(fd)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def get_bytes(self, run_id: str, key: str) -> bytes:
        """Read the whole file stored under `key`."""
        try:
            return _read(self._path(run_id, key))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise KeyNotFound(f"run {run_id!r} has nothing stored at {key!r}") from exc

    def exists(self, run_id: str, key: str) -> bool:
        """Whether a file is stored under `key`."""
        return os.path.isfile(self._path(run_id, key))

    @staticmethod
    @contextlib.contextmanager
    def _locked(path: str) -> Iterator[int]:
        """Open the log exclusively: `flock` holds off other threads and other processes."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            # Closing the log's only descriptor lets the lock go.
            os.close(fd)

    def append_lines(
        self, run_id: str, key: str, lines: Iterable[str | bytes], expected_len: int
    ) -> int:
        """Append after the first `expected_len` lines, dropping any a failed attempt left."""
        if expected_len < 0:
            raise ValueError(f"expected_len must be >= 0, got {expected_len}")
        path = self._path(run_id, key)
        new = _encode_lines(lines)
        with self._locked(path) as fd:
            stat = os.fstat(fd)
            known = self._logs.get(path)
            if known == (stat.st_size, stat.st_mtime_ns, expected_len):
                # The log is as this store last left it and the caller continues from its end:
                # append without reading it all back.
                keep, length = stat.st_size, expected_len + new.count(b"\n")
            else:
                data = os.pread(fd, stat.st_size, 0) if stat.st_size else b""
                merged, length = _merge_log(data, new, expected_len, f"{run_id}/{key}")
                keep = len(merged) - len(new)
                if keep != len(data):
                    os.ftruncate(fd, keep)
            if new:
                _write_all(fd, new, keep)
                if self.fsync:
                    _sync(fd)
            after = os.fstat(fd)
            self._logs[path] = (after.st_size, after.st_mtime_ns, length)
            while len(self._logs) > _KNOWN_LOGS:
                self._logs.pop(next(iter(self._logs)), None)
        return length

    def left_stamp(self, run_id: str, key: str) -> tuple[int, int] | None:
        """The log's `stamp` as this store's last append left it (taken under its lock), when
        it appended to it; None when not."""
        known = self._logs.get(self._path(run_id, key))
        return (known[0], known[1]) if known is not None else None

    def stamp(self, run_id: str, key: str) -> tuple[int, int] | None:
        """The log's size and change time, to tell whether it changed since it was read."""
        try:
            stat = os.stat(self._path(run_id, key))
        except FileNotFoundError:
            return None
        return stat.st_size, stat.st_mtime_ns

    def read_lines(self, run_id: str, key: str, start: int = 0) -> builtins.list[str]:
        """The complete lines of the log at `key` from index `start` on."""
        try:
            data = _read(self._path(run_id, key))
        except FileNotFoundError:
            return []
        return [line.decode() for line in _complete_lines(data)[max(start, 0) :]]

    def list(self, run_id: str, prefix: str = "") -> builtins.list[str]:
        """Every key of the run starting with `prefix` (a plain string prefix, as in S3)."""
        base = self.root / validate_run_id(run_id)
        folder = prefix.rpartition("/")[0]
        top = base / validate_key(folder) if folder else base
        found: list[str] = []
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                if name.startswith(_TEMP_MARK):
                    continue
                key = (Path(dirpath) / name).relative_to(base).as_posix()
                if key.startswith(prefix):
                    found.append(key)
        return sorted(found)


class S3RunStore:
    """A run store in S3 (or any S3-compatible service): `s3://<bucket>/<prefix>/<run_id>/<key>`.

    boto3 is blocking: from async code call the methods through `asyncio.to_thread`. A log key
    has one writer at a time (a node's turns are sequential), so `append_lines` rewrites the
    object without a lock.
    """

    def __init__(self, bucket: str, prefix: str = "", client: Any | None = None) -> None:
        if not bucket:
            raise InvalidKey("S3RunStore needs a bucket name")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if client is None:
            import boto3

            client = boto3.client("s3")
        self.client = client

    def __repr__(self) -> str:
        return f"S3RunStore(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def _run_prefix(self, run_id: str) -> str:
        run = validate_run_id(run_id)
        return f"{self.prefix}/{run}/" if self.prefix else f"{run}/"

    def _object_key(self, run_id: str, key: str) -> str:
        return self._run_prefix(run_id) + validate_key(key)

    def run_dir(self, run_id: str) -> None:
        """S3 runs have no local folder."""
        validate_run_id(run_id)
        return None

    def put_bytes(self, run_id: str, key: str, data: bytes, *, sync: bool = True) -> None:
        """Upload `data` as one object (S3 puts are atomic and durable; `sync` changes nothing)."""
        self.client.put_object(Bucket=self.bucket, Key=self._object_key(run_id, key), Body=data)

    def _get(self, run_id: str, key: str) -> bytes | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._object_key(run_id, key))
        except ClientError as exc:
            if _is_missing(exc):
                return None
            raise
        body: bytes = response["Body"].read()
        return body

    def get_bytes(self, run_id: str, key: str) -> bytes:
        """Download the object stored under `key`."""
        data = self._get(run_id, key)
        if data is None:
            raise KeyNotFound(
                f"run {run_id!r} has nothing stored at {key!r} in s3://{self.bucket}/{self.prefix}"
            )
        return data

    def exists(self, run_id: str, key: str) -> bool:
        """Whether an object is stored under `key`."""
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._object_key(run_id, key))
        except ClientError as exc:
            if _is_missing(exc):
                return False
            raise
        return True

    def append_lines(
        self, run_id: str, key: str, lines: Iterable[str | bytes], expected_len: int
    ) -> int:
        """Rewrite the log object with its first `expected_len` lines plus `lines`."""
        if expected_len < 0:
            raise ValueError(f"expected_len must be >= 0, got {expected_len}")
        new = _encode_lines(lines)
        data = self._get(run_id, key) or b""
        merged, length = _merge_log(data, new, expected_len, f"{run_id}/{key}")
        if merged != data:
            self.put_bytes(run_id, key, merged)
        return length

    def read_lines(self, run_id: str, key: str, start: int = 0) -> builtins.list[str]:
        """The complete lines of the log object from index `start` on."""
        data = self._get(run_id, key) or b""
        return [line.decode() for line in _complete_lines(data)[max(start, 0) :]]

    def list(self, run_id: str, prefix: str = "") -> builtins.list[str]:
        """Every key of the run starting with `prefix`."""
        base = self._run_prefix(run_id)
        paginator = self.client.get_paginator("list_objects_v2")
        found: list[str] = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix):
            found.extend(item["Key"][len(base) :] for item in page.get("Contents", []))
        return sorted(found)


def _is_missing(exc: ClientError) -> bool:
    """Whether an S3 error means the object does not exist."""
    code = str(exc.response.get("Error", {}).get("Code", ""))
    return code in ("NoSuchKey", "404", "NotFound")
