"""Every way out of the execution folder is refused, before any I/O outside it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.activities.tools.conftest import Harness


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.lstat().st_mtime_ns, p.lstat().st_size)
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def layout(tmp_path: Path, harness: Harness) -> Path:
    """A secret folder beside the execution folder, and links in it that point out."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "secret.txt").write_text("top secret\n")
    work = harness.workdir
    (work / "sub").mkdir()
    (work / "ok.txt").write_text("fine\n")
    (work / "link-file").symlink_to(outside / "secret.txt")
    (work / "link-dir").symlink_to(outside)
    (work / "sub" / "up").symlink_to(tmp_path)
    (work / "chain").symlink_to(work / "link-dir")
    (work / "dangling").symlink_to(outside / "not-yet.txt")
    (work / "loop").symlink_to("loop")
    os.link(outside / "secret.txt", work / "hard.txt")
    return outside


ESCAPES: list[tuple[str, dict[str, Any]]] = [
    ("read", {"path": "../outside/secret.txt"}),
    ("read", {"path": "sub/../../outside/secret.txt"}),
    ("read", {"path": "{outside}/secret.txt"}),
    ("read", {"path": "link-file"}),
    ("read", {"path": "link-file:raw"}),
    ("read", {"path": "link-file:1-2"}),
    ("read", {"path": "link-dir/secret.txt"}),
    ("read", {"path": "sub/up/outside/secret.txt"}),
    ("read", {"path": "chain/secret.txt"}),
    ("read", {"path": "artifact:../../outside/secret.txt"}),
    ("read", {"path": "artifact:/etc/passwd"}),
    ("read", {"path": "run://handoffs/../../outside/secret.txt"}),
    ("read", {"path": "run://handoffs/x/../../../outside/secret.txt"}),
    ("read", {"path": "run://handoffs/node/secret.txt"}),
    ("ls", {"path": ".."}),
    ("ls", {"path": "link-dir"}),
    ("ls", {"path": "sub/up"}),
    ("search", {"pattern": "secret", "paths": ["../outside"]}),
    ("search", {"pattern": "secret", "paths": "link-dir"}),
    ("find", {"paths": "../outside/*.txt"}),
    ("find", {"paths": "{outside}/*"}),
    ("write", {"path": "../outside/new.txt", "content": "x"}),
    ("write", {"path": "{outside}/new.txt", "content": "x"}),
    ("write", {"path": "link-dir/new.txt", "content": "x"}),
    ("write", {"path": "link-file", "content": "pwned"}),
    ("write", {"path": "sub/up/outside/deep/new.txt", "content": "x"}),
    ("write", {"path": "chain/new.txt", "content": "x"}),
    ("edit", {"path": "link-file", "edits": [{"old_text": "top", "new_text": "no"}]}),
    ("edit", {"path": "../outside/secret.txt", "edits": [{"old_text": "top", "new_text": "no"}]}),
    (
        "apply_patch",
        {"input": "*** Begin Patch\n*** Add File: ../outside/p.txt\n+x\n*** End Patch"},
    ),
    ("apply_patch", {"input": "*** Begin Patch\n*** Delete File: link-file\n*** End Patch"}),
    (
        "apply_patch",
        {
            "input": "*** Begin Patch\n*** Update File: link-dir/secret.txt\n@@\n-top secret\n"
            "+gone\n*** End Patch"
        },
    ),
    ("write", {"path": "dangling", "content": "x"}),
    ("write", {"path": "hard.txt", "content": "pwned"}),
    ("edit", {"path": "hard.txt", "edits": [{"old_text": "top", "new_text": "no"}]}),
    ("write", {"path": "loop/x.txt", "content": "x"}),
    ("read", {"path": "loop"}),
    ("ls", {"path": "chain"}),
    ("search", {"pattern": "secret", "paths": ["sub/up"]}),
    ("find", {"paths": "link-dir/**"}),
    (
        "apply_patch",
        {
            "input": "*** Begin Patch\n*** Update File: ok.txt\n*** Move to: link-dir/moved.txt\n"
            "@@\n-fine\n+moved\n*** End Patch"
        },
    ),
    ("apply_patch", {"input": "*** Begin Patch\n*** Add File: dangling\n+x\n*** End Patch"}),
    ("bash", {"command": "touch escaped", "cwd": "../outside"}),
    ("bash", {"command": "touch escaped", "cwd": "link-dir"}),
    ("bash", {"command": "touch escaped", "cwd": "{outside}"}),
]


@pytest.mark.parametrize(
    ("tool", "args"), ESCAPES, ids=[f"{i:02d}-{t}" for i, (t, _) in enumerate(ESCAPES)]
)
async def test_escape_is_refused_and_touches_nothing_outside(
    harness: Harness, layout: Path, tool: str, args: dict[str, Any]
) -> None:
    filled = {
        k: v.replace("{outside}", os.fspath(layout)) if isinstance(v, str) else v
        for k, v in args.items()
    }
    before = _snapshot(layout)
    result = await harness.one(tool, filled)
    assert result.is_error, f"{tool} {filled} was allowed: {result.content[:200]}"
    assert result.content.startswith(("[permission_denied]", "[invalid_args]", "[not_found]")), (
        result.content
    )
    assert "top secret" not in result.content
    assert _snapshot(layout) == before, "something outside the folder changed"
    assert harness.of_type("FileChanged") == []


def test_there_are_at_least_25_escape_attempts() -> None:
    assert len(ESCAPES) >= 25
