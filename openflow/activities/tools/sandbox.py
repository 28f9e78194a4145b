"""Keeps every path a tool touches inside the execution folder.

Paths are resolved with `realpath` before any I/O, so `..`, absolute paths elsewhere and
symlinks that lead out are all refused the same way; a file that does not exist yet is checked
through its nearest existing parent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from openflow.activities.tools.base import InvalidArgs, PermissionDenied


@dataclass(frozen=True)
class Resolved:
    """A path proven to lie inside the execution folder."""

    real: Path
    rel: str

    @property
    def lock_key(self) -> str:
        """The exclusive lock key of this path (spec 4.5)."""
        return f"path:{self.rel}"


class Sandbox:
    """Resolves tool paths against one execution folder and refuses anything outside it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))

    def contains(self, real: Path | str) -> bool:
        """Whether an already-resolved path is the folder itself or lies below it."""
        text = os.fspath(real)
        root = os.fspath(self.root)
        return text == root or text.startswith(root.rstrip(os.sep) + os.sep)

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
        candidate = Path(raw) if os.path.isabs(raw) else self.root / raw
        real = Path(os.path.realpath(candidate))
        if not self.contains(real):
            raise PermissionDenied(
                f"{tool}: {raw!r} resolves outside the execution folder — "
                "use a relative path inside the folder (no '..', no symlinks that lead out)"
            )
        return Resolved(real=real, rel=self.relative(real))

    def relative(self, real: Path) -> str:
        """The folder-relative POSIX form of a resolved path ('.' for the folder itself)."""
        rel = os.path.relpath(real, self.root)
        return Path(rel).as_posix()

    def lock_key(self, raw: object) -> str:
        """Lock key for a raw path argument, even one the tool will later refuse."""
        try:
            return self.resolve(raw, "lock").lock_key
        except (InvalidArgs, PermissionDenied):
            return f"path:{raw}"


__all__ = ["Resolved", "Sandbox"]
