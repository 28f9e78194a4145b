"""Remembered grants: which later calls run without a pause (see `engine.approvals`).

A grant names a tool and, optionally, a path prefix: a call matches when it is a call of that
tool and every path it names lies under the prefix. The plan seal never matches.
"""

from __future__ import annotations

import posixpath

from openflow.engine.policy import SEAL_TOOL, mutation_paths
from openflow.engine.state import Grant, RunSnapshot
from openflow.engine.transcript import ToolCall

#: The path arguments a grant's prefix is checked against, besides `write`/`edit` targets.
PATH_ARGUMENTS = ("path", "paths", "cwd")


def call_paths(call: ToolCall) -> list[str]:
    """The paths a call names (its targets for `write`/`edit`, otherwise its path arguments)."""
    paths = mutation_paths(call.name, call.arguments) if call.name in ("write", "edit") else []
    for key in PATH_ARGUMENTS:
        value = call.arguments.get(key)
        if isinstance(value, str):
            paths.append(value)
        elif isinstance(value, list):
            paths.extend(v for v in value if isinstance(v, str))
    return list(dict.fromkeys(paths))


def _clean(path: str) -> str:
    clean = posixpath.normpath(path.strip() or ".")
    return "" if clean == "." else clean


def under(path: str, prefix: str) -> bool:
    """Whether `path` is `prefix` or inside it, compared as normalized relative paths."""
    p, root = _clean(path), _clean(prefix).rstrip("/")
    if p.startswith("../") or p == "..":
        return False
    if not root:
        return not p.startswith("/")
    return p == root or p.startswith(root + "/")


def grant_matches(grant: Grant, call: ToolCall) -> bool:
    if grant.tool != call.name:
        return False
    if grant.path_prefix is None:
        return True
    paths = call_paths(call)
    return bool(paths) and all(under(p, grant.path_prefix) for p in paths)


def grant_for(s: RunSnapshot, call: ToolCall) -> Grant | None:
    """The grant that lets `call` run without asking, or None (the seal always asks)."""
    if call.name == SEAL_TOOL:
        return None
    return next((g for g in s.grants if grant_matches(g, call)), None)


__all__ = ["PATH_ARGUMENTS", "call_paths", "grant_for", "grant_matches", "under"]
