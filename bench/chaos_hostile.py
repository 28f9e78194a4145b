"""Hostile-input scenarios of the chaos campaign: signals, CLI, HTTP, path escapes, secrets.

Payloads come from hypothesis strategies (drawn with the campaign's seed), so a failure names the
payload that caused it and the same seed draws the same payloads again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from bench.chaos import (
    PROVIDER_SECRET,
    ROOT,
    SECRETS,
    TENANT,
    TENANT_SECRET,
    Campaign,
    Plan,
    Tally,
    make_workflow,
    yolo_node,
)
from openflow.testing import agent_node

SIGNAL_FIELDS = {
    "submit_user_input": ["node_id", "text"],
    "submit_tool_approval": ["approval_id", "allow", "reason", "decisions", "remember", "by"],
    "retry_node": ["node_id", "message"],
    "send_message": ["node_id", "text"],
}
ACT_FIELDS = ["node_id", "text", "approval_id", "allow", "reason", "message", "decisions"]
QUERIES = ["state", "events", "checkpoint", "events_origin"]
ASK = "s_ask"
OUTSIDE_SECRET = "outside-secret-" + "9d61c0a4e2b7f538"

# --- payloads -------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
JSON_VALUES = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value: what a script, an old client or `temporal workflow signal --input` can send."""


