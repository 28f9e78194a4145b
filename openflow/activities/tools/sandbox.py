"""Keeps every path a tool touches inside the execution folder, even while links change under it.

A path is never handed to the kernel whole. It is walked one component at a time from an open
handle on the folder (`openat` with `O_NOFOLLOW`), and a symlink met on the way is read and
resolved here, against the handles already held, so it is followed only while it stays inside.
Every read, write, listing and walk then works on the handle the walk ended at: a directory
swapped for a link between a check and a use cannot redirect it, because there is no second
lookup by name. Writes go to a temporary file created in the target's own directory handle and
renamed over the target through that handle. A file with more than one hard link may be read but
not written, since its other name may lie outside.

`..`, absolute paths elsewhere and symlinks that lead out are refused the same way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from openflow.activities.tools.base import InvalidArgs, PermissionDenied

MAX_LINK_HOPS = 40
_RETRIES = 8
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Escape(PermissionDenied):
    """A path that leads out of the folder; `resolve` words it with the tool and the path."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            detail
            or "the path resolves outside the execution folder (a link on it leads out) — "
            "use a path inside the folder"
        )


@dataclass(frozen=True)
class Resolved:
    """A path proven to lie inside the folder: its folder-relative form and what it was."""

    real: Path
    rel: str
    kind: str | None = None

    @property
    def lock_key(self) -> str:
        """The exclusive lock key of this path (spec 4.5)."""
        return f"path:{self.rel}"

    @property
    def exists(self) -> bool:
        return self.kind is not None

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


class _Walk:
    """The directory handles from the folder down to where a walk has got to."""

    def __init__(self, root_fd: int) -> None:
        self.fds = [root_fd]
        self.names: list[str] = []

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def down(self, fd: int, name: str) -> None:
        self.fds.append(fd)
        self.names.append(name)

    def up(self) -> None:
        if not self.names:
            raise Escape
        os.close(self.fds.pop())
        self.names.pop()

    def to_root(self) -> None:
        while self.names:
            self.up()

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


@dataclass
class _Spot:
    """Where a walk ended: an open handle on the parent and the last name (which may not exist)."""

    parent: int
    name: str
    rel: str
    st: os.stat_result | None


