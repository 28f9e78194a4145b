"""Chaos scenarios: malformed CLI input and malformed HTTP requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.chaos import (
    ROOT,
    TENANT,
    TENANT_SECRET,
    Campaign,
    Plan,
    Tally,
)
from bench.chaos_signals import ASK, brief, draw, shaped
from openflow.testing import agent_node

# --- CLI ------------------------------------------------------------------------------------


def _deep_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def hostile_files(folder: Path) -> dict[str, Path]:
    """Workflow files no one should have to survive: each must be refused cleanly."""
    folder.mkdir(parents=True, exist_ok=True)
    good = {
        "id": "cli-good",
        "name": "Good",
        "nodes": [agent_node("solo")],
        "edges": [],
    }
    deep = json.loads(json.dumps(good))
    deep["id"] = "cli-deep"
    deep["nodes"][0]["agent"]["output_schema"] = _deep_schema(450)
    cyclic = {
        "id": "cli-cycle",
        "name": "Cycle",
        "nodes": [agent_node("a"), agent_node("b")],
        "edges": [{"id": "a-b", "from": "a", "to": "b"}, {"id": "b-a", "from": "b", "to": "a"}],
    }
    files: dict[str, bytes] = {
        "good": json.dumps(good).encode(),
        "empty": b"",
        "not-json": b"{this is not json",
        "binary": b"\xff\xfe\x00\x01garbage\x00",
        "list": b"[1, 2, 3]",
        "nested-arrays": b"[" * 100_000 + b"]" * 100_000,
        "deep-schema": json.dumps(deep).encode(),
        "cycle": json.dumps(cyclic).encode(),
        "wrong-types": json.dumps({"id": 5, "name": [], "nodes": "x", "edges": {}}).encode(),
    }
    paths = {}
    for name, data in files.items():
        path = folder / f"{name}.workflow.json"
        path.write_bytes(data)
        paths[name] = path
    paths["directory"] = folder
    paths["missing"] = folder / "missing.workflow.json"
    return paths


SHORT_CLI = ("unknown flag", "450-deep schema (validate)", "address port too big")
"""The CLI cases the short campaign runs first: a bad flag, a bad file, a bad value."""


def cli_cases(campaign: Campaign) -> list[tuple[str, list[str], dict[str, str]]]:
    """(what, argv, env) of commands that must exit 2 with one line and no traceback."""
    f = hostile_files(campaign.root / "cli-files")
    junk_queue = {"OPENFLOW_TASK_QUEUE": "chaos-cli-junk"}
    cases: list[tuple[str, list[str], dict[str, str]]] = [
        ("unknown command", ["frobnicate"], {}),
        ("unknown flag", ["run", str(f["good"]), "--frobnicate"], {}),
        ("missing argument", ["runs", "input", "run-x"], {}),
        ("flag without value", ["runs", "list", "--status"], {}),
        ("bad status", ["runs", "list", "--status", "sideways"], {}),
        ("--after not a number", ["runs", "events", "run-x", "--after", "abc"], {}),
        ("--after negative", ["runs", "events", "run-x", "--after", "-5"], {}),
        ("--port not a number", ["api", "--port", "abc"], junk_queue),
        ("--port out of range", ["api", "--port", "70000"], junk_queue),
        ("--ui-port out of range", ["server", "--ui-port", "99999"], {}),
        ("missing file", ["validate", str(f["missing"])], {}),
        ("a directory", ["validate", str(f["directory"])], {}),
        ("empty file", ["run", str(f["empty"]), "--detach"], {}),
        ("not JSON", ["run", str(f["not-json"]), "--detach"], {}),
        ("binary file", ["validate", str(f["binary"])], {}),
        ("a JSON list", ["run", str(f["list"]), "--detach"], {}),
        ("100k nested arrays", ["run", str(f["nested-arrays"]), "--detach"], {}),
        ("450-deep schema (validate)", ["validate", str(f["deep-schema"])], {}),
        ("450-deep schema (run)", ["run", str(f["deep-schema"]), "--detach"], {}),
        ("a cycle", ["run", str(f["cycle"]), "--detach"], {}),
        ("wrong types", ["run", str(f["wrong-types"]), "--detach"], {}),
        ("bad run id", ["run", str(f["good"]), "--run-id", "../../etc", "--detach"], {}),
        ("run id with spaces", ["run", str(f["good"]), "--run-id", "a b\tc", "--detach"], {}),
        (
            "--project missing",
            ["run", str(f["good"]), "--project", "/nonexistent/chaos", "--detach"],
            {},
        ),
        ("unknown run", ["runs", "show", "run-does-not-exist"], {}),
        ("run id with a path", ["runs", "show", "../../etc/passwd"], {}),
        ("answer to an unknown run", ["runs", "input", "run-nope", "a", "x"], {}),
        ("address not host:port", ["runs", "list"], {"OPENFLOW_TEMPORAL_ADDRESS": "not-an-addr"}),
        (
            "address port too big",
            ["runs", "list"],
            {"OPENFLOW_TEMPORAL_ADDRESS": "127.0.0.1:99999"},
        ),
        ("address empty host", ["runs", "list"], {"OPENFLOW_TEMPORAL_ADDRESS": ":7233"}),
        (
            "OPENFLOW_TOOL_BUDGET not a number",
            ["worker"],
            {**junk_queue, "OPENFLOW_TOOL_BUDGET": "lots"},
        ),
    ]
    return cases


async def _openflow(
    env: dict[str, str], argv: list[str], timeout: float
) -> tuple[int | None, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "openflow.cli",
        *argv,
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        return None, out.decode(errors="replace"), err.decode(errors="replace")
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def cli_input(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Bad flags, files and values: exit 2, one line on stderr, no traceback, never a hang."""
    tally = Tally("malformed CLI input")
    cases = cli_cases(campaign)
    if plan.cli_cases:
        first = [c for c in cases if c[0] in SHORT_CLI]
        rest = [c for c in cases if c[0] not in SHORT_CLI]
        cases = (first + campaign.random.sample(rest, len(rest)))[: plan.cli_cases]
    gate = asyncio.Semaphore(3)

    async def one(what: str, argv: list[str], extra: dict[str, str]) -> None:
        async with gate:
            code, out, err = await _openflow(campaign.env(**extra), argv, timeout=45.0)
        campaign.texts[f"cli: {what}"] = out + err
        lines = [line for line in err.splitlines() if line.strip()]
        if code is None:
            problem = "hung (killed after 45 s)"
        elif "Traceback" in err or "Traceback" in out:
            problem = f"exit {code} with a traceback"
        elif code != 2:
            problem = f"exit {code}: {(lines or out.splitlines() or [''])[-1][:120]}"
        elif len(lines) != 1:
            problem = f"exit 2 with {len(lines)} lines on stderr"
        else:
            problem = ""
        tally.record(not problem, f"{what} ({' '.join(argv[:2])}): {problem}")

    await asyncio.gather(*(one(*case) for case in cases))
    return [tally]


