"""The batch executor: ordering, parallelism, locks, cancel, retries, spill and the result cache."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, ClassVar

from openflow.activities.tools import (
    Failed,
    ReadRecord,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    builtin_tools,
    tool_backoff_ms,
)
from openflow.activities.tools.fs import ReadTool
from openflow.activities.tools.spill import SPILL_THRESHOLD_BYTES
from openflow.activities.tools.writes import WriteTool
from openflow.engine.transcript import ToolCall

# Tools that record when they run, for timing assertions.


class _BarrierRead(ReadTool):
    """A real read that blocks until a second read is running at the same time."""

    barrier: ClassVar[threading.Barrier]

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        self.barrier.wait(timeout=5)
        return super().run_sync(ctx, args)


class _TimedWrite(WriteTool):
    """A real write that records when it held the file."""

    spans: ClassVar[list[tuple[float, float]]]

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        start = time.monotonic()
        time.sleep(0.05)  # widen the window in which an unserialized write would overlap
        output = super().run_sync(ctx, args)
        self.spans.append((start, time.monotonic()))
        return output


class _GatedWrite(WriteTool):
    """A real write that waits inside its thread until the test opens the gate."""

    entered: ClassVar[threading.Event]
    gate: ClassVar[threading.Event]

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        self.entered.set()
        self.gate.wait(timeout=5)
        return super().run_sync(ctx, args)


class _Flaky(Tool):
    name = "flaky"
    description = "fails with a transient error, then succeeds"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    failures: ClassVar[list[str]]

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        if self.failures:
            raise Failed(self.failures.pop(0))
        return ToolOutput(content="finally")


class _Sized(Tool):
    name = "sized"
    description = "returns a given number of bytes"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }
    tier = "read"
    concurrency = "shared"

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        n = args["n"]
        body = "".join(f"{i:09d}\n" for i in range(n // 10 + 1))
        return ToolOutput(content=("HEAD" + body)[: n - 4] + "TAIL")


class _Crash(Tool):
    name = "crash"
    description = "has a bug"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        raise RuntimeError("boom")


def _registry(*extra: Tool) -> ToolRegistry:
    names = {t.name for t in extra}
    return ToolRegistry([*(t for t in builtin_tools() if t.name not in names), *extra])


# ordering and results


async def test_every_call_gets_one_result_in_call_order(harness) -> None:
    (harness.workdir / "a.txt").write_text("a\n")
    outcome = await harness.run(
        ("read", {"path": "a.txt"}),
        ("no_such_tool", {}),
        ("write", {"path": "b.txt", "content": "b"}),
        ("ls", {"path": "."}),
        ("read", {"path": "missing"}),
    )
    assert [r.tool_call_id for r in outcome.results] == ["c1", "c2", "c3", "c4", "c5"]
    assert outcome.results[1].content == "Tool unavailable: tool no_such_tool is not registered"
    assert outcome.results[1].is_error
    assert outcome.results[3].content == "a.txt\nb.txt"
    assert outcome.results[4].content.startswith("[not_found]")
    assert not outcome.interrupted


async def test_a_crashing_tool_becomes_a_failed_result(harness) -> None:
    harness.registry = _registry(_Crash())
    outcome = await harness.run(("crash", {}), ("ls", {"path": "."}))
    assert outcome.results[0].content.startswith("[failed] crash stopped on an internal error")
    assert not outcome.results[1].is_error


async def test_intent_is_ignored_by_tools(harness) -> None:
    (harness.workdir / "a.txt").write_text("a\n")
    result = await harness.one("read", {"path": "a.txt", "_i": "look at a"})
    assert result.content == "1\ta"


# concurrency


async def test_adjacent_shared_reads_run_at_the_same_time(harness) -> None:
    (harness.workdir / "a.txt").write_text("a\n")
    (harness.workdir / "b.txt").write_text("b\n")
    _BarrierRead.barrier = threading.Barrier(2)
    harness.registry = _registry(_BarrierRead())
    outcome = await asyncio.wait_for(
        harness.run(("read", {"path": "a.txt"}), ("read", {"path": "b.txt"})), 10
    )
    assert [r.content for r in outcome.results] == ["1\ta", "1\tb"]
    assert not _BarrierRead.barrier.broken


async def test_writes_to_one_path_from_two_nodes_never_overlap(harness) -> None:
    _TimedWrite.spans = []
    harness.registry = _registry(_TimedWrite())
    batches = [
        harness.run(("write", {"path": "same.txt", "content": f"{node}\n"}), ctx=harness.ctx(node))
        for node in ("alpha", "beta", "gamma")
    ]
    await asyncio.gather(*batches)
    spans = sorted(_TimedWrite.spans)
    assert len(spans) == 3
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, "two writes to the same file ran at the same time"


async def test_lock_keys_follow_the_spec(harness) -> None:
    registry = harness.registry
    ctx = harness.ctx("node-1")
    write = registry.get("write")
    assert write is not None
    assert sorted(write.lock_keys(ctx, {"path": "./src/../a.txt"})) == [
        "file-mutation",
        "path:a.txt",
    ]
    patch = registry.get("apply_patch")
    assert patch is not None
    text = "*** Begin Patch\n*** Update File: b.py\n*** Move to: c.py\n*** Delete File: d.py\n"
    assert patch.lock_keys(ctx, {"input": text}) == [
        "file-mutation",
        "path:b.py",
        "path:c.py",
        "path:d.py",
    ]
    bash = registry.get("bash")
    assert bash is not None
    assert bash.lock_keys(ctx, {"command": "ls"}) == ["node-1\x1ftool:bash"]
    read = registry.get("read")
    assert read is not None
    assert read.lock_keys(ctx, {"path": "a.txt"}) == []


# cancel


async def test_cancel_mid_batch_answers_every_call(harness, wait_until) -> None:
    started = harness.workdir / "started"
    ctx = harness.ctx()
    task = asyncio.create_task(
        harness.run(
            ("read", {"path": "."}),
            ("bash", {"command": f"touch {started}; sleep 300"}),
            ("write", {"path": "late.txt", "content": "never"}),
            ("read", {"path": "late.txt"}),
            ctx=ctx,
        )
    )
    await wait_until(started.exists)
    ctx.cancel.set()
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.interrupted
    contents = [r.content for r in outcome.results]
    assert not outcome.results[0].is_error
    assert contents[1:] == [
        "[cancelled] bash was cancelled",
        "[cancelled] write was cancelled",
        "[cancelled] read was cancelled",
    ]
    assert all(r.is_error for r in outcome.results[1:])
    assert not (harness.workdir / "late.txt").exists()


async def test_a_write_under_way_when_cancelled_finishes_and_reports(harness, wait_until) -> None:
    _GatedWrite.entered, _GatedWrite.gate = threading.Event(), threading.Event()
    harness.registry = _registry(_GatedWrite())
    ctx = harness.ctx()
    task = asyncio.create_task(
        harness.run(
            ("write", {"path": "first.txt", "content": "1"}),
            ("write", {"path": "second.txt", "content": "2"}),
            ctx=ctx,
        )
    )
    await wait_until(_GatedWrite.entered.is_set)
    ctx.cancel.set()
    for _ in range(5):
        await asyncio.sleep(0)  # let the executor see the cancel while the write is in its thread
    assert harness.locks.is_locked("path:first.txt")
    _GatedWrite.gate.set()
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.interrupted
    assert outcome.results[0].content == "Created first.txt (1 bytes, 1 lines)."
    assert outcome.results[1].content == "[cancelled] write was cancelled"
    assert [r["path"] for r in outcome.changed_files] == ["first.txt"]
    assert (harness.workdir / "first.txt").read_text() == "1"
    assert not (harness.workdir / "second.txt").exists()


async def test_cancel_before_the_batch_cancels_everything(harness) -> None:
    ctx = harness.ctx()
    ctx.cancel.set()
    outcome = await harness.run(
        ("ls", {"path": "."}), ("write", {"path": "a", "content": ""}), ctx=ctx
    )
    assert outcome.interrupted
    assert [r.content for r in outcome.results] == [
        "[cancelled] ls was cancelled",
        "[cancelled] write was cancelled",
    ]


# retries


async def test_transient_failures_are_retried_with_backoff(harness) -> None:
    _Flaky.failures = ["upstream returned 503", "connection reset by peer"]
    harness.registry = _registry(_Flaky())
    result = await harness.one("flaky", {}, retry_policy=(3, 1))
    assert result.content == "finally"
    retries = harness.of_type("ToolRetrying")
    assert [e["attempt"] for e in retries] == [2, 3]
    assert retries[0]["backoff_ms"] == tool_backoff_ms(1, 1, "node")
    assert retries[0]["tool_call_id"] == "c1"


async def test_retries_stop_at_the_policy_limit(harness) -> None:
    _Flaky.failures = ["timed out"] * 5
    harness.registry = _registry(_Flaky())
    result = await harness.one("flaky", {}, retry_policy=(1, 1))
    assert result.content == "[failed] timed out"
    assert len(harness.of_type("ToolRetrying")) == 1


async def test_permanent_failures_are_not_retried(harness) -> None:
    _Flaky.failures = ["disk full"]
    harness.registry = _registry(_Flaky())
    result = await harness.one("flaky", {}, retry_policy=(3, 1))
    assert result.content == "[failed] disk full"
    assert harness.of_type("ToolRetrying") == []


def test_backoff_formula() -> None:
    jitter = tool_backoff_ms(0, 1, "n")
    assert 100 <= jitter < 500
    assert tool_backoff_ms(1000, 0, "n") == 1000 + jitter
    assert tool_backoff_ms(1000, 1, "n") == 1000 + jitter
    assert tool_backoff_ms(1000, 3, "n") == 4000 + jitter
    assert tool_backoff_ms(1000, 10, "n") == 30000 + jitter


# spill


async def test_output_at_the_threshold_is_not_spilled(harness) -> None:
    harness.registry = _registry(_Sized())
    result = await harness.one("sized", {"n": SPILL_THRESHOLD_BYTES})
    assert len(result.content.encode()) == SPILL_THRESHOLD_BYTES
    assert result.artifact_ids == ()
    assert harness.of_type("ToolArtifactCreated") == []


async def test_output_over_50000_bytes_spills_to_an_artifact(harness) -> None:
    harness.registry = _registry(_Sized())
    result = await harness.one("sized", {"n": SPILL_THRESHOLD_BYTES + 1})
    [artifact_id] = result.artifact_ids
    head, rest = result.content.split("\n[... ", 1)
    marker, tail = rest.split(" ...]\n", 1)
    assert head.startswith("HEAD")
    assert tail.endswith("TAIL")
    assert len(head.encode()) == 20_000
    assert len(tail.encode()) == 20_000
    assert f"artifact:{artifact_id}" in marker
    truncation = result.output_meta["truncation"]
    assert truncation["strategy"] == "middle"
    assert truncation["totalBytes"] == 50_001
    assert truncation["shownBytes"] == 40_000
    assert truncation["elidedBytes"] == 10_001
    assert truncation["totalLines"] == truncation["shownLines"] + truncation["elidedLines"]
    [event] = harness.of_type("ToolArtifactCreated")
    assert event["artifact_id"] == artifact_id
    assert event["tool_name"] == "sized"
    assert event["size_bytes"] == 50_001
    assert event["path"].endswith(f"artifacts/{artifact_id}-sized.txt")

    stored = harness.run_dir / "artifacts" / f"{artifact_id}-sized.txt"
    assert len(stored.read_bytes()) == 50_001
    first = await harness.one("read", {"path": f"artifact:{artifact_id}:1-2"})
    assert first.content == "1\tHEAD000000000\n2\t000000001"
    raw = await harness.one("read", {"path": f"artifact:{artifact_id}:raw"})
    assert raw.content.startswith("HEAD000000000\n000000001\n")
    assert raw.artifact_ids == (), "reading an artifact must not spill into another one"
    continuation = raw.content.rsplit("read '", 1)[1].split("'", 1)[0]
    rest = await harness.one("read", {"path": continuation})
    assert rest.content.endswith("\t000TAIL")
    assert rest.artifact_ids == ()
    missing = await harness.one("read", {"path": "artifact:0000-nope"})
    assert missing.content.startswith("[not_found] artifact '0000-nope' does not exist")


async def test_bash_output_spills_too(harness) -> None:
    result = await harness.one("bash", {"command": "seq 1 20000"})
    assert result.artifact_ids
    assert result.content.startswith("1\n2\n3\n")
    assert result.content.endswith("19999\n20000\n[exit code 0]")


# result cache


async def test_same_conversation_repeat_gets_a_stub(harness) -> None:
    (harness.workdir / "a.py").write_text("def f():\n    pass\n")
    first = await harness.run(ToolCall(id="t1", name="read", arguments={"path": "a.py"}))
    again = await harness.run(
        ToolCall(id="t2", name="read", arguments={"path": "a.py", "_i": "again"})
    )
    stub = again.results[0].content
    assert "identical to tool call t1" in stub
    assert "2 lines" in stub
    assert "'1\\tdef f():'" in stub
    assert again.results[0].output_meta == {
        "cache": {"hit": "same_conversation", "tool_call_id": "t1"}
    }
    assert first.reads == again.reads == [{"path": "a.py", "outline": "def f"}]


async def test_other_conversation_gets_content_with_provenance(harness) -> None:
    (harness.workdir / "a.py").write_text("x = 1\n")
    await harness.run(ToolCall(id="t1", name="search", arguments={"pattern": "x", "paths": "."}))
    other = await harness.run(
        ToolCall(id="t9", name="search", arguments={"pattern": "x", "paths": "."}),
        ctx=harness.ctx("beta"),
    )
    content = other.results[0].content
    assert content.startswith("Note: node 'node' ran this exact call (tool call t1)")
    assert content.endswith("\n\na.py:1:x = 1")
    repeat = await harness.run(
        ToolCall(id="t10", name="search", arguments={"pattern": "x", "paths": "."}),
        ctx=harness.ctx("beta"),
    )
    assert "identical to tool call t9" in repeat.results[0].content


async def test_a_changed_file_invalidates_its_cached_read(harness) -> None:
    target = harness.workdir / "a.txt"
    target.write_text("one\n")
    await harness.one("read", {"path": "a.txt"})
    target.write_text("two, longer\n")
    result = await harness.one("read", {"path": "a.txt"})
    assert result.content == "1\ttwo, longer"


async def test_mutations_and_bash_invalidate_search_results(harness) -> None:
    (harness.workdir / "a.txt").write_text("needle\n")
    args = {"pattern": "needle", "paths": "."}
    await harness.one("search", args)
    assert "identical" in (await harness.one("search", args)).content
    await harness.one("bash", {"command": "echo needle > b.txt"})
    assert (await harness.one("search", args)).content == "a.txt:1:needle\nb.txt:1:needle"
    await harness.one("write", {"path": "c.txt", "content": "needle\n"})
    assert (await harness.one("search", args)).content.endswith("c.txt:1:needle")


async def test_errors_are_not_cached(harness) -> None:
    first = await harness.one("read", {"path": "later.txt"})
    assert first.content.startswith("[not_found]")
    (harness.workdir / "later.txt").write_text("here\n")
    assert (await harness.one("read", {"path": "later.txt"})).content == "1\there"


async def test_without_a_cache_every_call_runs(harness) -> None:
    harness.cache = None
    (harness.workdir / "a.txt").write_text("a\n")
    assert (await harness.one("read", {"path": "a.txt"})).content == "1\ta"
    assert (await harness.one("read", {"path": "a.txt"})).content == "1\ta"


def test_read_record_shape() -> None:
    assert ReadRecord(path="a.py").as_dict() == {"path": "a.py"}
