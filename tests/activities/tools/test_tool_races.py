"""A process flipping a folder into a link that leads out, and back, cannot redirect any file tool.

The flipper is a real process renaming a directory and a symlink into the same name as fast as
it can, while the tools are called thousands of times through that name. Nothing outside the
execution folder may be created, read or changed. Files with several hard links are refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from openflow.activities.tools.base import ToolError
from openflow.activities.tools.fs import LsTool, ReadTool
from openflow.activities.tools.patch import ApplyPatchTool
from openflow.activities.tools.search import FindTool, SearchTool
from openflow.activities.tools.writes import EditTool, WriteTool
from tests.activities.tools.conftest import Harness

SECRET = "OUTSIDE-SECRET-7f3a"
ATTEMPTS = 3000
BUDGET_S = 2.0

_FLIPPER = r"""
import os, shutil, sys
work, outside = sys.argv[1], sys.argv[2]
real, link, name = (os.path.join(work, n) for n in ("d.real", "d.link", "d"))
os.symlink(outside, link)
print("ready", flush=True)
flips = 0
while not os.path.exists(os.path.join(work, "stop")):
    try:
        os.rename(real, name)
        os.rename(name, real)
        os.rename(link, name)
        os.rename(name, link)
        flips += 1
    except OSError:
        # A write created 'd' itself while neither was there: clear it (it is inside).
        if os.path.isdir(name) and not os.path.islink(name):
            shutil.rmtree(name, ignore_errors=True)
print(flips, flush=True)
"""


def _tree(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry below `folder` with its mtime and, for files, its content."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        out[str(path.relative_to(folder))] = (st.st_mtime_ns, data)
    return out


@pytest.fixture
def arena(tmp_path: Path, harness: Harness) -> Path:
    """An outside folder with a secret, and `d.real` inside the execution folder to flip."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "f.txt").write_text(f"alpha {SECRET}\n")
    (outside / "only-outside.txt").write_text(f"{SECRET}\n")
    (outside / "sub" / "g.txt").write_text(f"alpha {SECRET}\n")
    real = harness.workdir / "d.real"
    (real / "sub").mkdir(parents=True)
    (real / "f.txt").write_text("alpha inside\n")
    (real / "sub" / "g.txt").write_text("alpha inside\n")
    return outside