def shaped(fields: list[str], **extra: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Objects with the handler's own field names holding any JSON value, or any value at all."""
    optional: dict[str, st.SearchStrategy[Any]] = {f: JSON_VALUES for f in fields}
    optional.update(extra)
    return st.fixed_dictionaries({}, optional=optional) | JSON_VALUES


def arguments(one: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """No argument, one, or two: what arrives when a caller gets the arity wrong."""
    return st.one_of(st.tuples(one).map(list), st.just([]), st.tuples(one, one).map(list))


def draw(strategy: st.SearchStrategy[Any], count: int, seed: int) -> list[Any]:
    """`count` distinct examples of `strategy`, the same ones for the same seed."""
    drawn: dict[str, Any] = {}

    @settings(
        max_examples=count * 3,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def collect(value: Any) -> None:
        if len(drawn) < count:
            drawn.setdefault(json.dumps(value, sort_keys=True, default=str), value)

    collect()
    return list(drawn.values())


def brief(value: Any, limit: int = 90) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- signals, updates, queries --------------------------------------------------------------


async def _ask_run(campaign: Campaign, profile: str) -> tuple[str, WorkflowHandle[Any, Any]]:
    wf = make_workflow("signals", [agent_node(ASK, requestUserInput=True)])
    run_id = await campaign.start(wf, profile, campaign.folder("signals"))
    if not await campaign.wait_state(run_id, lambda s: s.get("awaitingNodeIds") == [ASK]):
        raise RuntimeError(f"run {run_id} never paused for input")
    return run_id, campaign.client.get_workflow_handle(run_id)


def _ignored_markers(events: list[dict[str, Any]]) -> list[str]:
    """The ActionIgnored events in order: the marker's node id, or "" for any other action."""
    out = []
    for event in events:
        if event.get("type") == "ActionIgnored":
            action = event.get("action") or {}
            node = action.get("node_id") if isinstance(action, dict) else None
            out.append(node if isinstance(node, str) and node.startswith("marker-") else "")
    return out


async def _synced(
    campaign: Campaign, handle: WorkflowHandle[Any, Any], marker: str, deadline: float = 20.0
) -> tuple[bool, list[str]]:
    """Send a marker signal (ignored by design) and wait until the run has recorded it.

    Signals are applied in order, so once the marker shows, everything sent before it was
    handled. Returns whether the run is still live, and the ignored actions seen so far.
    """
    try:
        await handle.signal("retry_node", {"node_id": marker})
    except Exception:  # noqa: BLE001 - the run may have ended already
        return False, []
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if not await _running(handle):
            return False, []
        try:
            events = await handle.query("events", {"after": 0}, result_type=list)
        except Exception:  # noqa: BLE001 - a failed query on a live run: try again
            events = []
        markers = _ignored_markers(events)
        if marker in markers:
            # A handler that raised fails the workflow task that applied the marker too: look
            # again once that task has settled.
            with contextlib.suppress(Exception):  # a failed run may not answer
                await handle.query("state", result_type=dict)
            return await _running(handle), markers
        await asyncio.sleep(0.05)
    return await _running(handle), []


async def _running(handle: WorkflowHandle[Any, Any]) -> bool:
    from temporalio.client import WorkflowExecutionStatus

    try:
        return (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    except Exception:  # noqa: BLE001
        return False


async def _finish(campaign: Campaign, tally: Tally, run_id: str, what: str) -> None:
    """One valid answer must still complete the run."""
    from openflow.contracts import Action

    try:
        await campaign.runs.act(run_id, Action(kind="input", node_id=ASK, text="valid answer"))
        status = await campaign.settle(run_id)
    except Exception as exc:  # noqa: BLE001 - a run that cannot take a valid answer
        status = f"refused a valid answer: {exc}"
    tally.record(status == "completed", f"{what}: after the flood the run {status}")


async def signal_flood(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Malformed payloads for every signal, the `act` update and every query, on live runs."""
    await campaign.ensure_worker()
    profile = campaign.profile(
        "signals", {ASK: [{"ask": "Go on?"}, {"submit": {"summary": "answered"}}]}
    )
    seed = campaign.seed or 0
    signals = Tally("malformed signals")
    updates = Tally("malformed act updates")
    queries = Tally("malformed queries")
    markers = 0

    for name, fields in SIGNAL_FIELDS.items():
        run_id, handle = await _ask_run(campaign, profile)
        seen = 0
        for args in draw(arguments(shaped(fields)), plan.payloads, seed + len(name)):
            try:
                await handle.signal(name, args=args)
            except Exception as exc:  # noqa: BLE001 - refused by the client: nothing was sent
                signals.record(True, f"{name} {brief(args)}: not sent ({type(exc).__name__})")
                continue
            markers += 1
            live, ignored = await _synced(campaign, handle, f"marker-{markers}")
            if not live:
                signals.record(False, f"{name} {brief(args)}: the run ended (failed or stuck)")
                run_id, handle = await _ask_run(campaign, profile)
                seen = 0
                continue
            recorded = len(ignored) - seen - 1
            seen = len(ignored)
            signals.record(recorded == 1, f"{name} {brief(args)}: not recorded as ignored")
        await _finish(campaign, signals, run_id, name)

    act_values = shaped(
        ACT_FIELDS,
        kind=st.sampled_from(["input", "approval", "retry", "message", "stop"]) | JSON_VALUES,
    )
    run_id, handle = await _ask_run(campaign, profile)
    for args in draw(arguments(act_values), plan.payloads * 2, seed + 1):
        accepted = False
        try:
            await handle.execute_update("act", args=args)
            accepted = True
        except WorkflowUpdateFailedError:
            pass
        except Exception:  # noqa: BLE001 - refused before the run (RPC, conversion): fine
            pass
        markers += 1
        live, _ = await _synced(campaign, handle, f"marker-{markers}")
        if not live:
            updates.record(False, f"act {brief(args)}: the run ended (failed or stuck)")
            run_id, handle = await _ask_run(campaign, profile)
            continue
        updates.record(not accepted, f"act {brief(args)}: accepted a malformed action")
    await _finish(campaign, updates, run_id, "act")

    run_id, handle = await _ask_run(campaign, profile)
    for name in QUERIES:
        fields = ["after"] if name == "events" else []
        for args in draw(arguments(shaped(fields)), plan.payloads, seed + 7 * len(name)):
            with contextlib.suppress(Exception):  # an error to the caller is the right answer
                await handle.query(name, args=args)
            live = await _running(handle)
            try:
                state = await handle.query("state", result_type=dict)
            except Exception:  # noqa: BLE001
                state = {}
            ok = live and state.get("awaitingNodeIds") == [ASK]
            queries.record(ok, f"{name} {brief(args)}: the run was harmed")
            if not ok:
                run_id, handle = await _ask_run(campaign, profile)
    await _finish(campaign, queries, run_id, "queries")
    return [signals, updates, queries]


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


# --- path escapes ---------------------------------------------------------------------------


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


FLIPPER = """import ctypes, os, time

# Swap d (a folder inside) and d_alt (a link to outside) atomically, as fast as possible.
libc = ctypes.CDLL(None, use_errno=True)
os.mkdir("d")
os.symlink({outside!r}, "d_alt")
with open("flipper.pid", "w") as f:
    f.write(str(os.getpid()))
end = time.time() + 120
while not os.path.exists("stop-flipper") and time.time() < end:
    for _ in range(200):
        libc.renameat2(-100, b"d", -100, b"d_alt", 2)
"""
"""A process the model starts with `bash`: it flips `d` between a folder and a link outside."""


def escape_script(folder: Path, outside: Path, home: Path, race_calls: int) -> list[Any]:
    """The model's turns: every way out it can try, one call id per attempt."""
    rel = os.path.relpath(outside, folder)
    rel_home = os.path.relpath(home, folder)
    canary = "CANARY line"

    def edit(call_id: str, path: str) -> dict[str, Any]:
        edits = [{"old_text": canary, "new_text": f"EDITED-{call_id}"}]
        return _call(call_id, "edit", path=path, edits=edits)

    static = [
        _call("read-rel", "read", path=f"{rel}/secret.txt"),
        _call("read-abs", "read", path=f"{outside}/secret.txt"),
        _call("read-settings-abs", "read", path=f"{home}/settings.json"),
        _call("read-settings-rel", "read", path=f"{rel_home}/settings.json"),
        _call("write-rel", "write", path=f"{rel}/new-write-rel.txt", content="x"),
        _call("write-abs", "write", path=f"{outside}/new-write-abs.txt", content="x"),
        edit("edit-rel", f"{rel}/canary.txt"),
        edit("edit-abs", f"{outside}/canary.txt"),
    ]
    links = (
        f"ln -s {outside} link; ln -s {outside}/canary.txt linkfile; "
        f"ln -s {outside}/secret.txt linksecret; ln {outside}/canary.txt hard; "
        f"ln {outside}/secret.txt hardsecret; true"
    )
    through_links = [
        _call("read-symlink-dir", "read", path="link/secret.txt"),
        _call("read-symlink-file", "read", path="linksecret"),
        _call("read-hardlink", "read", path="hardsecret"),
        edit("edit-symlink-file", "linkfile"),
        edit("edit-hardlink", "hard"),
    ]
    writes_through_links = [
        _call("write-symlink-dir", "write", path="link/new-write-symlink-dir.txt", content="x"),
        _call("write-symlink-file", "write", path="linkfile", content="EDITED-write-symlink-file"),
        _call("write-hardlink", "write", path="hard", content="EDITED-write-hardlink"),
    ]
    flipper = (
        f"cat > chaos_flipper.py <<'EOF'\n{FLIPPER.format(outside=str(outside))}EOF\n"
        f"setsid {sys.executable} chaos_flipper.py >/dev/null 2>&1 </dev/null &\n"
        "while [ ! -e flipper.pid ]; do sleep 0.1; done; echo started"
    )
    race = []
    for i in range(race_calls):
        kind = i % 3
        if kind == 0:
            race.append(_call(f"race-write-{i}", "write", path=f"d/x-{i}.txt", content=f"R{i}"))
        elif kind == 1:
            race.append(_call(f"race-read-{i}", "read", path="d/secret.txt"))
        else:
            race.append(edit(f"race-edit-{i}", "d/canary.txt"))
    batches = [race[i : i + 10] for i in range(0, len(race), 10)]
    return [
        {"tools": static},
        {"tools": [_call("plant-links", "bash", command=links)]},
        {"tools": through_links},
        {"tools": writes_through_links},
        {"tools": [_call("bash-settings", "bash", command=f"cat {home}/settings.json; env")]},
        {"tools": [_call("flipper", "bash", command=flipper)]},
        *({"tools": batch} for batch in batches),
        {"tools": [_call("stop-flipper", "bash", command="touch stop-flipper")]},
        {"submit": {"summary": "tried every way out"}},
    ]


def _alive(pid_file: Path) -> bool:
    """Whether the flipper the run started is still going (its pid, still running its loop)."""
    try:
        cmdline = Path(f"/proc/{int(pid_file.read_text())}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"chaos_flipper.py" in cmdline


def _outside_changes(outside: Path, expected: dict[str, str]) -> list[tuple[str, str]]:
    """(name, content) of every file outside that is new or changed."""
    changed = []
    for path in sorted(outside.rglob("*")):
        if path.is_file():
            content = path.read_text(errors="replace")
            if expected.get(path.name) != content:
                changed.append((path.name, content))
    return changed


async def path_escapes(campaign: Campaign, plan: Plan) -> list[Tally]:
    """The model's file tools asked to go outside the run's folder, directly and through links."""
    tally = Tally("path escapes")
    await campaign.ensure_worker()
    outside = campaign.root / "outside"
    outside.mkdir()
    expected = {"canary.txt": "CANARY line\n", "secret.txt": f"{OUTSIDE_SECRET}\n"}
    for name, content in expected.items():
        (outside / name).write_text(content)
    folder = campaign.folder("escape")
    turns = escape_script(folder, outside, campaign.home, plan.race_calls)
    profile = campaign.profile("escapes", {"probe": turns})
    wf = make_workflow("escapes", [yolo_node("probe")])
    run_id = await campaign.start(wf, profile, folder)
    status = await campaign.settle(run_id, deadline=180)
    tally.record(status == "completed", f"the probing run ended {status}")
    (folder / "stop-flipper").touch()
    end = time.monotonic() + 15
    while time.monotonic() < end and _alive(folder / "flipper.pid"):
        await asyncio.sleep(0.2)
    if _alive(folder / "flipper.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((folder / "flipper.pid").read_text()), signal.SIGKILL)
    events = await campaign.events(run_id)
    results = {
        e.get("tool_call_id"): str(e.get("content") or "")
        for e in events
        if e.get("type") == "ToolCompleted"
    }
    changes = _outside_changes(outside, expected)
    attempts = [
        call["id"]
        for turn in turns
        for call in turn.get("tools", [])
        if call["id"] not in ("plant-links", "flipper", "stop-flipper")
    ]
    blamed: set[str] = set()
    for call_id in attempts:
        problems = []
        content = results.get(call_id, "")
        if OUTSIDE_SECRET in content or "CANARY line" in content:
            problems.append("read the outside file")
        if any(s in content for s in SECRETS):
            problems.append("read a planted key")
        for name, text in changes:
            if (
                call_id in name
                or f"EDITED-{call_id}" in text
                or (
                    call_id.startswith("race-write-")
                    and f"x-{call_id.rsplit('-', 1)[1]}.txt" in name
                )
            ):
                problems.append(f"changed or created {name} outside")
                blamed.add(name)
        tally.record(not problems, f"{call_id}: {', '.join(problems)}")
    strays = [name for name, _ in changes if name not in blamed]
    tally.record(not strays, f"files appeared or changed outside: {', '.join(strays[:5])}")
    return [tally]


# --- planted secrets ------------------------------------------------------------------------


async def secret_scan(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Every run's history and events, every log and response: no planted key anywhere."""
    tally = Tally("planted-secret scan")
    names = {PROVIDER_SECRET: "provider key", TENANT_SECRET: "tenant key"}

    def scan(place: str, text: str) -> None:
        found = [names[s] for s in SECRETS if s in text]
        tally.record(not found, f"{place}: {' and '.join(found)}")

    for run_id in sorted(set(campaign.run_ids)):
        try:
            histories = await campaign.histories(run_id)
        except Exception as exc:  # noqa: BLE001 - an unreadable history is a failed scan
            tally.record(False, f"{run_id} history unreadable: {exc}")
            continue
        scan(f"{run_id} history", "\n".join(histories))
        scan(f"{run_id} events", json.dumps(await campaign.events(run_id)))
    for run_id in sorted(set(campaign.tenant_runs)):
        scan(f"{run_id} history", "\n".join(await campaign.histories(run_id)))
        scan(f"{run_id} events", json.dumps(await campaign.events(run_id, TENANT)))
    for log in sorted(campaign.logs.glob("*.log")) + [campaign.server.log_path]:
        if log.exists():
            scan(f"log {log.name}", log.read_text(errors="replace"))
    for place, text in sorted(campaign.texts.items()):
        scan(place, text)
    return [tally]
