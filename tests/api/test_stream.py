"""The event stream over a real socket: resumption, several followers, live deltas, keep-alives."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from openflow.worker import build_worker
from tests.api.conftest import ServedApp, node, wait_for_state, workflow_json

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.asyncio(loop_scope="session")

SSE = {"Accept": "text/event-stream"}
ASK = workflow_json([node("ask", requestUserInput=True)])

Frame = dict[str, Any]


def data_of(frame: Frame) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(frame["data"])
    return parsed


async def follow(
    http: httpx.AsyncClient,
    run_id: str,
    *,
    headers: dict[str, str] | None = None,
    until: Callable[[Frame], bool] | None = None,
    timeout: float = 30.0,
) -> tuple[list[Frame], bool]:
    """Read SSE frames until `until` holds (then hang up) or the server ends the stream."""

    async def read() -> tuple[list[Frame], bool]:
        frames: list[Frame] = []
        current: Frame = {}
        request_headers = {**SSE, **(headers or {})}
        async with http.stream("GET", f"/runs/{run_id}/events", headers=request_headers) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            async for line in r.aiter_lines():
                if line == "":
                    if current:
                        frames.append(current)
                        if until is not None and until(current):
                            return frames, False
                    current = {}
                elif line.startswith(":"):
                    current.setdefault("comments", []).append(line[1:].strip())
                else:
                    name, _, value = line.partition(":")
                    current[name] = value[1:] if value.startswith(" ") else value
        return frames, True

    return await asyncio.wait_for(read(), timeout)


def ids(frames: list[Frame]) -> list[int]:
    return [int(f["id"]) for f in frames if "id" in f]


def is_type(kind: str) -> Callable[[Frame], bool]:
    return lambda f: "id" in f and data_of(f)["type"] == kind


async def test_a_follower_resumes_with_last_event_id_without_gap_or_duplicate(
    served: ServedApp, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    async with httpx.AsyncClient(base_url=served.url) as http:
        run_id = (await http.post("/runs", json={"workflow": ASK})).json()["run_id"]
        first, ended = await follow(http, run_id, until=is_type("NodeAwaitingInput"))
        assert not ended
        assert first[0]["retry"] == "2000"
        seen = ids(first)

        answered = await http.post(f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"})
        assert answered.status_code == 200

        rest, ended = await follow(http, run_id, headers={"Last-Event-ID": str(seen[-1])})
        assert ended
        resumed = ids(rest)
        assert seen + resumed == list(range(1, len(seen) + len(resumed) + 1))
        events = [data_of(f) for f in first + rest if "id" in f]
        assert [e["seq"] for e in events] == seen + resumed
        assert events[-1]["type"] == "Finished"
        assert rest[-1]["comments"] == ["end of run"]

        page = (await http.get(f"/runs/{run_id}/events")).json()
        assert page == events

        again, ended = await follow(http, run_id, headers={"Last-Event-ID": str(resumed[-1])})
        assert ended and ids(again) == []


async def test_several_followers_each_get_the_whole_stream(
    served: ServedApp, worker: Worker, script: Any
) -> None:
    script(
        {
            "a": [{"submit": {"summary": "a"}, "delay_ms": 200}],
            "b": [{"submit": {"summary": "b"}, "delay_ms": 200}],
        }
    )
    wf = workflow_json([node("a"), node("b")], [("a", "b")])
    async with httpx.AsyncClient(base_url=served.url) as http:
        run_id = (await http.post("/runs", json={"workflow": wf})).json()["run_id"]
        results = await asyncio.gather(*(follow(http, run_id) for _ in range(3)))
    streams = [[data_of(f) for f in frames if "id" in f] for frames, _ in results]
    assert all(ended for _, ended in results)
    assert streams[0] == streams[1] == streams[2]
    assert [e["seq"] for e in streams[0]] == list(range(1, len(streams[0]) + 1))
    assert streams[0][-1]["type"] == "Finished"


async def test_live_deltas_and_keep_alives_come_between_durable_events(
    served: ServedApp, worker: Worker, script: Any
) -> None:
    script(
        {
            "ask": [
                {"message": "Thinking about names", "stream": True},
                {"ask": "What name?"},
                {"echo": True},
            ]
        }
    )
    async with httpx.AsyncClient(base_url=served.url) as http:
        run_id = (await http.post("/runs", json={"workflow": ASK})).json()["run_id"]
        frames, _ = await follow(
            http, run_id, until=lambda f: "keep-alive" in f.get("comments", [])
        )
        deltas = [f for f in frames if f.get("event") == "delta"]
        assert deltas and all("id" not in f for f in deltas)
        text = "".join(
            data_of(f)["delta"] for f in deltas if data_of(f)["type"] == "ChatMessageDelta"
        )
        assert text == "Thinking about names"
        live_seqs = [data_of(f)["live_seq"] for f in deltas]
        assert live_seqs == sorted(live_seqs)

        skipped, _ = await follow(
            http,
            run_id,
            headers={"Last-Event-ID": str(ids(frames)[-1])},
            until=lambda f: "keep-alive" in f.get("comments", []),
        )
        assert [f for f in skipped if f.get("event") == "delta"] == deltas

        await http.post(f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"})
        late = await http.get(
            f"/runs/{run_id}/events",
            params={"live_after": live_seqs[-1]},
            headers={**SSE, "Last-Event-ID": str(ids(frames)[-1])},
        )
    fresh = [json.loads(line[6:]) for line in late.text.splitlines() if line.startswith("data: ")]
    assert all(e.get("live_seq", live_seqs[-1] + 1) > live_seqs[-1] for e in fresh)
    assert fresh[-1]["type"] == "Finished"


async def test_a_stream_of_an_ended_run_sends_everything_then_ends(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({}, exhausted="echo")
    started = await api.post("/runs", json={"workflow": workflow_json([node("only")])})
    run_id = started.json()["run_id"]
    await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    response = await api.get(f"/runs/{run_id}/events", headers=SSE)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-cache"
    blocks = [b for b in response.text.split("\n\n") if b.startswith("id: ")]
    assert [int(b.split("\n")[0][4:]) for b in blocks] == list(range(1, len(blocks) + 1))
    assert response.text.endswith(": end of run\n\n")

    missing = await api.get("/runs/run-nope/events", headers=SSE)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "run_not_found"


async def test_live_deltas_reach_the_api_from_a_worker_in_another_process_through_postgres(
    openflow_env: dict[str, str], tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openflow.api.app import create_app
    from openflow.testing import write_scripted_settings

    worker_home, api_home = tmp_path / "worker-home", tmp_path / "api-home"
    api_home.mkdir()
    write_scripted_settings(
        worker_home,
        {"ask": [{"message": "Thinking about names", "stream": True}, {"ask": "What name?"}]},
    )
    env = {
        **os.environ,
        **openflow_env,
        "OPENFLOW_HOME": str(worker_home),
        "OPENFLOW_DATABASE_URL": pg_url,
        "OPENFLOW_WORKSPACES": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.workflows.worker_main"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None
        assert await asyncio.to_thread(worker.stdout.readline) == b"worker ready\n"
        monkeypatch.setenv("OPENFLOW_DATABASE_URL", pg_url)
        app = create_app(home=api_home, poll_interval=0.05, keepalive_interval=0.5)
        with ServedApp(app) as served:
            async with httpx.AsyncClient(base_url=served.url) as http:
                run_id = (await http.post("/runs", json={"workflow": ASK})).json()["run_id"]
                await wait_for_state(http, run_id, lambda s: s["status"] == "paused")
                frames, _ = await follow(
                    http, run_id, until=lambda f: "keep-alive" in f.get("comments", [])
                )
        text = "".join(
            data_of(f)["delta"]
            for f in frames
            if f.get("event") == "delta" and data_of(f)["type"] == "ChatMessageDelta"
        )
        assert text == "Thinking about names"
        assert not (worker_home / "runs").exists() and not (api_home / "runs").exists()
    finally:
        worker.kill()
        worker.wait(10)


async def test_a_stream_waits_while_the_run_has_no_worker_and_goes_on_when_one_comes(
    served: ServedApp,
    client: Client,
    task_queue: str,
    openflow_home: Path,
    script: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from openflow.api import sse

    monkeypatch.setattr(sse, "QUERY_TIMEOUT", timedelta(seconds=1))
    caplog.set_level(logging.INFO, logger="openflow.api.sse")
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    async with httpx.AsyncClient(base_url=served.url) as http:
        async with build_worker(client, task_queue, openflow_home):
            run_id = (await http.post("/runs", json={"workflow": ASK})).json()["run_id"]
            stream = asyncio.create_task(follow(http, run_id, timeout=90))
            await wait_for_state(http, run_id, lambda s: s["awaitingNodeIds"] == ["ask"])
        # No worker answers the stream's queries now: they time out, and the stream waits.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while "did not answer" not in caplog.text:
            assert loop.time() < deadline and not stream.done(), "no query timed out"
            await asyncio.sleep(0.05)
        async with build_worker(client, task_queue, openflow_home):
            answered = await http.post(
                f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"}
            )
            assert answered.status_code == 200, answered.text
            frames, ended = await stream
            page = (await http.get(f"/runs/{run_id}/events")).json()
    assert ended and not [f for f in frames if f.get("event") == "error"]
    events = [data_of(f) for f in frames if "id" in f]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events == page and events[-1]["type"] == "Finished"
