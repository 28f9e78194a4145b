"""Webhooks: a run tells a receiver when it waits for a person and when it ends, signed.

The receiver is a real HTTP server on 127.0.0.1; the run, its notice child workflows and the
delivery activity run on the session's Temporal dev server.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus

from openflow.cli import main
from openflow.contracts import Action
from openflow.server import free_port
from openflow.settings import SettingsError, parse_settings, runtime_settings
from openflow.worker import build_worker
from openflow.workflows import run as run_module
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

API_URL = "https://flows.example.com/base"
SECRET = "whsec-" + uuid.uuid4().hex


class Receiver:
    """A webhook receiver: records each POST; answers 500 to the first `fail_first`."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.attempts = 0
        self.notices: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        # A path nobody could guess, to look for in history.
        self.path = "/hook-" + uuid.uuid4().hex
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.attempts += 1
                    failing = receiver.attempts <= receiver.fail_first
                    if not failing:
                        receiver.notices.append((dict(self.headers.items()), body))
                self.send_response(500 if failing else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{self.path}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(body) for _, body in self.notices]

    async def wait_for(
        self, count: int, timeout: float = 20.0
    ) -> list[tuple[dict[str, str], bytes]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.notices) >= count:
                    return list(self.notices)
            await asyncio.sleep(0.05)
        raise AssertionError(f"{len(self.notices)} notices of {count} after {timeout}s")