@contextmanager
def flipping(work: Path, outside: Path) -> Iterator[Callable[[], int]]:
    """Run the flipper for the duration of the block; yields how many flips it made."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_FLIPPER), str(work), str(outside)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    flips = [0]
    try:
        yield lambda: flips[0]
    finally:
        (work / "stop").write_text("")
        out, _ = proc.communicate(timeout=30)
        (work / "stop").unlink()
        flips[0] = int(out.strip() or 0)


def _race(call: Callable[[int], Any]) -> tuple[int, int, list[Any]]:
    """Call `call(i)` up to ATTEMPTS times within BUDGET_S; (allowed, refused, results)."""
    allowed = refused = 0
    results = []
    deadline = time.monotonic() + BUDGET_S
    for i in range(ATTEMPTS):
        if time.monotonic() > deadline:
            break
        try:
            results.append(call(i))
            allowed += 1
        except (ToolError, OSError):
            refused += 1
    return allowed, refused, results


def _assert_race_happened(flips: int, allowed: int, refused: int) -> None:
    assert flips > 100, f"the flipper made only {flips} flips"
    assert allowed > 0 and refused > 0, (allowed, refused)


def test_writes_through_a_flipping_folder_stay_inside(harness: Harness, arena: Path) -> None:
    before = _tree(arena)
    ctx = harness.ctx()
    tool, patch = WriteTool(), ApplyPatchTool()
    paths = ["d/new-{i}.txt", "d/sub/deep-{i}.txt", "d/made-{i}/x.txt", "d/f.txt"]

    def write(i: int) -> Any:
        if i % 5 == 4:
            text = f"*** Begin Patch\n*** Add File: d/sub/p-{i}.txt\n+p\n*** End Patch"
            return patch.run_sync(ctx, {"input": text})
        return tool.run_sync(ctx, {"path": paths[i % 4].format(i=i), "content": "w\n"})

    with flipping(harness.workdir, arena) as flips:
        allowed, refused, _ = _race(write)
    _assert_race_happened(flips(), allowed, refused)
    assert _tree(arena) == before, "a write landed outside the execution folder"
    assert not list(arena.rglob("*.tmp")), "a temporary file landed outside"


def test_reads_through_a_flipping_folder_never_see_outside(harness: Harness, arena: Path) -> None:
    ctx = harness.ctx()
    read, ls = ReadTool(), LsTool()
    search, find = SearchTool(), FindTool()
    calls: list[Callable[[], Any]] = [
        lambda: read.run_sync(ctx, {"path": "d/f.txt"}),
        lambda: read.run_sync(ctx, {"path": "d/sub/g.txt:raw"}),
        lambda: read.run_sync(ctx, {"path": "d"}),
        lambda: ls.run_sync(ctx, {"path": "d/sub"}),
        lambda: search.run_sync(ctx, {"pattern": "alpha", "paths": ["d"]}),
        lambda: find.run_sync(ctx, {"paths": "d/**/*.txt"}),
    ]
    with flipping(harness.workdir, arena) as flips:
        allowed, refused, results = _race(lambda i: calls[i % len(calls)]())
    _assert_race_happened(flips(), allowed, refused)
    for output in results:
        assert SECRET not in output.content
        assert "only-outside" not in output.content


def test_edits_through_a_flipping_folder_never_change_outside(
    harness: Harness, arena: Path
) -> None:
    before = _tree(arena)
    ctx = harness.ctx()
    tool = EditTool()
    swaps = [("alpha", "beta"), ("beta", "alpha")]

    def edit(i: int) -> Any:
        old, new = swaps[i % 2]
        path = "d/f.txt" if i % 4 < 2 else "d/sub/g.txt"
        return tool.run_sync(ctx, {"path": path, "edits": [{"old_text": old, "new_text": new}]})

    with flipping(harness.workdir, arena) as flips:
        allowed, refused, results = _race(edit)
    _assert_race_happened(flips(), allowed, refused)
    assert _tree(arena) == before, "an edit changed a file outside the execution folder"
    assert all(SECRET not in r.content for r in results)


async def test_files_with_other_hard_links_are_read_but_not_changed(
    harness: Harness, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("alpha outside\n")
    os.link(outside, harness.workdir / "linked.txt")
    write = await harness.one("write", {"path": "linked.txt", "content": "pwned\n"})
    edit = await harness.one(
        "edit", {"path": "linked.txt", "edits": [{"old_text": "alpha", "new_text": "beta"}]}
    )
    patch = await harness.one(
        "apply_patch",
        {
            "input": "*** Begin Patch\n*** Update File: linked.txt\n@@\n-alpha outside\n"
            "+beta\n*** End Patch"
        },
    )
    for result in (write, edit, patch):
        assert result.is_error
        assert result.content.startswith("[permission_denied] ")
        assert "has 2 hard links" in result.content, result.content
    assert outside.read_text() == "alpha outside\n"
    assert (harness.workdir / "linked.txt").read_text() == "alpha outside\n"
    assert harness.of_type("FileChanged") == []
    # A new file of the same name is fine once the link is gone.
    (harness.workdir / "linked.txt").unlink()
    again = await harness.one("write", {"path": "linked.txt", "content": "mine\n"})
    assert not again.is_error
    assert outside.read_text() == "alpha outside\n"


async def test_links_inside_the_folder_still_work(harness: Harness) -> None:
    work = harness.workdir
    (work / "src").mkdir()
    (work / "src" / "a.txt").write_text("alpha\n")
    (work / "rel-link").symlink_to("src")
    (work / "abs-link.txt").symlink_to(work / "src" / "a.txt")
    (work / "loop").symlink_to("loop")
    read = await harness.one("read", {"path": "rel-link/a.txt"})
    assert read.content == "1\talpha"
    through = await harness.one("read", {"path": "abs-link.txt"})
    assert through.content == "1\talpha"
    wrote = await harness.one("write", {"path": "rel-link/b.txt", "content": "b\n"})
    assert not wrote.is_error
    assert (work / "src" / "b.txt").read_text() == "b\n"
    loop = await harness.one("read", {"path": "loop/x"})
    assert loop.is_error and loop.content.startswith("[permission_denied] "), loop.content


async def test_a_fifo_does_not_hang_the_file_tools(harness: Harness) -> None:
    os.mkfifo(harness.workdir / "pipe")
    read = await harness.one("read", {"path": "pipe"})
    assert read.is_error and "not a regular file" in read.content
    search = await harness.one("search", {"pattern": "x", "paths": "."})
    assert not search.is_error
