"""`search` (regex over file contents) and `find` (globs over paths), both gitignore-aware."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from pathspec import GitIgnoreSpec, PathSpec

from openflow.activities.tools.base import (
    InvalidArgs,
    NotFound,
    PermissionDenied,
    ThreadTool,
    ToolContext,
    ToolOutput,
    check_cancel,
)
from openflow.activities.tools.files import decode, is_binary, split_lines
from openflow.activities.tools.sandbox import Resolved, Sandbox

SEARCH_MATCH_CAP = 500
FIND_PATH_CAP = 200
MAX_SEARCH_FILE_BYTES = 8 * 1024 * 1024
_LINE_CHARS = 400
_GLOB_MAGIC = re.compile(r"[*?\[{]")
_BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")


class IgnoreRules:
    """The .gitignore files from the execution folder down, read lazily; deeper files win.

    Paths are folder-relative POSIX text ('.' is the folder); the files are read through the
    sandbox, so a planted link cannot make them come from outside.
    """

    def __init__(self, sandbox: Sandbox, enabled: bool) -> None:
        self.sandbox = sandbox
        self.enabled = enabled
        self._specs: dict[str, GitIgnoreSpec | None] = {}
        self.skipped = 0

    def _spec(self, directory: str) -> GitIgnoreSpec | None:
        if directory not in self._specs:
            lines: list[str] = []
            sources = [_join(directory, ".gitignore")]
            if directory == ".":
                sources.append(".git/info/exclude")
            for source in sources:
                try:
                    data = self.sandbox.read_bytes(source)[0]
                except OSError:
                    continue
                lines.extend(data.decode("utf-8", errors="replace").splitlines())
            self._specs[directory] = GitIgnoreSpec.from_lines(lines) if lines else None
        return self._specs[directory]

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether git would ignore this path (`.git` itself is always skipped)."""
        path = PurePosixPath(rel)
        if path.name == ".git":
            return True
        if not self.enabled:
            return False
        directory = path.parent
        while True:
            key = directory.as_posix()
            spec = self._spec(key)
            if spec is not None:
                inner = path.relative_to(directory).as_posix() + ("/" if is_dir else "")
                verdict = spec.check_file(inner).include
                if verdict is not None:
                    if verdict:
                        self.skipped += 1
                    return bool(verdict)
            if key == ".":
                return False
            directory = directory.parent


def _join(base: str, name: str) -> str:
    return name if base == "." else f"{base}/{name}"


@dataclass(frozen=True)
class Found:
    """One file a walk found: its folder-relative path, and its bytes when they were read."""

    rel: str
    data: bytes | None = None
    inode: tuple[int, int] | None = None


def walk_files(
    sandbox: Sandbox,
    start: Resolved,
    rules: IgnoreRules,
    stop: Callable[[], None],
    *,
    read_limit: int | None = None,
) -> Iterator[Found]:
    """Files under `start` in path order, skipping ignored ones and symlinks that lead out.

    The walk holds a handle on each directory; with `read_limit`, each file is read through
    it (files over the limit are skipped), so what is searched is what was walked.
    """
    if not start.is_dir:
        yield Found(start.rel, _read(sandbox, start.rel, read_limit))
        return
    try:
        walk = sandbox.walk(start.rel)
        for here, dirnames, filenames, dirfd in walk:
            stop()
            dirnames[:] = sorted(d for d in dirnames if not rules.ignored(_join(here, d), True))
            for name in sorted(filenames):
                rel = _join(here, name)
                if rules.ignored(rel, False):
                    continue
                limit = 0 if read_limit is None else read_limit
                try:
                    data, st = sandbox.read_at(dirfd, name, rel, limit=limit)
                except (OSError, PermissionDenied):
                    continue
                inode = (st.st_dev, st.st_ino)
                if read_limit is None:
                    yield Found(rel, inode=inode)
                elif st.st_size <= read_limit:
                    yield Found(rel, data, inode)
    except (FileNotFoundError, NotADirectoryError):
        return


def _read(sandbox: Sandbox, rel: str, limit: int | None) -> bytes | None:
    if limit is None:
        return None
    try:
        data, st = sandbox.read_bytes(rel, limit=limit)
    except (OSError, PermissionDenied):
        return None
    return None if st.st_size > limit else data


def _as_list(value: object, tool: str, arg: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) for v in items):
        raise InvalidArgs(
            tool, f"{arg!r} must be a string or a non-empty array of strings", "e.g. ['src']"
        )
    return [str(v) for v in items]


def _ignored_hint(rules: IgnoreRules) -> str:
    if rules.enabled and rules.skipped:
        return f" ({rules.skipped} paths were skipped by .gitignore; pass gitignore: false to include them)"
    return ""


