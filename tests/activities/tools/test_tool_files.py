"""read, ls, write, edit, apply_patch and the todo list, as a model sees them."""

from __future__ import annotations

import hashlib

import pytest


def _lines(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


# read


async def test_read_numbers_lines(harness) -> None:
    (harness.workdir / "a.txt").write_text("alpha\nbeta\n")
    result = await harness.one("read", {"path": "a.txt"})
    assert not result.is_error
    assert result.content == "1\talpha\n2\tbeta"


async def test_read_line_range_and_raw(harness) -> None:
    (harness.workdir / "a.txt").write_text(_lines(10))
    ranged = await harness.one("read", {"path": "a.txt:3-5"})
    assert ranged.content == "3\tline 3\n4\tline 4\n5\tline 5"
    open_ended = await harness.one("read", {"path": "a.txt:9-"})
    assert open_ended.content == "9\tline 9\n10\tline 10"
    raw = await harness.one("read", {"path": "a.txt:raw"})
    assert raw.content == _lines(10)


async def test_read_caps_at_3000_lines_and_says_how_to_continue(harness) -> None:
    (harness.workdir / "big.txt").write_text(_lines(3200))
    result = await harness.one("read", {"path": "big.txt"})
    body = result.content.splitlines()
    assert body[0] == "1\tline 1"
    assert body[2999] == "3000\tline 3000"
    assert "3001\t" not in result.content
    assert "showing lines 1-3000 of 3200" in body[-1]
    assert "big.txt:3001-" in body[-1]


async def test_read_range_past_the_end_is_invalid_args(harness) -> None:
    (harness.workdir / "a.txt").write_text(_lines(3))
    result = await harness.one("read", {"path": "a.txt:10-20"})
    assert result.is_error
    assert result.content.startswith("[invalid_args] read: line 10 is past the end of a.txt")
    assert "— pick a range within 1-3" in result.content


async def test_read_missing_file_is_not_found(harness) -> None:
    result = await harness.one("read", {"path": "nope.txt"})
    assert result.is_error
    assert result.content.startswith("[not_found] 'nope.txt' does not exist — ")


async def test_read_directory_lists_it(harness) -> None:
    (harness.workdir / "src").mkdir()
    (harness.workdir / "src" / "m.py").write_text("x = 1\n")
    (harness.workdir / "src" / "pkg").mkdir()
    result = await harness.one("read", {"path": "src"})
    assert result.content == "m.py\npkg/"


async def test_read_binary_file_fails_with_a_hint(harness) -> None:
    (harness.workdir / "blob.bin").write_bytes(b"\x00\x01\x02")
    result = await harness.one("read", {"path": "blob.bin"})
    assert result.is_error
    assert result.content.startswith("[failed] blob.bin is a binary file")


async def test_read_url_is_refused_without_network(harness) -> None:
    result = await harness.one("read", {"path": "https://example.com/x"})
    assert result.is_error
    assert result.content.startswith("[failed] URL reads are not available on this worker")


async def test_read_handoff_and_plan_uris(harness) -> None:
    handoff = harness.run_dir / "handoffs" / "alpha" / "HANDOFF.md"
    handoff.parent.mkdir(parents=True)
    handoff.write_text("# Handoff\n## Summary\nall good\n")
    result = await harness.one("read", {"path": "run://handoffs/alpha/HANDOFF.md"})
    assert result.content.splitlines()[2] == "3\tall good"

    plan = harness.run_dir / "artifacts" / "PLAN.md"
    plan.parent.mkdir(parents=True)
    plan.write_text("# Plan\n")
    assert (await harness.one("read", {"path": "run://PLAN.md:raw"})).content == "# Plan\n"


@pytest.mark.parametrize(
    "uri",
    [
        "run://handoffs/../HANDOFF.md",
        "run://handoffs/./HANDOFF.md",
        "run://handoffs/alpha/other.txt",
        "run://handoffs/alpha/../../x/HANDOFF.md",
        "run://transcripts/alpha.jsonl",
    ],
)
async def test_read_rejects_other_run_uris(harness, uri: str) -> None:
    result = await harness.one("read", {"path": uri})
    assert result.is_error
    assert result.content.startswith("[not_found]")
    assert "run://handoffs/{node}/HANDOFF.md" in result.content


async def test_read_records_reads_with_an_outline(harness) -> None:
    (harness.workdir / "lib.py").write_text("class Store:\n    pass\n\ndef load():\n    pass\n")
    outcome = await harness.run(("read", {"path": "lib.py"}))
    assert outcome.reads == [{"path": "lib.py", "outline": "class Store, def load"}]


# ls


async def test_ls_lists_the_folder(harness) -> None:
    (harness.workdir / "b.txt").write_text("")
    (harness.workdir / "a").mkdir()
    (harness.workdir / "link").symlink_to("b.txt")
    result = await harness.one("ls", {"path": "."})
    assert result.content == "a/\nb.txt\nlink@"


async def test_ls_missing_is_not_found(harness) -> None:
    result = await harness.one("ls", {"path": "ghost"})
    assert result.content.startswith("[not_found] 'ghost' does not exist — ")


# write


async def test_write_creates_parent_folders_and_records_the_change(harness) -> None:
    outcome = await harness.run(("write", {"path": "deep/er/new.txt", "content": "hi\n"}))
    assert (harness.workdir / "deep/er/new.txt").read_text() == "hi\n"
    assert outcome.results[0].content == "Created deep/er/new.txt (3 bytes, 1 lines)."
    [record] = outcome.changed_files
    assert record["path"] == "deep/er/new.txt"
    assert record["op"] == "create"
    assert record["diff_summary"] == "+1|hi"
    [changed] = harness.of_type("FileChanged")
    assert changed["record"] == record
    [batch] = harness.of_type("EditBatchRecorded")
    assert batch["batch"]["snapshots"] == [
        {
            "path": "deep/er/new.txt",
            "existed": False,
            "after_known": True,
            "after_sha256": hashlib.sha256(b"hi\n").hexdigest(),
        }
    ]
    assert batch["batch"]["batch_id"] == record["batch_id"]
    assert (batch["batch"]["tool_call_id"], batch["batch"]["tool_name"]) == ("c1", "write")
    kinds = [e["type"] for e in harness.events]
    assert kinds == ["EditBatchRecorded", "FileChanged"]


async def test_write_overwrite_keeps_a_before_snapshot(harness) -> None:
    target = harness.workdir / "a.txt"
    target.write_text("old\n")
    target.chmod(0o640)
    outcome = await harness.run(("write", {"path": "a.txt", "content": "new\n"}))
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert outcome.changed_files[0]["op"] == "update"
    [batch] = harness.of_type("EditBatchRecorded")
    [snapshot] = batch["batch"]["snapshots"]
    assert snapshot["content"] == "old\n"
    assert (harness.run_dir / "snapshots" / snapshot["sha256"]).read_text() == "old\n"
    assert not [p for p in harness.workdir.iterdir() if p.name.endswith(".tmp")]


async def test_write_without_content_is_invalid_args(harness) -> None:
    for args in ({"path": "a.txt"}, {"path": "a.txt", "content": None}):
        result = await harness.one("write", args)
        assert result.is_error
        assert result.content.startswith("[invalid_args] write: missing field 'content' — ")
    assert not (harness.workdir / "a.txt").exists()


async def test_large_before_snapshots_stay_out_of_the_event(harness) -> None:
    big = "x" * 20_000
    (harness.workdir / "big.txt").write_text(big)
    await harness.run(("write", {"path": "big.txt", "content": "small"}))
    [batch] = harness.of_type("EditBatchRecorded")
    [snapshot] = batch["batch"]["snapshots"]
    assert "content" not in snapshot
    assert (harness.run_dir / "snapshots" / snapshot["sha256"]).read_text() == big


async def test_write_empty_content_is_allowed(harness) -> None:
    result = await harness.one("write", {"path": "empty.txt", "content": ""})
    assert not result.is_error
    assert (harness.workdir / "empty.txt").read_text() == ""


async def test_write_plan_draft_goes_to_run_artifacts(harness) -> None:
    outcome = await harness.run(("write", {"path": "run://PLAN.md", "content": "# Plan\n"}))
    assert (harness.run_dir / "artifacts" / "PLAN.md").read_text() == "# Plan\n"
    assert outcome.changed_files == []


# edit


async def test_edit_replaces_unique_text(harness) -> None:
    (harness.workdir / "a.py").write_text("x = 1\ny = 2\n")
    edits = [{"old_text": "y = 2", "new_text": "y = 3"}]
    outcome = await harness.run(("edit", {"path": "a.py", "edits": edits}))
    assert (harness.workdir / "a.py").read_text() == "x = 1\ny = 3\n"
    assert outcome.results[0].content == "Edited a.py: 1 edit applied (+1 -1|y = 3)."
    assert outcome.changed_files[0]["diff_summary"] == "+1 -1|y = 3"


async def test_edit_missing_old_text_changes_nothing(harness) -> None:
    (harness.workdir / "a.py").write_text("x = 1\n")
    edits = [{"old_text": "x = 1", "new_text": "x = 2"}, {"old_text": "zzz", "new_text": ""}]
    result = await harness.one("edit", {"path": "a.py", "edits": edits})
    assert result.is_error
    assert result.content.startswith("[invalid_args] edit: edits[1].old_text was not found in a.py")
    assert (harness.workdir / "a.py").read_text() == "x = 1\n"


async def test_edit_ambiguous_old_text_asks_for_context_or_all(harness) -> None:
    (harness.workdir / "a.py").write_text("a\na\n")
    result = await harness.one(
        "edit", {"path": "a.py", "edits": [{"old_text": "a", "new_text": "b"}]}
    )
    assert result.content.startswith("[invalid_args] edit: edits[0].old_text matches 2 places")
    assert '"all": true' in result.content
    edits = [{"old_text": "a", "new_text": "b", "all": True}]
    assert not (await harness.one("edit", {"path": "a.py", "edits": edits})).is_error
    assert (harness.workdir / "a.py").read_text() == "b\nb\n"


async def test_edit_matches_lf_text_in_a_crlf_file(harness) -> None:
    (harness.workdir / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    edits = [{"old_text": "one\ntwo", "new_text": "1\n2"}]
    assert not (await harness.one("edit", {"path": "w.txt", "edits": edits})).is_error
    assert (harness.workdir / "w.txt").read_bytes() == b"1\r\n2\r\n"


async def test_edit_missing_file_and_hashline_mode(harness) -> None:
    missing = await harness.one(
        "edit", {"path": "no.py", "edits": [{"old_text": "a", "new_text": "b"}]}
    )
    assert missing.content.startswith("[not_found] 'no.py' does not exist — create it with write")
    hashline = await harness.one("edit", {"input": "¶a.py#AB\n"})
    assert hashline.content.startswith("[invalid_args] edit: hashline mode")


async def test_schema_problems_are_invalid_args(harness) -> None:
    result = await harness.one("edit", {"path": "a.py", "edits": [{"old_text": "a"}]})
    assert result.content.startswith("[invalid_args] edit: edits[0]: 'new_text' is a required")


# apply_patch


PATCH = """*** Begin Patch
*** Add File: docs/new.md
+# New
+text
*** Update File: src/app.py
@@ def main():
-    return 1
+    return 2
*** Delete File: old.txt
*** Update File: src/util.py
*** Move to: src/helpers.py
@@
-A = 1
+A = 10
*** End Patch"""


async def test_apply_patch_adds_updates_moves_and_deletes(harness) -> None:
    src = harness.workdir / "src"
    src.mkdir()
    (src / "app.py").write_text("import os\n\ndef main():\n    return 1\n")
    (src / "util.py").write_text("A = 1\nB = 2\n")
    (harness.workdir / "old.txt").write_text("bye\n")
    outcome = await harness.run(("apply_patch", {"input": PATCH}))
    assert outcome.results[0].content == (
        "Success. Updated the following files:\n"
        "A docs/new.md\nM src/app.py\nD old.txt\nR src/util.py -> src/helpers.py"
    )
    assert (harness.workdir / "docs/new.md").read_text() == "# New\ntext\n"
    assert (src / "app.py").read_text() == "import os\n\ndef main():\n    return 2\n"
    assert not (harness.workdir / "old.txt").exists()
    assert not (src / "util.py").exists()
    assert (src / "helpers.py").read_text() == "A = 10\nB = 2\n"
    ops = [(r["path"], r["op"], r.get("rename_to")) for r in outcome.changed_files]
    assert ops == [
        ("docs/new.md", "create", None),
        ("src/app.py", "update", None),
        ("old.txt", "delete", None),
        ("src/util.py", "rename", "src/helpers.py"),
    ]


async def test_apply_patch_failing_hunk_changes_nothing(harness) -> None:
    (harness.workdir / "a.py").write_text("x = 1\n")
    patch = (
        "*** Begin Patch\n*** Add File: b.py\n+new\n*** Update File: a.py\n@@\n-x = 99\n+x = 2\n"
        "*** End Patch"
    )
    result = await harness.one("apply_patch", {"input": patch})
    assert result.is_error
    assert result.content.startswith(
        "[invalid_args] apply_patch: the expected lines were not found"
    )
    assert not (harness.workdir / "b.py").exists()
    assert (harness.workdir / "a.py").read_text() == "x = 1\n"
    assert harness.of_type("FileChanged") == []


async def test_apply_patch_tolerates_trailing_whitespace_differences(harness) -> None:
    (harness.workdir / "a.py").write_text("x = 1   \ny = 2\n")
    patch = "*** Begin Patch\n*** Update File: a.py\n x = 1\n-y = 2\n+y = 3\n*** End Patch"
    assert not (await harness.one("apply_patch", {"input": patch})).is_error
    assert (harness.workdir / "a.py").read_text() == "x = 1   \ny = 3\n"


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        ("*** Update File: a.py\n", "must start with '*** Begin Patch'"),
        ("*** Begin Patch\n*** Add File: a.py\n+x\n", "must end with '*** End Patch'"),
        ("*** Begin Patch\n*** Add File: a.py\nx\n*** End Patch", "must start with '+'"),
        ("*** Begin Patch\n*** End Patch", "no file sections"),
    ],
)
async def test_apply_patch_format_errors(harness, patch: str, problem: str) -> None:
    result = await harness.one("apply_patch", {"input": patch})
    assert result.content.startswith("[invalid_args] apply_patch: ")
    assert problem in result.content


