"""The live channel: ordered per-run events across processes, resumable, capped, never raising."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from openflow.live import SEQ_FIELD, FileLiveChannel, LiveChannel

REPO = Path(__file__).resolve().parents[1]

PUBLISHER = """
import sys
from pathlib import Path
from openflow.live import FileLiveChannel

if sys.argv[1].startswith("postgresql://"):
    from openflow.database import Database
    from openflow.live_pg import PostgresLiveChannel

    db = Database(sys.argv[1]).open()
    channel = PostgresLiveChannel(db)
else:
    db, channel = None, FileLiveChannel(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    channel.publish("run-1", {"type": "ChatMessageDelta", "delta": f"{sys.argv[2]}-{i}"})
if db is not None:
    db.close()
"""


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a channel lives: a run root folder, or a new database."""
    if request.param == "file":
        return str(tmp_path)
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def channel(where: str) -> Iterator[Any]:
    """A live channel of either kind, polling fast."""
    if not where.startswith("postgresql://"):
        yield FileLiveChannel(Path(where), poll_interval=0.01)
        return
    from openflow.database import Database
    from openflow.live_pg import PostgresLiveChannel

    db = Database(where).open()
    yield PostgresLiveChannel(db, poll_interval=0.2)
    db.close()


async def _take(events: AsyncIterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    taken: list[dict[str, Any]] = []
    async with asyncio.timeout(20):
        async for event in events:
            taken.append(event)
            if len(taken) == count:
                break
    return taken


def _publisher(root: Path | str, name: str, count: int) -> subprocess.Popen[bytes]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", PUBLISHER, str(root), name, str(count)],
        env={**os.environ, "PYTHONPATH": path},
    )


def test_file_channel_is_a_live_channel(tmp_path: Path) -> None:
    assert isinstance(FileLiveChannel(tmp_path), LiveChannel)


async def test_events_arrive_in_order_with_a_live_sequence(channel: LiveChannel) -> None:
    events = channel.subscribe("run-1")
    for i in range(5):
        channel.publish("run-1", {"type": "ChatMessageDelta", "delta": str(i)})
    taken = await _take(events, 5)
    assert [e["delta"] for e in taken] == ["0", "1", "2", "3", "4"]
    assert [e[SEQ_FIELD] for e in taken] == [1, 2, 3, 4, 5]
    channel.publish("run-2", {"delta": "other run"})
    assert [e[SEQ_FIELD] for e in await _take(channel.subscribe("run-2"), 1)] == [1]


async def test_a_follower_resumes_after_the_last_event_it_saw(channel: LiveChannel) -> None:
    for i in range(6):
        channel.publish("run-1", {"delta": str(i)})
    taken = await _take(channel.subscribe("run-1", after=4), 2)
    assert [(e[SEQ_FIELD], e["delta"]) for e in taken] == [(5, "4"), (6, "5")]


async def test_a_subscriber_follows_a_publisher_in_another_process(
    channel: LiveChannel, where: str
) -> None:
    events = channel.subscribe("run-1")
    publisher = _publisher(where, "p", 30)
    taken = await _take(events, 30)
    assert publisher.wait(timeout=20) == 0
    assert [e["delta"] for e in taken] == [f"p-{i}" for i in range(30)]
    assert [e[SEQ_FIELD] for e in taken] == list(range(1, 31))


async def test_publishers_in_several_processes_share_one_gap_free_sequence(
    channel: LiveChannel, where: str
) -> None:
    publishers = [_publisher(where, name, 100) for name in ("a", "b")]
    taken = await _take(channel.subscribe("run-1"), 200)
    assert [p.wait(timeout=20) for p in publishers] == [0, 0]
    assert [e[SEQ_FIELD] for e in taken] == list(range(1, 201))
    for name in ("a", "b"):
        mine = [e["delta"] for e in taken if e["delta"].startswith(f"{name}-")]
        assert mine == [f"{name}-{i}" for i in range(100)]


async def test_the_files_are_capped_and_a_tailing_follower_misses_nothing(
    tmp_path: Path,
) -> None:
    channel = FileLiveChannel(tmp_path, max_bytes=2_000, poll_interval=0.01)
    follower = channel.subscribe("run-1")
    received = []
    for i in range(300):
        channel.publish("run-1", {"type": "ToolOutputDelta", "chunk": "x" * 40, "i": i})
        received.extend(await _take(follower, 1))
    assert [e["i"] for e in received] == list(range(300))
    assert [e[SEQ_FIELD] for e in received] == list(range(1, 301))
    files = sorted(p.name for p in (tmp_path / "run-1").iterdir())
    assert files == ["live.1.jsonl", "live.jsonl"]
    assert sum(p.stat().st_size for p in (tmp_path / "run-1").iterdir()) < 4_200
    late = await _take(channel.subscribe("run-1", after=290), 10)
    assert [e[SEQ_FIELD] for e in late] == list(range(291, 301))


async def test_a_broken_channel_never_raises_into_the_publisher(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_folder = tmp_path / "runs"
    not_a_folder.write_text("a file where the run folders should be")
    channel = FileLiveChannel(not_a_folder)
    with caplog.at_level(logging.WARNING, logger="openflow.live"):
        for i in range(3):
            channel.publish("run-1", {"delta": str(i)})
    warnings = [r for r in caplog.records if r.name == "openflow.live"]
    assert len(warnings) == 1
    assert "not delivered" in warnings[0].getMessage()


async def test_events_that_are_not_plain_json_are_still_delivered(
    channel: LiveChannel, tmp_path: Path
) -> None:
    channel.publish("run-1", {"path": tmp_path, "text": "line one\nline two ✓"})
    (event,) = await _take(channel.subscribe("run-1"), 1)
    assert event["path"] == str(tmp_path)
    assert event["text"] == "line one\nline two ✓"


async def test_an_unreachable_database_never_raises_into_the_publisher(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from openflow.database import Database
    from openflow.live_pg import PostgresLiveChannel

    db = Database(pg_url).open()
    db.close()
    gone = Database(pg_url.rsplit("/", 1)[0] + "/no_such_database", retry_window_s=0)
    channel = PostgresLiveChannel(gone)
    with caplog.at_level(logging.WARNING, logger="openflow.live_pg"):
        started = asyncio.get_running_loop().time()
        for i in range(3):
            channel.publish("run-1", {"delta": str(i)})
        assert asyncio.get_running_loop().time() - started < 0.05
        assert channel.flush(20)
    warnings = [r for r in caplog.records if r.name == "openflow.live_pg"]
    assert len(warnings) == 1
    assert "not delivered" in warnings[0].getMessage()


async def test_the_database_keeps_a_bounded_tail_for_catching_up(database: Any) -> None:
    from openflow.live_pg import PostgresLiveChannel

    channel = PostgresLiveChannel(database, keep=50, poll_interval=0.2)
    for i in range(200):
        channel.publish("run-1", {"i": i})
    assert channel.flush(20)
    late = await _take(channel.subscribe("run-1", after=0), 50)
    assert [e[SEQ_FIELD] for e in late] == list(range(151, 201))
