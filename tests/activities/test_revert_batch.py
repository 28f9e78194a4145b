"""Reverting an edit batch in a folder: every file checked first, then restored or refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

from openflow import contracts as c
from openflow.activities.revert_batch import revert
from openflow.activities.store import FileRunStore
from openflow.engine.events import EditBatch, FileSnapshot


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def batch(*snapshots: FileSnapshot) -> EditBatch:
    return EditBatch(batch_id="edit-1", node_id="a", snapshots=snapshots)


def run(tmp_path: Path, store: FileRunStore, *snapshots: FileSnapshot) -> c.RevertResult:
    inp = c.RevertInput(
        run_id="run-1", execution_dir=str(tmp_path / "work"), batch=batch(*snapshots)
    )
    return revert(store, inp)


def test_update_create_delete_and_rename_are_undone(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    store = FileRunStore(tmp_path / "runs")
    big = "x" * 10_000
    store.put_bytes("run-1", f"snapshots/{sha(big)}", big.encode())
    (work / "up.txt").write_text("new")
    (work / "made.txt").write_text("made")
    (work / "moved.txt").write_text("moved")
    result = run(
        tmp_path,
        store,
        FileSnapshot(path="up.txt", content="old", after_known=True, after_sha256=sha("new")),
        FileSnapshot(path="made.txt", existed=False, after_known=True, after_sha256=sha("made")),
        FileSnapshot(path="gone.txt", sha256=sha(big), after_known=True),
        FileSnapshot(
            path="was.txt",
            content="moved",
            after_known=True,
            after_sha256=sha("moved"),
            rename_to="moved.txt",
        ),
    )
    assert result.error is None and result.paths == ["up.txt", "made.txt", "gone.txt", "was.txt"]
    assert (work / "up.txt").read_text() == "old"
    assert not (work / "made.txt").exists() and not (work / "moved.txt").exists()
    assert (work / "gone.txt").read_text() == big and (work / "was.txt").read_text() == "moved"


def test_a_file_changed_since_refuses_the_whole_batch_naming_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    store = FileRunStore(tmp_path / "runs")
    (work / "a.txt").write_text("new")
    (work / "b.txt").write_text("changed by hand")
    result = run(
        tmp_path,
        store,
        FileSnapshot(path="a.txt", content="old", after_known=True, after_sha256=sha("new")),
        FileSnapshot(path="b.txt", content="old", after_known=True, after_sha256=sha("new")),
    )
    assert result.error is not None and "'b.txt' has changed since" in result.error
    assert (work / "a.txt").read_text() == "new"


def test_records_without_what_was_written_and_paths_outside_are_refused(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    store = FileRunStore(tmp_path / "runs")
    old = run(tmp_path, store, FileSnapshot(path="a.txt", content="old"))
    assert old.error is not None and "revert it by hand" in old.error
    outside = run(tmp_path, store, FileSnapshot(path="../x.txt", content="o", after_known=True))
    assert outside.error is not None and "outside the run's folder" in outside.error
    missing = run(tmp_path, store, FileSnapshot(path="big.txt", sha256="0" * 64, after_known=True))
    assert missing.error is not None and "no longer holds" in missing.error