async def test_apply_patch_update_of_missing_file_is_not_found(harness) -> None:
    patch = "*** Begin Patch\n*** Update File: ghost.py\n@@\n-a\n+b\n*** End Patch"
    result = await harness.one("apply_patch", {"input": patch})
    assert result.content.startswith("[not_found] 'ghost.py' does not exist — ")


# todo list


async def test_todo_list_renders_progress(harness) -> None:
    todos = [
        {"content": "read the code", "status": "completed"},
        {"content": "fix the bug", "status": "in_progress"},
        {"content": "run tests", "status": "pending"},
    ]
    result = await harness.one("openflow_update_todo_list", {"todos": todos})
    assert result.content == (
        "Todo list updated (1/3 completed):\n[x] read the code\n[~] fix the bug\n[ ] run tests"
    )


@pytest.mark.parametrize(
    ("todos", "problem"),
    [
        ([], "1 to 12 items"),
        ([{"content": "x", "status": "pending"}] * 13, "1 to 12 items"),
        ([{"content": "", "status": "pending"}], "todos[0].content is empty"),
        ([{"content": "x" * 161, "status": "pending"}], "161 characters"),
        ([{"content": "x", "status": "done"}], "todos[0].status is 'done'"),
        ([{"content": "a", "status": "in_progress"}] * 2, "2 items are in_progress"),
    ],
)
async def test_todo_list_validation(harness, todos: list, problem: str) -> None:
    result = await harness.one("openflow_update_todo_list", {"todos": todos})
    assert result.is_error
    assert result.content.startswith("[invalid_args] openflow_update_todo_list: ")
    assert problem in result.content