class SearchTool(ThreadTool):
    name = "search"
    description = (
        "Search file contents with a regular expression (Python syntax). Prints 'path:line:text' "
        "for each matching line, at most 500; honours .gitignore unless gitignore is false."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression to look for."},
            "paths": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1},
                ],
                "description": "Files or directories to search ('.' = the whole folder).",
            },
            "i": {"type": "boolean", "description": "Case-insensitive (default false)."},
            "gitignore": {"type": "boolean", "description": "Skip ignored files (default true)."},
        },
        "required": ["pattern", "paths"],
    }
    tier = "read"
    concurrency = "shared"

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        pattern = args["pattern"]
        try:
            regex = re.compile(pattern, re.IGNORECASE if args.get("i") else 0)
        except re.error as exc:
            raise InvalidArgs(
                self.name,
                f"invalid regular expression {pattern!r}: {exc}",
                "escape special characters such as ( [ . * with a backslash",
            ) from exc
        sandbox = Sandbox(ctx.execution_dir)
        starts = []
        for raw in _as_list(args["paths"], self.name, "paths"):
            resolved = sandbox.resolve(raw, self.name, arg="paths")
            if not resolved.exists:
                raise NotFound(
                    f"search path {resolved.rel!r} does not exist",
                    "check it with ls or find; paths are relative to the execution folder",
                )
            starts.append(resolved)
        rules = IgnoreRules(sandbox, bool(args.get("gitignore", True)))
        seen: set[tuple[int, int] | str] = set()
        matches: list[str] = []
        capped = False
        stop = lambda: check_cancel(ctx, self.name)  # noqa: E731
        for start in starts:
            for file in walk_files(sandbox, start, rules, stop, read_limit=MAX_SEARCH_FILE_BYTES):
                key = file.inode or file.rel
                if key in seen or file.data is None:
                    continue
                seen.add(key)
                data = file.data
                if is_binary(data):
                    continue
                for number, line in enumerate(split_lines(decode(data)), start=1):
                    if regex.search(line):
                        if len(matches) == SEARCH_MATCH_CAP:
                            capped = True
                            break
                        matches.append(f"{file.rel}:{number}:{line[:_LINE_CHARS]}")
                if capped:
                    break
            if capped:
                break
        if not matches:
            where = ", ".join(s.rel for s in starts)
            text = f"No matches found for {pattern!r} in {where}.{_ignored_hint(rules)}"
            return ToolOutput(content=text, cacheable=True)
        text = "\n".join(matches)
        if capped:
            text += f"\n[{SEARCH_MATCH_CAP} matches shown — the limit; narrow the pattern or paths]"
        return ToolOutput(content=text, cacheable=True)


def expand_braces(pattern: str) -> list[str]:
    """`src/*.{py,md}` → `src/*.py`, `src/*.md` (innermost groups first)."""
    match = _BRACES.search(pattern)
    if not match:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    expanded: list[str] = []
    for option in match.group(1).split(","):
        expanded.extend(expand_braces(head + option + tail))
    return expanded


def _glob_spec(pattern: str) -> PathSpec[Any]:
    """A gitignore-style matcher for one glob (pathspec 1.x name, older name as fallback)."""
    try:
        return PathSpec.from_lines("gitignore", [pattern])
    except LookupError:
        return PathSpec.from_lines("gitwildmatch", [pattern])


def _static_prefix(pattern: str) -> str:
    parts = pattern.split("/")
    prefix: list[str] = []
    for part in parts[:-1]:
        if _GLOB_MAGIC.search(part) or part == "**":
            break
        prefix.append(part)
    return "/".join(prefix)


class FindTool(ThreadTool):
    name = "find"
    description = (
        "Find files by glob, relative to the execution folder: '*.py' matches at any depth, "
        "'src/*.py' only directly in src, '**' spans folders, '{a,b}' alternatives. At most 200 "
        "paths; honours .gitignore unless gitignore is false."
    )
    parameters = {
        "type": "object",
        "properties": {
            "paths": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1},
                ],
                "description": "Glob or globs, e.g. 'src/**/*.ts'.",
            },
            "gitignore": {"type": "boolean", "description": "Skip ignored files (default true)."},
        },
        "required": ["paths"],
    }
    tier = "read"
    concurrency = "shared"

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        sandbox = Sandbox(ctx.execution_dir)
        root = os.fspath(sandbox.root)
        globs: list[str] = []
        for raw in _as_list(args["paths"], self.name, "paths"):
            text = raw.strip()
            if os.path.isabs(text):
                if not sandbox.contains(os.path.normpath(text)):
                    raise PermissionDenied(
                        f"{self.name}: {raw!r} is outside the execution folder — "
                        "use a glob relative to the folder"
                    )
                text = os.path.relpath(text, root)
            text = text.removeprefix("./")
            if ".." in text.split("/"):
                raise PermissionDenied(
                    f"{self.name}: {raw!r} leaves the execution folder — "
                    "use a glob relative to the folder, without '..'"
                )
            globs.extend(expand_braces(text or "."))

        rules = IgnoreRules(sandbox, bool(args.get("gitignore", True)))
        stop = lambda: check_cancel(ctx, self.name)  # noqa: E731
        found: set[str] = set()
        for glob in globs:
            if not _GLOB_MAGIC.search(glob):
                resolved = sandbox.resolve(glob, self.name, arg="paths")
                if resolved.exists:
                    found.update(f.rel for f in walk_files(sandbox, resolved, rules, stop))
                    continue
            prefix = _static_prefix(glob) if "/" in glob.rstrip("/") else ""
            start = sandbox.resolve(prefix or ".", self.name, arg="paths")
            if not start.exists:
                raise NotFound(
                    f"{prefix!r} (from {glob!r}) does not exist",
                    "check the folder with ls; globs are relative to the execution folder",
                )
            spec = _glob_spec(glob)
            for file in walk_files(sandbox, start, rules, stop):
                if spec.match_file(file.rel):
                    found.add(file.rel)
        if not found:
            text = f"No files match {', '.join(globs)}.{_ignored_hint(rules)}"
            return ToolOutput(content=text, cacheable=True)
        paths = sorted(found)
        text = "\n".join(paths[:FIND_PATH_CAP])
        if len(paths) > FIND_PATH_CAP:
            text += f"\n[{FIND_PATH_CAP} of {len(paths)} paths shown — narrow the glob]"
        return ToolOutput(content=text, cacheable=True)


__all__ = ["FindTool", "IgnoreRules", "SearchTool", "expand_braces", "walk_files"]
