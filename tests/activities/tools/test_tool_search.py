"""search and find: matches, caps, .gitignore, and the error forms."""

from __future__ import annotations

import pytest


@pytest.fixture
def repo(harness):
    """A small project with a .gitignore, a nested .gitignore and a .git folder."""
    root = harness.workdir
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    return TODO\n")
    (root / "src" / "util.py").write_text("# todo: tidy\nX = 1\n")
    (root / "src" / ".gitignore").write_text("generated.py\n")
    (root / "src" / "generated.py").write_text("TODO generated\n")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("TODO built\n")
    (root / "debug.log").write_text("TODO log\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("TODO git\n")
    (root / "README.md").write_text("# Readme\n")
    return root


async def test_search_prints_path_line_text(harness, repo) -> None:
    result = await harness.one("search", {"pattern": "TODO", "paths": "."})
    assert result.content == "src/app.py:2:    return TODO"


async def test_search_case_insensitive(harness, repo) -> None:
    result = await harness.one("search", {"pattern": "todo", "paths": ["src"], "i": True})
    assert result.content.splitlines() == [
        "src/app.py:2:    return TODO",
        "src/util.py:1:# todo: tidy",
    ]


async def test_search_without_gitignore_sees_ignored_files_but_never_git(harness, repo) -> None:
    result = await harness.one("search", {"pattern": "TODO", "paths": ".", "gitignore": False})
    assert sorted(result.content.splitlines()) == [
        "build/out.py:1:TODO built",
        "debug.log:1:TODO log",
        "src/app.py:2:    return TODO",
        "src/generated.py:1:TODO generated",
    ]


async def test_search_no_matches_mentions_ignored_paths(harness, repo) -> None:
    result = await harness.one("search", {"pattern": "TODO built", "paths": "."})
    assert not result.is_error
    assert result.content.startswith("No matches found for 'TODO built' in .")
    assert "gitignore: false" in result.content


async def test_search_caps_at_500_matches(harness) -> None:
    (harness.workdir / "many.txt").write_text("hit\n" * 600)
    result = await harness.one("search", {"pattern": "hit", "paths": "."})
    lines = result.content.splitlines()
    assert len(lines) == 501
    assert lines[499] == "many.txt:500:hit"
    assert "500 matches shown" in lines[-1]


async def test_search_missing_path_is_not_found(harness) -> None:
    result = await harness.one("search", {"pattern": "x", "paths": ["nowhere"]})
    assert result.is_error
    assert result.content.startswith("[not_found] search path 'nowhere' does not exist — ")


async def test_search_invalid_regex_is_invalid_args(harness) -> None:
    result = await harness.one("search", {"pattern": "foo(", "paths": "."})
    assert result.content.startswith("[invalid_args] search: invalid regular expression 'foo('")


async def test_find_globs(harness, repo) -> None:
    anywhere = await harness.one("find", {"paths": "*.py"})
    assert anywhere.content == "src/app.py\nsrc/util.py"
    anchored = await harness.one("find", {"paths": ["src/*.py", "*.md"]})
    assert anchored.content == "README.md\nsrc/app.py\nsrc/util.py"
    braces = await harness.one("find", {"paths": "**/{app,util}.py"})
    assert braces.content == "src/app.py\nsrc/util.py"
    folder = await harness.one("find", {"paths": "src"})
    assert folder.content == "src/.gitignore\nsrc/app.py\nsrc/util.py"


async def test_find_gitignore_toggle(harness, repo) -> None:
    result = await harness.one("find", {"paths": "*.py", "gitignore": False})
    assert result.content == "build/out.py\nsrc/app.py\nsrc/generated.py\nsrc/util.py"


async def test_find_caps_at_200_paths(harness) -> None:
    for i in range(250):
        (harness.workdir / f"f{i:03}.txt").write_text("")
    result = await harness.one("find", {"paths": "*.txt"})
    lines = result.content.splitlines()
    assert len(lines) == 201
    assert lines[0] == "f000.txt"
    assert lines[-1] == "[200 of 250 paths shown — narrow the glob]"


async def test_find_no_match_and_missing_folder(harness) -> None:
    none = await harness.one("find", {"paths": "*.rs"})
    assert not none.is_error
    assert none.content.startswith("No files match *.rs")
    missing = await harness.one("find", {"paths": "nope/**/*.rs"})
    assert missing.content.startswith("[not_found] 'nope' (from 'nope/**/*.rs') does not exist")
