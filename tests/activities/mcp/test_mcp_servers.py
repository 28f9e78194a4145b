"""MCP tools against real servers: discovery and pinning at run start, calls in tool batches."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp_support import HttpMcp, stdio_config, write_mcp_settings

from openflow import contracts as c
from openflow.activities.mcp import (
    CALL_TIMEOUT_S,
    START_TIMEOUT_S,
    McpDiscovery,
    batch_registry,
    discover_tools,
)
from openflow.activities.model_providers import ModelProviders
from openflow.activities.model_turn import ModelTurnActivity
from openflow.activities.prepare_run import PrepareRunActivity
from openflow.activities.run_files import RunFiles
from openflow.activities.store import FileRunStore
from openflow.activities.tools import (
    BatchOutcome,
    LockTable,
    ToolContext,
    default_registry,
    execute_batch,
    new_tool_budget,
)
from openflow.activities.tools_runner import BatchDeps, run_batch
from openflow.engine.transcript import ToolCall, ToolResult
from openflow.server import free_port
from openflow.settings import load_settings
from openflow.testing import write_scripted_settings
from tests.workflows.conftest import make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

RUN = "run-mcp-test"
CALC = "calc srv"
ADD = "mcp_11_calc_x20srv_add"
FAIL = "mcp_11_calc_x20srv_fail"
WHERE = "mcp_11_calc_x20srv_where"
SNAP = "mcp_11_calc_x20srv_snap"
SLEEP = "mcp_11_calc_x20srv_sleep"
ODD = "mcp_11_calc_x20srv_odd_x2Ename__1"
LOOKUP = "mcp_3_web_lookup"
REFUSE = "mcp_3_web_refuse"


@dataclass
class Rig:
    """An OPENFLOW_HOME with MCP servers in settings.json and a run store for one run."""

    home: Path
    workdir: Path
    store: FileRunStore
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return self.store.run_dir(RUN)

    async def discover(
        self,
        servers: dict[str, Any],
        reserved: tuple[str, ...] = (),
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> McpDiscovery:
        """Configure `servers`, discover their tools and pin them in the run's catalog."""
        write_mcp_settings(self.home, servers)
        found = await discover_tools(
            load_settings(self.home).mcp,
            reserved=reserved,
            cwd=self.workdir,
            run_dir=self.run_dir,
            start_timeout_s=start_timeout_s,
        )
        catalog = [tool.catalog_entry() for tool in found.tools]
        self.store.put_bytes(RUN, "catalog.json", json.dumps(catalog).encode())
        return found

    async def call(
        self, *calls: tuple[str, dict[str, Any]], call_timeout_s: float = CALL_TIMEOUT_S
    ) -> list[ToolResult]:
        """Run one batch of calls the way the tool_batch activity does; retries allowed."""
        outcome = await self.batch(*calls, call_timeout_s=call_timeout_s)
        return outcome.results

    async def batch(
        self,
        *calls: tuple[str, dict[str, Any]],
        call_timeout_s: float = CALL_TIMEOUT_S,
        cancel: asyncio.Event | None = None,
    ) -> BatchOutcome:
        ctx = ToolContext(
            run_id=RUN,
            node_id="node",
            execution_dir=self.workdir,
            run_dir=self.run_dir,
            retry_policy=(3, 0),
            emit=self.events.append,
            cancel=cancel or asyncio.Event(),
        )
        tool_calls = [
            ToolCall(id=f"call-{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)
        ]
        async with batch_registry(
            default_registry(),
            self.store,
            RUN,
            home=self.home,
            execution_dir=self.workdir,
            run_dir=self.run_dir,
            call_timeout_s=call_timeout_s,
        ) as registry:
            assert registry is not None
            return await execute_batch(ctx, tool_calls, registry, LockTable(), new_tool_budget())


@pytest.fixture
def rig(tmp_path: Path, workdir: Path) -> Rig:
    home = tmp_path / "home"
    home.mkdir()
    return Rig(home=home, workdir=workdir, store=FileRunStore(home / "runs"))


def pinned_hash(name: str, description: str, schema: dict[str, Any]) -> str:
    definition = {"name": name, "description": description, "inputSchema": schema}
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


async def test_discovery_names_and_pins_the_tools_of_every_server(
    rig: Rig, http_mcp: HttpMcp
) -> None:
    found = await rig.discover({CALC: stdio_config(), "web": http_mcp.config()})
    assert found.warnings == []
    assert [t.spec.name for t in found.tools] == [
        ADD,
        FAIL,
        ODD,
        SLEEP,
        SNAP,
        WHERE,
        LOOKUP,
        REFUSE,
    ]
    add = next(t for t in found.tools if t.spec.name == ADD)
    assert add.spec.description == "Add two integers."
    assert add.spec.parameters["required"] == ["a", "b"]
    assert (add.spec.tier, add.spec.concurrency) == ("write", "exclusive")
    entry = add.catalog_entry()
    assert entry["mcp"] == {
        "server_id": CALC,
        "tool": "add",
        "sha256": pinned_hash("add", "Add two integers.", add.spec.parameters),
    }
    assert {k: entry[k] for k in ("name", "description", "tier")} == {
        "name": ADD,
        "description": "Add two integers.",
        "tier": "write",
    }


async def test_a_server_policy_marks_its_tools_read_and_shared(rig: Rig, http_mcp: HttpMcp) -> None:
    found = await rig.discover({"web": http_mcp.config(tier="read", concurrency="shared")})
    assert {(t.spec.tier, t.spec.concurrency) for t in found.tools} == {("read", "shared")}
    async with batch_registry(
        None, rig.store, RUN, home=rig.home, execution_dir=rig.workdir
    ) as registry:
        assert registry is not None
        tool = registry.get(LOOKUP)
        assert tool is not None and tool.concurrency == "shared"
        assert tool.lock_keys(ToolContext(RUN, "node", rig.workdir, rig.run_dir), {}) == []


async def test_exclusive_tools_of_a_server_share_its_lock(rig: Rig, http_mcp: HttpMcp) -> None:
    await rig.discover({"web": http_mcp.config()})
    async with batch_registry(
        None, rig.store, RUN, home=rig.home, execution_dir=rig.workdir
    ) as registry:
        assert registry is not None
        ctx = ToolContext(RUN, "node", rig.workdir, rig.run_dir)
        tools = {name: registry.get(name) for name in (LOOKUP, REFUSE)}
        keys = {name: tool.lock_keys(ctx, {}) for name, tool in tools.items() if tool is not None}
    assert keys == {LOOKUP: ["mcp-server:web"], REFUSE: ["mcp-server:web"]}


async def test_a_tool_whose_name_is_taken_is_skipped_with_a_warning(
    rig: Rig, http_mcp: HttpMcp
) -> None:
    found = await rig.discover({"web": http_mcp.config()}, reserved=("read", LOOKUP))
    assert [t.spec.name for t in found.tools] == [REFUSE]
    assert found.warnings == [
        f"ignored MCP tool 'lookup' of server 'web': the name {LOOKUP!r} is already taken by "
        "another tool"
    ]


async def test_servers_that_cannot_be_set_up_are_ignored_with_a_warning(
    rig: Rig, http_mcp: HttpMcp
) -> None:
    python = stdio_config()["command"]
    started = time.monotonic()
    found = await rig.discover(
        {
            "web": http_mcp.config(),
            "missing": {"command": str(rig.workdir / "no-such-server")},
            "quits": {"command": python, "args": ["-c", "import sys; sys.exit('bad token')"]},
            "mute": {"command": python, "args": ["-c", "import time; time.sleep(30)"]},
            "nowhere": {"url": f"http://127.0.0.1:{free_port()}/mcp"},
            "nourl": {"transport": "http"},
            "nofolder": stdio_config(cwd="missing"),
        },
        start_timeout_s=1,
    )
    assert time.monotonic() - started < 10
    assert [t.spec.name for t in found.tools] == [LOOKUP, REFUSE]
    by_server = {w.split("'")[1]: w for w in found.warnings}
    assert set(by_server) == {"missing", "quits", "mute", "nowhere", "nourl", "nofolder"}
    assert all(w.startswith("ignored MCP server ") for w in found.warnings)
    assert all(w.count('under "mcp" in settings.json') == 1 for w in found.warnings)
    assert "its command was not found" in by_server["missing"]
    assert "did not start and list its tools within 1s" in by_server["mute"]
    assert "could not be reached" in by_server["nowhere"]
    assert "needs a `url`" in by_server["nourl"]
    assert (
        f"its working folder {str(rig.workdir / 'missing')!r} does not exist"
        in (by_server["nofolder"])
    )
    log = rig.run_dir / "mcp-logs" / "quits.log"
    assert f"(its error output is in {log})" in by_server["quits"]
    assert "bad token" in log.read_text()


async def test_calls_over_stdio_return_the_servers_results(rig: Rig) -> None:
    await rig.discover({CALC: stdio_config()})
    add, where, snap, odd = await rig.call(
        (ADD, {"a": 2, "b": 3}), (WHERE, {}), (SNAP, {}), (ODD, {})
    )
    assert (add.content, add.is_error) == ("5", False)
    assert add.tool_name == ADD and add.tool_call_id == "call-0"
    assert Path(where.content) == rig.workdir
    assert snap.content == (
        "first line\nsecond line\n[image content: image/png, 8 bytes, not shown]"
    )
    assert odd.content == "odd"


async def test_calls_over_http_return_the_servers_results(rig: Rig, http_mcp: HttpMcp) -> None:
    await rig.discover({"web": http_mcp.config()})
    (found,) = await rig.call((LOOKUP, {"word": "mcp"}))
    assert (found.content, found.is_error) == ("mcp: found", False)
    (legacy,) = await rig.call(("mcp/web/lookup", {"word": "old"}))
    assert (legacy.content, legacy.is_error) == ("old: found", False)


async def test_an_error_result_from_the_server_is_an_error_for_the_model(
    rig: Rig, http_mcp: HttpMcp
) -> None:
    await rig.discover({CALC: stdio_config(), "web": http_mcp.config()})
    failed, refused = await rig.call((FAIL, {"reason": "disk full"}), (REFUSE, {}))
    assert failed.is_error and "disk full" in failed.content
    assert refused.is_error and "not today" in refused.content
    assert not [e for e in rig.events if e.get("type") == "ToolRetrying"]


async def test_a_tool_that_changed_since_the_run_started_is_refused(rig: Rig) -> None:
    found = await rig.discover({CALC: stdio_config()})
    pinned = next(t.mcp.sha256 for t in found.tools if t.spec.name == ADD)
    write_mcp_settings(rig.home, {CALC: stdio_config(env={"MCP_TEST_VARIANT": "changed"})})
    add, where = await rig.call((ADD, {"a": 2, "b": 3}), (WHERE, {}))
    assert add.is_error
    assert add.content == (
        f"[failed] MCP tool {ADD} changed since this run started (pinned definition "
        f"{pinned[:12]}); start a new run to use the new version"
    )
    assert (Path(where.content), where.is_error) == (rig.workdir, False)


async def test_a_changed_or_removed_http_tool_is_refused(rig: Rig, http_mcp: HttpMcp) -> None:
    await rig.discover({"web": http_mcp.config()})
    http_mcp.server.remove_tool("lookup")
    http_mcp.server.remove_tool("refuse")

    def lookup(word: str, language: str = "en") -> str:
        return f"{word} ({language}): found"

    http_mcp.server.add_tool(lookup, name="lookup", description="Look a word up.")
    changed, removed = await rig.call((LOOKUP, {"word": "mcp"}), (REFUSE, {}))
    assert changed.is_error and changed.content.startswith(f"[failed] MCP tool {LOOKUP} changed")
    assert removed.is_error
    assert removed.content == (
        f"[failed] MCP tool {REFUSE} is no longer offered by server 'web'; start a new run to "
        "use the server's current tools"
    )


async def test_a_call_that_takes_too_long_times_out_and_is_not_retried(rig: Rig) -> None:
    await rig.discover({CALC: stdio_config()})
    started = time.monotonic()
    (slow,) = await rig.call((SLEEP, {"seconds": 5}), call_timeout_s=0.5)
    assert time.monotonic() - started < 4.5
    assert slow.is_error
    assert slow.content.startswith(f"[timeout] {SLEEP} timed out after 0.5s — ")
    assert not [e for e in rig.events if e.get("type") == "ToolRetrying"]


async def until(predicate: Any, timeout: float = 20.0) -> None:
    """Poll `predicate` until it holds or the deadline passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_cancelled_batch_stops_the_call_and_its_server(rig: Rig) -> None:
    await rig.discover({CALC: stdio_config()})
    cancel = asyncio.Event()
    batch = asyncio.create_task(rig.batch((SLEEP, {"seconds": 60}), cancel=cancel))
    marker = rig.workdir / "sleeping"
    await until(marker.exists)
    await until(lambda: marker.read_text().isdigit())
    cancel.set()
    outcome = await asyncio.wait_for(batch, 15)
    assert outcome.interrupted
    (result,) = outcome.results
    assert (result.content, result.is_error) == (f"[cancelled] {SLEEP} was cancelled", True)
    await until(lambda: process_gone(int(marker.read_text())))


async def test_an_unreachable_or_unconfigured_server_fails_the_call(
    rig: Rig, http_mcp: HttpMcp
) -> None:
    await rig.discover({"web": http_mcp.config()})
    write_mcp_settings(rig.home, {"web": {"url": f"http://127.0.0.1:{free_port()}/mcp"}})
    (unreachable,) = await rig.call((LOOKUP, {"word": "x"}))
    assert unreachable.is_error
    assert unreachable.content.startswith("[failed] MCP server 'web' is unreachable: ")
    assert not [e for e in rig.events if e.get("type") == "ToolRetrying"]
    write_mcp_settings(rig.home, {})
    (gone,) = await rig.call((LOOKUP, {"word": "x"}))
    assert gone.content == (
        "[failed] MCP server 'web' is no longer configured in settings.json; add it back or "
        "start a new run"
    )


async def test_prepare_run_freezes_the_catalog_and_batches_use_it(
    rig: Rig, http_mcp: HttpMcp
) -> None:
    write_scripted_settings(rig.home, {})
    write_mcp_settings(rig.home, {"web": http_mcp.config(), "broken": {"transport": "http"}})
    tools = default_registry()
    files = RunFiles(rig.home, rig.store)
    batches = BatchDeps(files=files, tools=tools, live=None, budget=asyncio.Semaphore(16))
    turn = ModelTurnActivity(files, ModelProviders(files), batches)
    prepared = await PrepareRunActivity(files, tools).prepare_run(
        c.PrepareInput(
            run_id=RUN, workflow=make_workflow([node("ask")], []), project_dir=str(rig.workdir)
        )
    )
    assert {LOOKUP, REFUSE, "read", "bash"} <= set(prepared.tool_names)
    assert prepared.tool_names == sorted(prepared.tool_names)
    assert len(prepared.warnings) == 1
    assert prepared.warnings[0].startswith("ignored MCP server 'broken': ")
    catalog = {e["name"]: e for e in json.loads(rig.store.get_bytes(RUN, "catalog.json"))}
    assert catalog[LOOKUP]["mcp"]["server_id"] == "web"
    assert "mcp" not in catalog["read"]
    (offered,) = turn.offered(RUN, (LOOKUP,))
    assert offered.description == "Look a word up."

    http_mcp.server.remove_tool("lookup")
    http_mcp.server.add_tool(lambda word: word, name="lookup", description="Something else.")
    write_mcp_settings(rig.home, {"web": http_mcp.config(), "late": stdio_config()})
    (still,) = turn.offered(RUN, (LOOKUP,))
    assert still.description == "Look a word up."
    batch = await run_batch(
        batches,
        c.ToolBatchInput(
            run_id=RUN,
            batch_id="b1",
            node_id="ask",
            calls=[ToolCall(id="c1", name=REFUSE, arguments={}), ToolCall(id="c2", name=LOOKUP)],
            execution_dir=str(rig.workdir),
            side_effects=True,
        ),
    )
    refused, changed = batch.results
    assert refused.is_error and "not today" in refused.content
    assert changed.is_error and "changed since this run started" in changed.content


async def test_a_tool_whose_input_schema_is_over_the_limits_is_left_out(
    rig: Rig, http_mcp: HttpMcp
) -> None:
    def deep(value: str) -> str:
        return value

    def wide(value: str) -> str:
        return value

    http_mcp.server.add_tool(deep, name="deep", description="A deeply nested schema.")
    http_mcp.server.add_tool(wide, name="wide", description="A very large schema.")
    nested: dict[str, Any] = {"type": "string"}
    for _ in range(40):  # 81 levels: deeper than the limit, not than the MCP client can read
        nested = {"type": "object", "properties": {"value": nested}}
    tools = http_mcp.server._tool_manager  # the test server's own registry
    tools.get_tool("deep").parameters = nested  # type: ignore[union-attr]
    tools.get_tool("wide").parameters = {  # type: ignore[union-attr]
        "type": "object",
        "description": "x" * 200_000,
    }

    found = await rig.discover({"web": http_mcp.config()})

    assert [t.spec.name for t in found.tools] == [LOOKUP, REFUSE]
    assert len(found.warnings) == 2
    deep_warning, wide_warning = found.warnings
    assert deep_warning.startswith("ignored MCP tool 'deep' of server 'web': its input schema")
    assert "over the limit max_schema_depth (64 levels)" in deep_warning
    assert "over the limit max_schema_bytes" in wide_warning
