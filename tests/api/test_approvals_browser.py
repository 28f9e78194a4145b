"""The run page decides a pending batch call by call: a control per call, each call as decided."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from openflow.api import create_app
from openflow.live import FileLiveChannel
from tests.api.browser import Page, session_driver
from tests.api.conftest import ServedApp, node, workflow_json
from tests.api.test_approvals import decided_by, writes

pytestmark = pytest.mark.asyncio(loop_scope="session")

CARD = "article.pending.approval"
HOSTILE = '<img src="x" onerror="window.__pwned = 1">'


@pytest.fixture
def served(openflow_env: dict[str, str], openflow_home: Path) -> Iterator[ServedApp]:
    app = create_app(home=openflow_home, live=FileLiveChannel(openflow_home / "runs"))
    with ServedApp(app) as served_app:
        yield served_app


@pytest.fixture
def page(served: ServedApp) -> Page:
    return Page(session_driver(), served.url)


async def set_arguments(page: Page, call_id: str, text: str) -> None:
    await page.script(
        "const box = document.querySelector(arguments[0]);"
        "box.value = arguments[1]; box.dispatchEvent(new Event('input', {bubbles: true}));",
        f"{CARD} [data-call-id='{call_id}'] textarea[name=call-arguments]",
        text,
    )


async def test_the_run_page_decides_each_call(
    page: Page,
    served: ServedApp,
    worker: Worker,
    script: Any,
    openflow_home: Path,
    client: Client,
) -> None:
    turn = writes("a", "b")
    turn["tools"][1]["args"]["content"] = HOSTILE
    script({"act": [turn, {"submit": {"summary": "done"}}]})
    async with httpx.AsyncClient(base_url=served.url) as http:
        created = await http.post("/runs", json={"workflow": workflow_json([node("act")])})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
    await page.open("/ui/assets/ui.css")
    await page.script("localStorage.clear()")
    await page.open(f"/ui/runs/{run_id}")

    # One row per call, each with its own allow/deny, reason and arguments editor.
    await page.css(f"{CARD} [data-call-id='c-b']")
    rows = await page.script(
        "return [...document.querySelectorAll(arguments[0])].map((row) => [row.dataset.callId,"
        " row.querySelectorAll('input[type=radio]').length,"
        " row.querySelectorAll('input[name=call-reason], textarea[name=call-arguments]').length])",
        f"{CARD} .tool.call",
    )
    assert rows == [["c-a", 2, 2], ["c-b", 2, 2]]
    await page.wait_text(f"{CARD} [data-call-id='c-b']", "<img src=")
    assert await page.script("return window.__pwned === undefined")
    await page.css(f"{CARD} input[name=remember]")

    # Arguments that are not a JSON object are refused on the page, before anything is sent.
    await page.click(f"{CARD} [data-call-id='c-a'] details.edit summary")
    await set_arguments(page, "c-a", "{not json")
    await page.wait_text(f"{CARD} [data-call-id='c-a'] .call-error", "not a JSON object")
    await page.click(f"{CARD} button[name=decide]")
    await page.wait_text(f"{CARD} .notice.error", "not a JSON object")
    await set_arguments(page, "c-a", '{"path": "a.txt", "content": "a"}')

    # The calls decided differently, by name: the run does exactly that; the name is kept.
    await page.click(f"{CARD} [data-call-id='c-b'] input[data-choice=deny]")
    await page.type(f"{CARD} [data-call-id='c-b'] input[name=call-reason]", "not that one")
    await page.type(f"{CARD} input[name=by]", "Ada")
    await page.click(f"{CARD} input[name=remember]")
    await page.type(f"{CARD} input[name=remember-prefix]", "docs/")
    await page.click(f"{CARD} button[name=decide]")
    await page.wait_text(".run-head .status", "completed")
    # The grant is listed with who made it, and a button to take it back.
    await page.wait_text(".grants li.grant", "write under docs/ runs without asking · by Ada")
    await page.css(".grants li.grant button[name=revoke]")
    workspace = openflow_home / "runs" / run_id / "workspace"
    assert (workspace / "a.txt").read_text() == "a"
    assert not (workspace / "b.txt").exists()
    assert await page.script("return localStorage.getItem('openflow.by')") == "Ada"
    assert await decided_by(client, run_id) == ["Ada"]