class Sandbox:
    """Resolves and opens tool paths against one folder; nothing outside it is ever touched."""

    def __init__(self, root: Path) -> None:
        self.given = os.path.abspath(root)
        self.root = Path(os.path.realpath(root))

    # --- naming ---------------------------------------------------------------------------

    def contains(self, real: Path | str) -> bool:
        """Whether a path is, by its text, the folder itself or below it."""
        text = os.fspath(real)
        for root in (os.fspath(self.root), self.given):
            if text == root or text.startswith(root.rstrip(os.sep) + os.sep):
                return True
        return False

    def relative(self, real: Path) -> str:
        """The folder-relative POSIX form of a path inside the folder ('.' for the folder)."""
        text = os.fspath(real)
        root = os.fspath(self.root)
        if not (text == root or text.startswith(root.rstrip(os.sep) + os.sep)):
            root = self.given
        return Path(os.path.relpath(text, root)).as_posix()

    def _inside_text(self, absolute: str) -> str | None:
        """An absolute path's folder-relative text, or None when it names something outside."""
        normal = os.path.normpath(absolute)
        if self.contains(normal):
            return self.relative(Path(normal))
        return None

    def _denied(self, tool: str, raw: object) -> PermissionDenied:
        return PermissionDenied(
            f"{tool}: {raw!r} resolves outside the execution folder — "
            "use a relative path inside the folder (no '..', no symlinks that lead out)"
        )

    def resolve(self, raw: object, tool: str, *, arg: str = "path") -> Resolved:
        """Resolve `raw` (relative to the folder, or absolute inside it) or refuse it."""
        if not isinstance(raw, str) or not raw.strip():
            raise InvalidArgs(
                tool,
                f"{arg!r} must be a non-empty string",
                "pass a path relative to the execution folder, e.g. 'src/main.py'",
            )
        if "\x00" in raw:
            raise InvalidArgs(tool, f"{arg!r} contains a NUL byte", "remove it from the path")
        text = raw
        if os.path.isabs(raw):
            inside = self._inside_text(raw)
            if inside is None:
                raise self._denied(tool, raw)
            text = inside
        try:
            spot = self._locate(text)
        except Escape:
            raise self._denied(tool, raw) from None
        except _Missing as missing:
            return Resolved(real=self.root / missing.rel, rel=missing.rel)
        try:
            kind = _kind(spot.st.st_mode) if spot.st is not None else None
            return Resolved(real=self._real(spot.rel), rel=spot.rel, kind=kind)
        finally:
            os.close(spot.parent)

    def lock_key(self, raw: object) -> str:
        """Lock key for a raw path argument, even one the tool will later refuse."""
        try:
            return self.resolve(raw, "lock").lock_key
        except (InvalidArgs, PermissionDenied):
            return f"path:{raw}"

    def _real(self, rel: str) -> Path:
        return self.root if rel == "." else self.root / rel

    # --- the walk ---------------------------------------------------------------------------

    def _open_root(self) -> int:
        return os.open(self.root, _DIR_FLAGS)

    def _locate(self, rel: str, *, create: bool = False, follow: bool = True) -> _Spot:
        """Walk `rel` from the folder handle; the caller closes `parent`.

        Symlinks are read and followed here while they stay inside; `create` makes missing
        parent directories. Raises Escape for anything that leads out, _Missing when a parent
        directory does not exist.
        """
        parts = [p for p in PurePosixPath(rel).parts if p not in ("", ".")]
        if rel.startswith("/"):
            parts = parts[1:]
        walk = _Walk(self._open_root())
        hops = 0
        try:
            if not parts:
                # The folder itself: its parent handle is the folder, its name '.'.
                return _Spot(parent=os.dup(walk.fd), name=".", rel=".", st=os.stat(walk.fd))
            while parts:
                part = parts.pop(0)
                if part == "..":
                    walk.up()
                    continue
                last = not parts
                try:
                    st: os.stat_result | None = os.stat(part, dir_fd=walk.fd, follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                if st is not None and stat.S_ISLNK(st.st_mode) and (follow or not last):
                    hops += 1
                    if hops > MAX_LINK_HOPS:
                        raise Escape
                    target = os.readlink(part, dir_fd=walk.fd)
                    if os.path.isabs(target):
                        inside = self._inside_text(target)
                        if inside is None:
                            raise Escape
                        walk.to_root()
                        target = inside
                    parts = [p for p in PurePosixPath(target).parts if p not in ("", ".")] + parts
                    continue
                if last:
                    names = [*walk.names, part]
                    return _Spot(parent=os.dup(walk.fd), name=part, rel="/".join(names), st=st)
                if st is None:
                    if not create:
                        raise _Missing(self._lexical_rest(walk.names, [part, *parts]))
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=walk.fd)
                try:
                    fd = os.open(part, _DIR_FLAGS, dir_fd=walk.fd)
                except OSError as exc:
                    if exc.errno == errno.ELOOP:  # became a link since the stat: look again
                        parts.insert(0, part)
                        hops += 1
                        if hops > MAX_LINK_HOPS:
                            raise Escape from None
                        continue
                    if exc.errno in (errno.ENOENT, errno.ENOTDIR) and not create:
                        raise _Missing(self._lexical_rest(walk.names, [part, *parts])) from None
                    raise
                walk.down(fd, part)
            return self._here(walk)
        finally:
            walk.close()

    @staticmethod
    def _here(walk: _Walk) -> _Spot:
        """The spot of the directory a walk stands in (after a final `..` or link to a folder)."""
        if not walk.names:
            return _Spot(parent=os.dup(walk.fd), name=".", rel=".", st=os.stat(walk.fd))
        return _Spot(
            parent=os.dup(walk.fds[-2]),
            name=walk.names[-1],
            rel="/".join(walk.names),
            st=os.stat(walk.fd),
        )

    @staticmethod
    def _lexical_rest(names: list[str], rest: list[str]) -> str:
        """The relative path of something below a missing directory, `..` folded by text."""
        out = list(names)
        for part in rest:
            if part == "..":
                if not out:
                    raise Escape
                out.pop()
            elif part not in ("", "."):
                out.append(part)
        return "/".join(out) or "."

    def _open(self, rel: str, flags: int, *, create: bool = False) -> tuple[int, _Spot]:
        """Open the object `rel` names, never through a link; returns its fd and its spot."""
        for _ in range(_RETRIES):
            spot = self._locate(rel, create=create)
            try:
                if spot.name == ".":
                    fd = os.open(".", flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=spot.parent)
                else:
                    fd = os.open(
                        spot.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=spot.parent
                    )
            except OSError as exc:
                os.close(spot.parent)
                if exc.errno == errno.ELOOP:
                    continue
                raise
            return fd, spot
        raise Escape

    # --- operations on handles ----------------------------------------------------------------

    def read_bytes(self, rel: str, *, limit: int | None = None) -> tuple[bytes, os.stat_result]:
        """A regular file's bytes and its stat, read through one handle.

        Raises FileNotFoundError, IsADirectoryError, or Escape; `limit` skips larger files
        (returns b"" with the stat) so a search never loads them.
        """
        fd, spot = self._open(rel, os.O_RDONLY | os.O_NONBLOCK)
        os.close(spot.parent)
        return _read_fd(fd, rel, limit)

    def read_at(
        self, dirfd: int, name: str, rel: str, *, limit: int | None = None
    ) -> tuple[bytes, os.stat_result]:
        """Read `name` in a directory handle from `walk`; a link is resolved from the folder."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            return self.read_bytes(rel, limit=limit)
        return _read_fd(fd, rel, limit)

    def stat(self, rel: str) -> os.stat_result:
        """The stat of what `rel` names, taken through a handle on it."""
        fd, spot = self._open(rel, os.O_RDONLY | os.O_NONBLOCK)
        os.close(spot.parent)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def read_or_none(self, rel: str) -> bytes | None:
        """A file's bytes, or None when it does not exist (or a parent folder does not)."""
        try:
            return self.read_bytes(rel)[0]
        except FileNotFoundError:
            return None

    def check_writable(self, rel: str, tool: str) -> None:
        """Refuse a target with more than one hard link: its other names may lie outside."""
        try:
            spot = self._locate(rel)
        except _Missing:
            return
        try:
            if spot.st is not None and stat.S_ISREG(spot.st.st_mode) and spot.st.st_nlink > 1:
                raise HardLinked(tool, spot.rel, spot.st.st_nlink)
        finally:
            os.close(spot.parent)

    def write_bytes(self, rel: str, data: bytes, tool: str) -> None:
        """Replace the file `rel` with `data` in one rename, creating parent folders.

        The temporary file is created in, and renamed within, the target's own directory
        handle; an existing file keeps its mode. A file with several hard links is refused.
        """
        spot = self._locate(rel, create=True)
        try:
            existing = spot.st
            if spot.name == ".":
                raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
            if existing is not None and stat.S_ISDIR(existing.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
            if existing is not None and stat.S_ISREG(existing.st_mode) and existing.st_nlink > 1:
                raise HardLinked(tool, spot.rel, existing.st_nlink)
            tmp = f".{spot.name}.openflow-{uuid.uuid4().hex[:12]}.tmp"
            fd = os.open(tmp, _NEW_FLAGS, 0o666, dir_fd=spot.parent)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    if existing is not None and stat.S_ISREG(existing.st_mode):
                        os.fchmod(fd, stat.S_IMODE(existing.st_mode))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(tmp, spot.name, src_dir_fd=spot.parent, dst_dir_fd=spot.parent)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=spot.parent)
                raise
        finally:
            os.close(spot.parent)

    def unlink(self, rel: str) -> None:
        """Remove the file `rel` names (missing is fine)."""
        try:
            spot = self._locate(rel)
        except _Missing:
            return
        try:
            os.unlink(spot.name, dir_fd=spot.parent)
        except FileNotFoundError:
            pass
        finally:
            os.close(spot.parent)

    def scandir(self, rel: str) -> list[tuple[str, str]]:
        """(name, 'dir' | 'link' | 'file') of a directory's entries, sorted by name."""
        fd, spot = self._open(rel, os.O_RDONLY | os.O_DIRECTORY)
        os.close(spot.parent)
        try:
            entries = []
            with os.scandir(fd) as listing:
                for entry in listing:
                    if entry.is_symlink():
                        kind = "link"
                    elif entry.is_dir(follow_symlinks=False):
                        kind = "dir"
                    else:
                        kind = "file"
                    entries.append((entry.name, kind))
        finally:
            os.close(fd)
        return sorted(entries)

    def walk(self, rel: str) -> Iterator[tuple[str, list[str], list[str], int]]:
        """`os.fwalk` below `rel` through handles: (rel dir, dir names, file names, dir fd).

        Links are never descended into; they are listed among the files, for the caller to
        resolve through `read_bytes` (which follows them only while they stay inside).
        """
        fd, spot = self._open(rel, os.O_RDONLY | os.O_DIRECTORY)
        os.close(spot.parent)
        base = spot.rel if spot.name != "." else "."
        try:
            for dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=fd):
                here = base if dirpath == "." else _join(base, dirpath[2:])
                links = []
                for name in dirnames:
                    try:
                        if stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
                            links.append(name)
                    except OSError:
                        links.append(name)
                for name in links:
                    dirnames.remove(name)
                yield here, dirnames, filenames + links, dirfd
        finally:
            os.close(fd)