# --- HTTP -----------------------------------------------------------------------------------


def _is_json_error(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), dict)


async def http_requests(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Malformed requests to every endpoint: a 4xx with the JSON error shape, never a 5xx."""
    from openflow.api import create_app

    await campaign.ensure_worker()
    campaign.profile("planted", {ASK: [{"ask": "Go on?"}, {"submit": {"summary": "ok"}}]})
    app = create_app(campaign.client, home=campaign.home, task_queue=campaign.task_queue)
    with _logs_to(campaign.logs / "api.log"):
        return await _http_requests(campaign, plan, app)


@contextlib.contextmanager
def _logs_to(path: Path) -> Iterator[None]:
    """Send the app's log records to `path` (the secret scan reads it), not to the terminal."""
    logger = logging.getLogger("openflow")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        handler.close()


async def _http_requests(campaign: Campaign, plan: Plan, app: Any) -> list[Tally]:
    tally = Tally("malformed HTTP requests")
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    auth = {"Authorization": f"Bearer {TENANT_SECRET}"}
    bodies: list[str] = []
    async with httpx.AsyncClient(
        transport=transport, base_url="http://chaos.test", headers=auth, timeout=60
    ) as http:
        wf = {
            "id": "http-ask",
            "name": "HTTP ask",
            "nodes": [agent_node(ASK, requestUserInput=True)],
            "edges": [],
        }
        created = await http.post("/runs", json={"workflow": wf, "entrypoint": "go"})
        bodies.append(created.text)
        live = created.json().get("run_id") if created.status_code == 201 else None
        tally.record(bool(live), f"a valid POST /runs answered {created.status_code}")
        if live:
            campaign.tenant_runs.append(live)
            paused = await campaign.settle(live, deadline=60, until=("paused",), tenant=TENANT)
            tally.record(paused == "paused", f"the run started over HTTP is {paused}")
        target = live or "run-missing"

        async def expect(what: str, method: str, url: str, strict: bool = True, **kw: Any) -> None:
            try:
                response = await http.request(method, url, **kw)
            except Exception as exc:  # noqa: BLE001 - the app raised through the transport
                tally.record(False, f"{what}: {type(exc).__name__} escaped the app")
                return
            bodies.append(response.text)
            code = response.status_code
            if code >= 500:
                problem = f"{code}: {response.text[:100]}"
            elif "Traceback" in response.text:
                problem = f"{code} with a traceback"
            elif code >= 400 and not _is_json_error(response):
                problem = f"{code} without the JSON error shape: {response.text[:80]}"
            elif strict and code < 400:
                problem = f"{code}: accepted"
            else:
                problem = ""
            tally.record(not problem, f"{what} {method} {url[:60]}: {problem}")

        raw = {"Content-Type": "application/json"}
        deep = {"workflow": {**wf, "id": "http-deep"}}
        deep["workflow"]["nodes"] = [agent_node("deep", output_schema=_deep_schema(450))]
        fixed: list[tuple[str, str, str, dict[str, Any]]] = [
            ("malformed JSON", "POST", f"/runs/{target}/input", {"content": b"{x", "headers": raw}),
            ("NaN", "POST", f"/runs/{target}/input", {"content": b'{"text": NaN}', "headers": raw}),
            ("not UTF-8", "POST", "/runs", {"content": b"\xff\xfe{}", "headers": raw}),
            ("nested arrays", "POST", "/runs", {"content": b"[" * 50_000, "headers": raw}),
            ("huge body", "POST", "/runs", {"content": b" " * 2_000_000, "headers": raw}),
            ("form body", "POST", "/runs", {"data": {"workflow": "x"}}),
            ("missing body", "POST", f"/runs/{target}/retry", {}),
            ("wrong types", "POST", f"/runs/{target}/approvals/x", {"json": {"allow": "maybe"}}),
            ("450-deep schema", "POST", "/runs", {"json": deep}),
            ("deep schema validate", "POST", "/workflows/validate", {"json": deep["workflow"]}),
            ("bad after", "GET", f"/runs/{target}/events?after=abc", {}),
            ("negative after", "GET", f"/runs/{target}/events?after=-1", {}),
            ("huge after", "GET", f"/runs/{target}/events?after=1e999", {}),
            ("unknown run", "GET", "/runs/run-nope", {}),
            ("dots in run id", "GET", "/runs/..%2F..%2Fetc", {}),
            ("long run id", "GET", "/runs/" + "a" * 5000, {}),
            ("unknown handoff", "GET", f"/runs/{target}/handoffs/..%2F..%2Fsettings.json", {}),
            ("unknown artifact", "GET", f"/runs/{target}/artifacts/..%2F..%2F..%2Fsettings", {}),
            ("wrong method", "DELETE", "/runs", {}),
            ("unknown path", "GET", "/nowhere", {}),
            ("no key", "GET", "/runs", {"headers": {"Authorization": ""}}),
            ("wrong key", "GET", "/runs", {"headers": {"Authorization": "Bearer wrong"}}),
            (
                "not bearer",
                "GET",
                "/runs",
                {"headers": {"Authorization": f"Basic {TENANT_SECRET}"}},
            ),
            ("stop twice", "POST", "/runs/run-nope/stop", {}),
            ("resume unknown", "POST", "/runs/run-nope/resume", {}),
            ("workflow id with dots", "GET", "/workflows/..%2F..%2Fsettings", {}),
            ("put mismatched id", "PUT", "/workflows/other", {"json": wf}),
        ]
        for what, method, url, kw in fixed:
            await expect(what, method, url, **kw)

        endpoints = [
            ("/runs", ["workflow", "workflow_id", "entrypoint", "run_id", "project_dir"]),
            (f"/runs/{target}/input", ["node_id", "text"]),
            (f"/runs/{target}/approvals/ap-x", ["allow", "reason", "decisions", "remember"]),
            (f"/runs/{target}/retry", ["node_id", "message"]),
            (f"/runs/{target}/messages", ["node_id", "text"]),
            (f"/runs/{target}/resume", ["node_id", "message"]),
            ("/workflows/validate", ["id", "name", "nodes", "edges", "settings"]),
        ]
        seed = campaign.seed or 0
        per = max(1, plan.http_payloads // len(endpoints))
        for url, fields in endpoints:
            for body in draw(shaped(fields), per, seed + len(url)):
                await expect(f"generated {brief(body, 60)}", "POST", url, strict=False, json=body)
        if live:
            still = await campaign.status(live, TENANT)
            tally.record(still == "paused", f"the live run is {still} after the requests")
            answer = {"node_id": ASK, "text": "fine"}
            answered = await http.post(f"/runs/{live}/input", json=answer)
            bodies.append(answered.text)
            status = await campaign.settle(live, tenant=TENANT)
            tally.record(status == "completed", f"the live run {status} after a valid answer")
    campaign.texts["http responses"] = "\n".join(bodies)
    return [tally]
