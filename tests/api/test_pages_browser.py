"""The pages in a real browser: start, follow, approve and answer runs; nothing a model writes runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from openflow.api import create_app
from openflow.live import FileLiveChannel
from tests.api.browser import By, Page, session_driver
from tests.api.conftest import KEY_A, KEY_B, ServedApp, bearer, node, set_keys, workflow_json

pytestmark = pytest.mark.asyncio(loop_scope="session")

HOSTILE = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'
MARKDOWN = "# Release notes\n\n## Summary\nThe write is **done**.\n\n- one\n- two\n"
TEMPLATE = "# Release notes\n\n## Summary\n<!-- Required: the result -->\n"
WRITE = {"name": "write", "args": {"path": "notes.txt", "content": "hello\n"}, "id": "call-w"}


@pytest.fixture
def served(openflow_env: dict[str, str], openflow_home: Path) -> Iterator[ServedApp]:
    app = create_app(
        home=openflow_home,
        live=FileLiveChannel(openflow_home / "runs"),
        poll_interval=0.05,
        keepalive_interval=0.5,
    )
    with ServedApp(app) as served_app:
        yield served_app


@pytest.fixture
def page(served: ServedApp) -> Page:
    return Page(session_driver(), served.url)


async def start(http: httpx.AsyncClient, key: str | None = None, **body: Any) -> str:
    response = await http.post("/runs", json=body, headers=bearer(key) if key else None)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    return run_id


async def test_a_run_started_from_the_page_streams_is_approved_and_shows_its_handoff(
    page: Page, served: ServedApp, worker: Worker, script: Any, tmp_path: Path
) -> None:
    say = "Writing the release notes to notes.txt, token by token."
    script(
        {
            "doc": [
                {"tools": [WRITE], "say": say, "stream": True, "delay_ms": 200},
                {"submit": {"markdown": MARKDOWN}},
            ]
        }
    )
    doc = node("doc", handoff={"format": "markdown", "template": TEMPLATE}, output_schema=None)
    async with httpx.AsyncClient(base_url=served.url) as http:
        saved = await http.put("/workflows/wf-notes", json=workflow_json([doc], wf_id="wf-notes"))
        assert saved.status_code in (200, 201), saved.text
    project = tmp_path / "project"
    project.mkdir()

    await page.open("/ui")
    await page.css("#start-workflow option[value='wf-notes']")
    await page.type("#start-entrypoint", "Write the notes")
    await page.type("#start-project", str(project))
    await page.click("button[name=start]")

    await page.css("article.pending.approval")
    await page.wait_text("article.node-detail[data-node=doc] .conversation", say)
    assert int(await page.script("return Number(document.body.dataset.liveDeltas || 0)")) > 0
    await page.wait_text("article.pending.approval", "notes.txt")
    await page.click("article.pending.approval button[name=approve]")

    await page.wait_text(".run-head .status", "completed")
    await page.wait_text("article.node-detail[data-node=doc] .handoff h3", "Release notes")
    await page.wait_text("article.node-detail[data-node=doc] .handoff strong", "done")
    assert (project / "notes.txt").read_text() == "hello\n"
    await page.wait_text(".graph a.node[data-node=doc]", "completed")
    link = await page.css("a.external")
    assert "/workflows/" in str(await page.call(link.get_attribute, "href"))

    await page.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, "article.pending"))
    shot = tmp_path / "run-page.png"
    await page.call(page.driver.save_screenshot, str(shot))
    assert shot.stat().st_size > 10_000


async def test_an_input_answered_from_the_inbox(
    page: Page, served: ServedApp, worker: Worker, script: Any
) -> None:
    question = {
        "questions": [
            {
                "id": "tone",
                "header": "Tone",
                "question": "Which tone?",
                "options": [
                    {"label": "Formal", "description": "for customers"},
                    {"label": "Casual", "description": "for the team"},
                ],
            }
        ]
    }
    script({"ask": [{"question": question}, {"echo": True}]})
    async with httpx.AsyncClient(base_url=served.url) as http:
        run_id = await start(http, workflow=workflow_json([node("ask", requestUserInput=True)]))
        await page.open("/ui/inbox")
        await page.wait_text("article.pending.input", "Which tone?")
        await page.click("article.pending.input input[value=Casual]")
        await page.click("article.pending.input button[name=answer-submit]")
        await page.wait_text("article.pending.input .notice", "Done")

        async def completed() -> dict[str, Any]:
            for _ in range(600):
                state = (await http.get(f"/runs/{run_id}")).json()
                if state["status"] == "completed":
                    return state
                await page.call(lambda: None)
            raise AssertionError(f"run not completed: {state['status']}")

        state = await completed()
    users = [m["content"] for m in state["chatLogs"]["ask"] if m["role"] == "user"]
    assert users == ["Which tone?: Casual"]


async def test_an_action_answered_elsewhere_shows_the_runs_reason(
    page: Page, served: ServedApp, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "Your name?"}, {"echo": True}], "hold": [{"ask": "Wait here"}]})
    async with httpx.AsyncClient(base_url=served.url) as http:
        run_id = await start(
            http,
            workflow=workflow_json(
                [node("ask", requestUserInput=True), node("hold", requestUserInput=True)]
            ),
        )
        await page.open(f"/ui/runs/{run_id}")
        await page.type("article.pending.input[data-key*=ask] textarea", "Grace")
        answered = await http.post(f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"})
        assert answered.status_code == 200, answered.text
        await page.wait_text(".graph a.node[data-node=ask]", "completed")
        await page.click("article.pending.input[data-key*=ask] button[name=answer-submit]")
        await page.wait_text("article.pending.input[data-key*=ask] .notice.error", "Not accepted:")
        reason = await page.text_of("article.pending.input[data-key*=ask] .notice.error")
        assert "ask" in reason.removeprefix("Not accepted:"), reason
        state = (await http.get(f"/runs/{run_id}")).json()
    assert [m["content"] for m in state["chatLogs"]["ask"] if m["role"] == "user"] == ["Ada"]


async def test_model_output_with_markup_is_shown_as_text_and_runs_nothing(
    page: Page, served: ServedApp, worker: Worker, script: Any
) -> None:
    script(
        {
            "doc": [
                {"tools": [{"name": "read", "args": {"path": HOSTILE}}], "say": HOSTILE},
                {
                    "submit": {
                        "markdown": f"# Release notes\n\n## Summary\n{HOSTILE} [x](javascript:alert(1))\n"
                    }
                },
            ]
        }
    )
    doc = node("doc", handoff={"format": "markdown", "template": TEMPLATE}, output_schema=None)
    async with httpx.AsyncClient(base_url=served.url) as http:
        run_id = await start(http, workflow=workflow_json([doc]))
        await page.open(f"/ui/runs/{run_id}")
        await page.wait_text(".run-head .status", "completed")
        await page.wait_text(".handoff h3", "Release notes")
    await page.wait_text("article.node-detail[data-node=doc] .conversation", "<script>")
    await page.wait_text(".handoff", "onerror")
    found = await page.script(
        "return {pwned: window.__pwned, imgs: document.querySelectorAll('main img').length,"
        " scripts: document.querySelectorAll('main script').length,"
        " js: [...document.querySelectorAll('main a')].filter(a => a.href.startsWith('javascript')).length}"
    )
    assert found == {"pwned": None, "imgs": 0, "scripts": 0, "js": 0}


async def test_with_api_keys_another_tenants_run_is_not_reachable(
    page: Page, served: ServedApp, worker: Worker, script: Any, openflow_home: Path
) -> None:
    set_keys(openflow_home, {KEY_A: "tenant-a", KEY_B: "tenant-b"})
    script({"ask": [{"ask": "Private question of tenant b"}]})
    async with httpx.AsyncClient(base_url=served.url) as http:
        theirs = await start(
            http, KEY_B, workflow=workflow_json([node("ask", requestUserInput=True)])
        )
        mine = await start(
            http, KEY_A, workflow=workflow_json([node("ask", requestUserInput=True)])
        )
    await page.open("/ui")
    await page.type("#api-key", KEY_A + "\n")
    await page.wait_text("table.runs", mine)
    assert theirs not in await page.text_of("table.runs")
    assert await page.script("return document.cookie") == ""
    await page.open(f"/ui/runs/{theirs}")
    await page.wait_text(".missing h1", "No such run")
    assert "Private question" not in await page.text_of("main")
    await page.open("/ui/inbox")
    await page.css("article.pending.input")
    assert theirs not in await page.text_of("main")


async def test_docs_render_their_operations_with_no_network(page: Page) -> None:
    await page.open("/docs")
    await page.css(".opblock-summary-path")
    assert "/runs/{run_id}" in await page.text_of(".swagger-ui")


async def test_an_unknown_run_says_so_with_a_link_back(page: Page, served: ServedApp) -> None:
    await page.open("/ui/runs/run-that-never-was")
    await page.wait_text(".missing h1", "No such run")
    link = await page.css(".missing a[href='/ui']")
    assert "runs" in (await page.call(lambda: link.text)).lower()


async def test_the_markdown_renderer_builds_only_whitelisted_elements(page: Page) -> None:
    await page.open("/ui/inbox")
    await page.css("h1")
    tags = await page.script(
        """
        const source = arguments[0];
        const root = window.openflowMarkdown(source);
        return {tags: [...new Set([...root.querySelectorAll('*')].map(e => e.tagName.toLowerCase()))].sort(),
                attrs: [...new Set([...root.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name)))].sort(),
                hrefs: [...root.querySelectorAll('a')].map(a => a.getAttribute('href')),
                text: root.textContent};
        """,
        "# T <b>x</b>\n\n**b** *i* `c` [ok](https://example.org) [bad](javascript:alert(1))\n"
        "[d](data:text/html,hi)\n\n- <iframe src=x>\n\n> <svg onload=alert(1)>\n\n```\n<script>\n```\n",
    )
    assert set(tags["tags"]) <= {
        "a",
        "blockquote",
        "code",
        "div",
        "em",
        "h3",
        "li",
        "p",
        "pre",
        "strong",
        "ul",
    }
    assert set(tags["attrs"]) <= {"class", "href", "rel", "target"}
    assert tags["hrefs"] == ["https://example.org"]
    assert "<iframe src=x>" in tags["text"] and "<svg onload=alert(1)>" in tags["text"]


class CutStreams:
    """Ends each of the first `cuts` event streams after `after` messages, as a lost connection."""

    def __init__(self, app: Any, cuts: int = 3, after: int = 3) -> None:
        self.app = app
        self.cuts = cuts
        self.after = after

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        cut = scope["type"] == "http" and scope["path"].endswith("/events") and self.cuts > 0
        if not cut:
            await self.app(scope, receive, send)
            return
        self.cuts -= 1
        sent = 0
        closed = False

        async def cutting_send(message: Any) -> None:
            nonlocal sent, closed
            if closed:
                raise ConnectionResetError("the test cut this stream")
            if message["type"] == "http.response.body" and message.get("body"):
                sent += 1
                if sent > self.after:
                    closed = True
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
            await send(message)

        await self.app(scope, receive, cutting_send)


async def test_a_lost_stream_resumes_without_a_duplicate_token_or_event(
    openflow_env: dict[str, str], openflow_home: Path, worker: Worker, script: Any
) -> None:
    say = "".join(f"token{n:02d} " for n in range(40)).strip()
    script(
        {
            "doc": [
                {"tools": [WRITE], "say": say, "stream": True, "delay_ms": 1500},
                {"submit": {"summary": "written"}},
            ]
        }
    )
    app = create_app(
        home=openflow_home,
        live=FileLiveChannel(openflow_home / "runs"),
        poll_interval=0.05,
        keepalive_interval=0.5,
    )
    with ServedApp(CutStreams(app)) as served:  # type: ignore[arg-type]
        page = Page(session_driver(), served.url)
        async with httpx.AsyncClient(base_url=served.url) as http:
            run_id = await start(http, workflow=workflow_json([node("doc")]))
            await page.open(f"/ui/runs/{run_id}")
            await page.css("article.pending.approval")
            await page.wait_text("article.node-detail[data-node=doc] .conversation", say)
            events = (await http.get(f"/runs/{run_id}/events")).json()
        await page.wait(
            lambda d: (
                d.execute_script("return document.body.dataset.lastEventId")
                == str(events[-1]["seq"])
            )
        )
        seen = await page.script(
            "return {events: Number(document.body.dataset.events),"
            " streams: Number(document.body.dataset.streams || 0),"
            " text: document.querySelector('article.node-detail[data-node=doc] .conversation')"
            ".textContent}"
        )
        await page.call(page.driver.get, "about:blank")  # hang up before the server stops
        served.server.force_exit = True  # the cut streams' tasks need not finish
    assert seen["streams"] >= 2, seen  # the page reconnected after cut streams
    assert seen["events"] == len(events)
    assert seen["text"].count("token00") == 1 and seen["text"].count("token39") == 1