@pytest.fixture(autouse=True)
def _api_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run pages under a public address (set before the test's worker is built)."""
    monkeypatch.setenv("OPENFLOW_API_URL", API_URL)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


@pytest_asyncio.fixture(loop_scope="session")
async def notice_children(client: Client, task_queue: str) -> AsyncIterator[list[str]]:
    """Notice workflows a test leaves retrying are ended after it (they would for a day)."""
    ids: list[str] = []
    yield ids
    for child_id in ids:
        handle = client.get_workflow_handle(child_id)
        if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await handle.terminate("test over")


def add_webhooks(home: Path, hooks: list[dict[str, Any]]) -> None:
    path = home / "settings.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["webhooks"] = hooks
    path.write_text(json.dumps(data))


def verified(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("X-OpenFlow-Signature", ""), expected)


async def history_bytes(client: Client, workflow_id: str) -> bytes:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return b"".join(event.SerializeToString() for event in history.events)


async def child_ids(client: Client, run_id: str) -> list[str]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [
        e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
        for e in history.events
        if e.HasField("child_workflow_execution_started_event_attributes")
    ]


def asking_workflow() -> Any:
    return make_workflow([node("ask", requestUserInput=True)], [])


async def test_paused_and_completed_notices_are_signed_and_keep_secrets_out_of_history(
    harness: Harness, receiver: Receiver
) -> None:
    harness.script({"ask": [{"ask": "Which colour?"}, {"submit": {"summary": "blue"}}]})
    add_webhooks(
        harness.home, [{"url": receiver.url, "events": ["paused", "completed"], "secret": SECRET}]
    )
    run_id = await harness.start(asking_workflow(), entrypoint="pick one")

    [(headers, body)] = await receiver.wait_for(1)
    assert verified(headers, body)
    paused = json.loads(body)
    assert paused == {
        "run_id": run_id,
        "workflow_id": "wf-test",
        "status": "paused",
        "event": "paused",
        "awaiting": [{"kind": "input", "node_id": "ask", "question": "Which colour?"}],
        "page_url": f"{API_URL}/ui/runs/{run_id}",
    }
    assert headers["Content-Type"] == "application/json"
    assert headers["X-OpenFlow-Event"] == "paused"

    await harness.handle(run_id).execute_update(
        "act", Action(kind="input", node_id="ask", text="blue")
    )
    assert (await harness.result(run_id)).status == "completed"
    notices = await receiver.wait_for(2)
    headers, body = notices[1]
    assert verified(headers, body)
    assert json.loads(body) == {
        "run_id": run_id,
        "workflow_id": "wf-test",
        "status": "completed",
        "event": "completed",
        "awaiting": [],
        "page_url": f"{API_URL}/ui/runs/{run_id}",
    }
    assert headers["X-OpenFlow-Delivery"] != notices[0][0]["X-OpenFlow-Delivery"]

    children = await child_ids(harness.client, run_id)
    assert len(children) == 2
    for workflow_id in [run_id, *children]:
        recorded = await history_bytes(harness.client, workflow_id)
        assert SECRET.encode() not in recorded
        assert receiver.path.encode() not in recorded
    await harness.replay(run_id)


async def test_a_failing_receiver_gets_the_notice_on_a_later_try(
    harness: Harness, receiver: Receiver
) -> None:
    failing = Receiver(fail_first=2)
    try:
        harness.script({"a": [{"submit": {"summary": "done"}}]})
        add_webhooks(
            harness.home,
            [
                {"url": failing.url, "events": ["completed"], "secret": SECRET},
                {"url": receiver.url, "events": ["paused", "completed"], "secret": "other"},
            ],
        )
        run_id = await harness.start(make_workflow([node("a")], []))
        assert (await harness.result(run_id)).status == "completed"
        [(headers, body)] = await failing.wait_for(1)
        assert failing.attempts == 3
        assert verified(headers, body)
        assert json.loads(body)["event"] == "completed"
        # Each webhook is tried on its own: the healthy one heard it once, with its own key.
        [child] = await child_ids(harness.client, run_id)
        await harness.client.get_workflow_handle(child).result()
        [(headers, body)] = receiver.notices
        assert verified(headers, body, "other") and receiver.attempts == 1
    finally:
        failing.close()


async def test_a_receiver_that_is_down_does_not_hold_up_the_run(
    harness: Harness, notice_children: list[str]
) -> None:
    down = f"http://127.0.0.1:{free_port()}/hook"
    harness.script({"ask": [{"ask": "Go on?"}, {"submit": {"summary": "done"}}]})
    add_webhooks(harness.home, [{"url": down, "secret": SECRET}])
    run_id = await harness.start(asking_workflow())
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    started = time.monotonic()
    await harness.handle(run_id).execute_update(
        "act", Action(kind="input", node_id="ask", text="yes")
    )
    assert (await harness.result(run_id, timeout=10)).status == "completed"
    assert time.monotonic() - started < 5
    children = await child_ids(harness.client, run_id)
    notice_children.extend(children)
    assert len(children) == 2
    # The notices go on trying after the run has closed.
    deadline = time.monotonic() + 10
    while True:
        described = await harness.client.get_workflow_handle(children[-1]).describe()
        pending = described.raw_description.pending_activities
        assert described.status == WorkflowExecutionStatus.RUNNING
        if pending and pending[0].attempt >= 2:
            break
        assert time.monotonic() < deadline, "the delivery was not tried again"
        await asyncio.sleep(0.1)
    failure = pending[0].last_failure.message
    assert "webhooks[0] could not be reached" in failure and "127.0.0.1" not in failure


async def test_a_webhook_gets_only_the_events_it_asked_for(
    harness: Harness, receiver: Receiver
) -> None:
    harness.script({"a": [{"submit": {"summary": "done"}}]})
    add_webhooks(harness.home, [{"url": receiver.url, "events": ["failed"], "secret": SECRET}])
    run_id = await harness.start(make_workflow([node("a")], []))
    assert (await harness.result(run_id)).status == "completed"
    # Nothing to tell, so the run started no notice at all.
    assert await child_ids(harness.client, run_id) == []
    assert receiver.bodies() == []


async def test_a_bad_webhook_entry_stops_the_worker_and_the_api(
    client: Client, task_queue: str, openflow_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_webhooks(openflow_home, [{"url": "https://ok.example.com/h"}, {"url": "ftp://x/y"}])
    with pytest.raises(SettingsError, match=r"webhooks\[1\] \"url\" is not an http\(s\) URL"):
        build_worker(client, task_queue, openflow_home)
    add_webhooks(openflow_home, [{"url": "https://ok.example.com/h", "events": ["done"]}])
    assert main(["api", "--port", str(free_port())]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "settings.json webhooks[0] has an unknown event 'done'; give any of "
        "paused, completed, failed, stopped"
    ]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"events": ["paused"]}, 'webhooks[0] has no "url"'),
        ({"url": "file:///etc/passwd"}, 'webhooks[0] "url" is not an http(s) URL'),
        ({"url": "http://h/", "events": ["paused", "stoped"]}, "unknown event 'stoped'"),
        ({"url": "http://h/", "secret": 42}, 'webhooks[0] "secret" must be a string'),
        ("http://h/", "webhooks[0] must be an object"),
    ],
)
async def test_bad_webhook_entries_are_named(entry: Any, problem: str) -> None:
    with pytest.raises(SettingsError) as refused:
        parse_settings({"webhooks": [entry]})
    assert problem in str(refused.value)
    assert "\n" not in str(refused.value)