def _read_fd(fd: int, rel: str, limit: int | None) -> tuple[bytes, os.stat_result]:
    """Read a regular file through its handle, then close it."""
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(rel)
        if limit is not None and st.st_size > limit:
            return b"", st
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def _join(base: str, name: str) -> str:
    return name if base == "." else f"{base}/{name}"


class _Missing(FileNotFoundError):
    """A parent directory does not exist; `rel` is the path's folder-relative text."""

    def __init__(self, rel: str) -> None:
        super().__init__(errno.ENOENT, "no such file or directory", rel)
        self.rel = rel


class NotARegularFile(OSError):
    """A FIFO, socket or device where a file was expected."""

    def __init__(self, rel: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file", rel)


class HardLinked(PermissionDenied):
    """A write to a file that has other names, which may lie outside the folder."""

    def __init__(self, tool: str, rel: str, links: int) -> None:
        super().__init__(
            f"{tool}: {rel!r} has {links} hard links, so its other names may lie outside the "
            "execution folder; it can be read but not changed — copy it to a new file instead "
            "(e.g. `cp --remove-destination` in bash)"
        )


Missing = _Missing

__all__ = [
    "Escape",
    "HardLinked",
    "Missing",
    "NotARegularFile",
    "Resolved",
    "Sandbox",
]
