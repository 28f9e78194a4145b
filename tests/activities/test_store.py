"""The run store: atomic writes, retry-safe transcript appends, safe keys, local disk and S3."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from openflow.activities.pgstore import PostgresRunStore
from openflow.activities.store import (
    FileRunStore,
    InvalidKey,
    KeyNotFound,
    LogConflict,
    RunStore,
    S3RunStore,
)
from openflow.database import Database

BUCKET = "openflow-runs"


@pytest.fixture
def file_store(tmp_path: Path) -> FileRunStore:
    return FileRunStore(tmp_path / "runs")


@pytest.fixture
def s3_store() -> Iterator[S3RunStore]:
    moto = pytest.importorskip("moto")
    import boto3

    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield S3RunStore(BUCKET, prefix="team/a", client=client)


@pytest.fixture
def postgres_store(database: Database) -> PostgresRunStore:
    return PostgresRunStore(database)


@pytest.fixture(params=["file", "s3", "postgres"])
def store(request: pytest.FixtureRequest) -> RunStore:
    value: RunStore = request.getfixturevalue(f"{request.param}_store")
    return value


def test_bytes_round_trip_and_overwrite(store: RunStore) -> None:
    store.put_bytes("run-1", "handoffs/plan/HANDOFF.md", b"# first")
    store.put_bytes("run-1", "handoffs/plan/HANDOFF.md", b"# second")
    assert store.get_bytes("run-1", "handoffs/plan/HANDOFF.md") == b"# second"
    assert store.exists("run-1", "handoffs/plan/HANDOFF.md")
    assert not store.exists("run-2", "handoffs/plan/HANDOFF.md")


def test_missing_key_is_a_clear_not_found(store: RunStore) -> None:
    with pytest.raises(KeyNotFound, match="'replies/x.json'"):
        store.get_bytes("run-1", "replies/x.json")
    with pytest.raises(FileNotFoundError):
        store.get_bytes("run-1", "replies/x.json")


def test_append_lines_grows_the_log(store: RunStore) -> None:
    assert store.read_lines("run-1", "transcripts/plan.jsonl") == []
    assert store.append_lines("run-1", "transcripts/plan.jsonl", ['{"a":1}', '{"b":2}'], 0) == 2
    assert store.append_lines("run-1", "transcripts/plan.jsonl", [b'{"c":3}'], 2) == 3
    lines = store.read_lines("run-1", "transcripts/plan.jsonl")
    assert [json.loads(line) for line in lines] == [{"a": 1}, {"b": 2}, {"c": 3}]
    assert store.read_lines("run-1", "transcripts/plan.jsonl", start=2) == ['{"c":3}']


def test_a_retried_append_never_duplicates(store: RunStore) -> None:
    store.append_lines("run-1", "t.jsonl", ["1", "2"], 0)
    assert store.append_lines("run-1", "t.jsonl", ["3", "4"], 2) == 4
    assert store.append_lines("run-1", "t.jsonl", ["3", "4"], 2) == 4
    assert store.read_lines("run-1", "t.jsonl") == ["1", "2", "3", "4"]
    assert store.append_lines("run-1", "t.jsonl", ["3b"], 2) == 3
    assert store.read_lines("run-1", "t.jsonl") == ["1", "2", "3b"]


def test_an_append_past_the_end_of_the_log_is_refused(store: RunStore) -> None:
    store.append_lines("run-1", "t.jsonl", ["1"], 0)
    with pytest.raises(LogConflict, match="holds 1 lines but the caller expected 5"):
        store.append_lines("run-1", "t.jsonl", ["x"], 5)
    assert store.read_lines("run-1", "t.jsonl") == ["1"]


def test_line_breaks_inside_a_line_are_refused(store: RunStore) -> None:
    with pytest.raises(InvalidKey, match="line break"):
        store.append_lines("run-1", "t.jsonl", ["a\nb"], 0)


def test_list_by_prefix(store: RunStore) -> None:
    for key in ("handoffs/plan/HANDOFF.md", "handoffs/write/HANDOFF.json", "artifacts/1-bash.txt"):
        store.put_bytes("run-1", key, b"x")
    store.put_bytes("run-2", "handoffs/other/HANDOFF.md", b"x")
    assert store.list("run-1", "handoffs/") == [
        "handoffs/plan/HANDOFF.md",
        "handoffs/write/HANDOFF.json",
    ]
    assert store.list("run-1", "handoffs/pl") == ["handoffs/plan/HANDOFF.md"]
    assert store.list("run-1") == [
        "artifacts/1-bash.txt",
        "handoffs/plan/HANDOFF.md",
        "handoffs/write/HANDOFF.json",
    ]
    assert store.list("run-3") == []


@pytest.mark.parametrize("key", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a\\b"])
def test_keys_cannot_escape_the_run(store: RunStore, key: str) -> None:
    with pytest.raises(InvalidKey):
        store.put_bytes("run-1", key, b"x")


@pytest.mark.parametrize("run_id", ["", ".", "..", "a/b", "a\\b"])
def test_run_id_is_one_path_component(store: RunStore, run_id: str) -> None:
    with pytest.raises(InvalidKey, match="one path component"):
        store.put_bytes(run_id, "k", b"x")


def test_file_store_layout_matches_the_run_folder(file_store: FileRunStore) -> None:
    file_store.put_bytes("run-1", "handoffs/plan/HANDOFF.md", b"# plan")
    run_dir = file_store.run_dir("run-1")
    assert run_dir == file_store.root / "run-1"
    assert (run_dir / "handoffs" / "plan" / "HANDOFF.md").read_text() == "# plan"
    assert [p.name for p in (run_dir / "handoffs" / "plan").iterdir()] == ["HANDOFF.md"]


def test_file_store_defaults_to_openflow_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    assert FileRunStore().root == tmp_path / "runs"


def test_a_torn_last_line_from_a_crash_is_dropped(file_store: FileRunStore) -> None:
    file_store.append_lines("run-1", "t.jsonl", ["1", "2"], 0)
    with (file_store.run_dir("run-1") / "t.jsonl").open("ab") as log:
        log.write(b'{"half')
    assert file_store.read_lines("run-1", "t.jsonl") == ["1", "2"]
    assert file_store.append_lines("run-1", "t.jsonl", ["3"], 2) == 3
    assert file_store.read_lines("run-1", "t.jsonl") == ["1", "2", "3"]


def test_a_failed_write_leaves_the_old_file(
    file_store: FileRunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_store.put_bytes("run-1", "state.json", b"old")

    def fail(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("openflow.activities.store.os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        file_store.put_bytes("run-1", "state.json", b"new")
    assert file_store.get_bytes("run-1", "state.json") == b"old"
    assert file_store.list("run-1") == ["state.json"]


def test_a_log_changed_by_another_writer_is_read_again(tmp_path: Path) -> None:
    mine, other = FileRunStore(tmp_path), FileRunStore(tmp_path)
    assert mine.append_lines("run-1", "t.jsonl", ["a", "b", "c"], expected_len=0) == 3
    # Another worker retried an earlier turn: it kept one line and wrote another after it.
    assert other.append_lines("run-1", "t.jsonl", ["x"], expected_len=1) == 2
    assert mine.append_lines("run-1", "t.jsonl", ["y"], expected_len=2) == 3
    assert mine.read_lines("run-1", "t.jsonl") == ["a", "x", "y"]
    # A torn tail a crash left behind is dropped even after an append that did not read.
    assert mine.append_lines("run-1", "t.jsonl", ["z"], expected_len=3) == 4
    with (tmp_path / "run-1" / "t.jsonl").open("ab") as handle:
        handle.write(b'{"half')
    assert mine.append_lines("run-1", "t.jsonl", ["w"], expected_len=4) == 5
    assert mine.read_lines("run-1", "t.jsonl") == ["a", "x", "y", "z", "w"]
    assert mine.append_lines("run-1", "t.jsonl", [], expected_len=5) == 5
    assert mine.stamp("run-1", "t.jsonl") == other.stamp("run-1", "t.jsonl")
    assert mine.stamp("run-1", "missing.jsonl") is None