async def test_a_stopped_run_tells_of_it(harness: Harness, receiver: Receiver) -> None:
    harness.script({"ask": [{"ask": "Go on?"}, {"submit": {"summary": "done"}}]})
    add_webhooks(harness.home, [{"url": receiver.url, "events": ["stopped"], "secret": SECRET}])
    run_id = await harness.start(asking_workflow())
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    await harness.handle(run_id).cancel()
    assert (await harness.result(run_id)).status == "stopped"
    [(headers, body)] = await receiver.wait_for(1)
    assert verified(headers, body)
    assert json.loads(body)["event"] == json.loads(body)["status"] == "stopped"


async def test_a_bad_api_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENFLOW_API_URL", "ftp://flows.example.com")
    with pytest.raises(SettingsError, match="^OPENFLOW_API_URL: is not an http"):
        runtime_settings()


async def test_a_run_continued_as_new_while_paused_tells_of_the_pause_once(
    harness: Harness, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first execution continues as new as soon as it pauses, and only then.
    monkeypatch.setattr(
        run_module.OpenFlowRun,
        "_history_long",
        lambda self: self._status == "paused" and workflow.info().continued_run_id is None,
    )
    harness.script({"ask": [{"ask": "Go on?"}, {"submit": {"summary": "done"}}]})
    add_webhooks(harness.home, [{"url": receiver.url, "secret": SECRET}])
    run_id = await harness.start(asking_workflow())
    first = (await harness.handle(run_id).describe()).run_id
    await receiver.wait_for(1)
    deadline = time.monotonic() + 10
    while (await harness.handle(run_id).describe()).run_id == first:
        assert time.monotonic() < deadline, "the run never continued as new"
        await asyncio.sleep(0.05)
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    # A signal the run ignores makes it look at what it waits for again.
    await harness.handle(run_id).signal("submit_user_input", 5)
    deadline = time.monotonic() + 10
    while not any(e.type == "ActionIgnored" for e in await harness.events(run_id)):
        assert time.monotonic() < deadline, "the signal was not recorded"
        await asyncio.sleep(0.05)
    history = await harness.handle(run_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    carried = json.loads(started.input.payloads[0].data)
    assert carried["snapshot"]["nodes"]["ask"]["awaiting"], "it continued before the pause"
    await harness.handle(run_id).execute_update(
        "act", Action(kind="input", node_id="ask", text="y")
    )
    assert (await harness.result(run_id)).status == "completed"
    await receiver.wait_for(2)
    assert [n["event"] for n in receiver.bodies()] == ["paused", "completed"]


async def test_a_run_that_cannot_start_tells_of_its_failure(
    harness: Harness, receiver: Receiver
) -> None:
    harness.script({})
    add_webhooks(harness.home, [{"url": receiver.url, "events": ["failed"], "secret": SECRET}])
    wf = make_workflow([node("a")], [], provider_id="no-such-provider")
    run_id = await harness.start(wf)
    assert (await harness.result(run_id)).status == "failed"
    [(headers, body)] = await receiver.wait_for(1)
    assert verified(headers, body)
    assert json.loads(body)["event"] == json.loads(body)["status"] == "failed"
