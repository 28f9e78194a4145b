"""No tool reads or writes outside the execution folder, and refusals happen before any I/O."""

from __future__ import annotations

import pytest

DENIED = "[permission_denied] "


@pytest.fixture
def outside(tmp_path):
    """A folder next to the execution folder holding a secret file."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("top secret\n")
    return folder


def _escapes(outside) -> list[str]:
    return ["../outside/secret.txt", str(outside / "secret.txt"), "sub/../../outside/secret.txt"]


async def test_reads_outside_are_refused(harness, outside) -> None:
    (harness.workdir / "sub").mkdir()
    for path in _escapes(outside):
        result = await harness.one("read", {"path": path})
        assert result.is_error, path
        assert result.content.startswith(DENIED), result.content
        assert "top secret" not in result.content


async def test_symlink_leading_out_is_refused(harness, outside) -> None:
    (harness.workdir / "link.txt").symlink_to(outside / "secret.txt")
    (harness.workdir / "linkdir").symlink_to(outside)
    for path in ("link.txt", "link.txt:raw", "linkdir/secret.txt", "linkdir"):
        result = await harness.one("read", {"path": path})
        assert result.content.startswith(DENIED), (path, result.content)
    write = await harness.one("write", {"path": "linkdir/new.txt", "content": "x"})
    assert write.content.startswith(DENIED)
    assert not (outside / "new.txt").exists()
    overwrite = await harness.one("write", {"path": "link.txt", "content": "pwned"})
    assert overwrite.content.startswith(DENIED)
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_writes_outside_create_nothing(harness, outside) -> None:
    targets = ["../outside/new.txt", str(outside / "new2.txt"), "../outside/deep/new3.txt"]
    for path in targets:
        result = await harness.one("write", {"path": path, "content": "x"})
        assert result.content.startswith(DENIED), result.content
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert harness.of_type("FileChanged") == []


async def test_edit_and_patch_outside_are_refused(harness, outside) -> None:
    edit = await harness.one(
        "edit",
        {"path": "../outside/secret.txt", "edits": [{"old_text": "top", "new_text": "no"}]},
    )
    assert edit.content.startswith(DENIED)
    (harness.workdir / "ok.txt").write_text("fine\n")
    patch = (
        "*** Begin Patch\n*** Add File: ok2.txt\n+fine\n"
        "*** Delete File: ../outside/secret.txt\n*** End Patch"
    )
    result = await harness.one("apply_patch", {"input": patch})
    assert result.content.startswith(DENIED)
    assert (outside / "secret.txt").exists()
    assert not (harness.workdir / "ok2.txt").exists()


async def test_search_find_ls_and_bash_cwd_outside_are_refused(harness, outside) -> None:
    search = await harness.one("search", {"pattern": "secret", "paths": ["../outside"]})
    assert search.content.startswith(DENIED)
    find = await harness.one("find", {"paths": "../outside/*.txt"})
    assert find.content.startswith(DENIED)
    find_abs = await harness.one("find", {"paths": str(outside / "*.txt")})
    assert find_abs.content.startswith(DENIED)
    ls = await harness.one("ls", {"path": ".."})
    assert ls.content.startswith(DENIED)
    bash = await harness.one("bash", {"command": "touch escaped", "cwd": "../outside"})
    assert bash.content.startswith(DENIED)
    assert not (outside / "escaped").exists()


async def test_search_does_not_follow_symlinks_out(harness, outside) -> None:
    (harness.workdir / "link.txt").symlink_to(outside / "secret.txt")
    (harness.workdir / "here.txt").write_text("secret inside\n")
    result = await harness.one("search", {"pattern": "secret", "paths": "."})
    assert result.content == "here.txt:1:secret inside"


async def test_absolute_paths_inside_the_folder_work(harness) -> None:
    (harness.workdir / "a.txt").write_text("inside\n")
    result = await harness.one("read", {"path": str(harness.workdir / "a.txt")})
    assert result.content == "1\tinside"
    outcome = await harness.run(
        ("write", {"path": str(harness.workdir / "b.txt"), "content": "b\n"})
    )
    assert (harness.workdir / "b.txt").read_text() == "b\n"
    assert outcome.changed_files[0]["path"] == "b.txt"


async def test_dotdot_that_stays_inside_resolves(harness) -> None:
    (harness.workdir / "sub").mkdir()
    (harness.workdir / "a.txt").write_text("a\n")
    result = await harness.one("read", {"path": "sub/../a.txt"})
    assert result.content == "1\ta"
