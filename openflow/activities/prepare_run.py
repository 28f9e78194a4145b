"""The `prepare_run` activity: settle a run's providers, models, tools and folder at its start.

Keys are resolved here, on the worker; none of them ever travels in an input or a result.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from temporalio import activity

from openflow import contracts as c
from openflow.activities.heartbeat import heartbeating
from openflow.activities.mcp_context import stored
from openflow.activities.providers.errors import ProviderError
from openflow.activities.providers.scripted import ScriptError, load_script
from openflow.activities.run_files import CATALOG_KEY, PROFILES_KEY, RUN_KEY, RunFiles
from openflow.activities.tools_runner import MCP_PACKAGE, tool_specs
from openflow.activities.webhooks import webhook_refs
from openflow.engine.errors import LimitExceeded, WorkflowFormatError
from openflow.engine.limits import schema_limit_problem
from openflow.engine.policy import HARNESS_TOOLS, SEAL_TOOL
from openflow.engine.request import ToolSpec
from openflow.engine.spec import AgentsFile, CallableAgent, Workflow
from openflow.engine.subagents import snapshot_agents
from openflow.paths import agents_path
from openflow.settings import SETTINGS_FILE, AppSettings, ProviderProfile, load_settings

if TYPE_CHECKING:
    from openflow.activities.tools.registry import ToolRegistry


def raise_app(message: str) -> NoReturn:
    """Fail an activity for good with a message a person can act on."""
    from temporalio.exceptions import ApplicationError

    raise ApplicationError(message, non_retryable=True)


class PrepareRunActivity:
    """Settles a run at its start; the worker's tools and run files come in explicitly."""

    def __init__(self, files: RunFiles, tools: ToolRegistry | None) -> None:
        self.files = files
        self.tools = tools
        self._settings: tuple[tuple[int, int, int], AppSettings] | None = None
        self._builtin: tuple[tuple[str, ...], dict[str, ToolSpec], list[dict[str, Any]]] | None
        self._builtin = None

    @activity.defn(name=c.ACTIVITY_PREPARE)
    async def prepare_run(self, inp: c.PrepareInput) -> c.PrepareResult:
        # Heartbeating throughout (MCP servers may take seconds to start): a worker killed
        # here is replaced within seconds.
        return await heartbeating(self._prepare(inp))

    async def _prepare(self, inp: c.PrepareInput) -> c.PrepareResult:
        store = self.files.store
        # Off the event loop (settings, provider SDK imports, the store), so the heartbeat
        # goes on however long they take on a loaded machine.
        settings, wf, profiles, execution_dir = await asyncio.to_thread(self._settle, inp)
        builtin, entries = self._builtin_catalog()
        catalog = list(entries)
        warnings: list[str] = []
        read_tools: list[str] = []
        if settings.mcp:
            # Importing the MCP SDK takes seconds on a busy machine: never on the event loop.
            mcp_package = await asyncio.to_thread(importlib.import_module, MCP_PACKAGE)
            mcp = await mcp_package.discover_tools(
                settings.mcp,
                reserved=[*builtin, *HARNESS_TOOLS, SEAL_TOOL],
                cwd=Path(execution_dir),
                run_dir=store.run_dir(inp.run_id),
            )
            catalog += [tool.catalog_entry() for tool in mcp.tools]
            read_tools = sorted(t.spec.name for t in mcp.tools if t.spec.tier == "read")
            warnings = mcp.warnings
        if any(n.agent.mcp_resources or n.agent.mcp_prompts for n in wf.nodes):
            # The nodes' MCP resources and prompts, frozen for the run (spec 2.3 step 9);
            # large contents go to the run store, so history carries only their names.
            mcp_package = await asyncio.to_thread(importlib.import_module, MCP_PACKAGE)
            await mcp_package.resolve_context(
                settings.mcp, wf, cwd=Path(execution_dir), run_dir=store.run_dir(inp.run_id)
            )
            await asyncio.to_thread(self._keep_context, inp.run_id, wf)
        tool_names = sorted(entry["name"] for entry in catalog)
        if self.tools is not None:
            # The seal tool is offered only to a plan source while planning; the engine adds
            # it to that node's request, so its spec is in the catalog but not in tool_names.
            catalog += [
                s.model_dump(mode="json")
                for s in self.tools.specs("planning", plan_source=True)
                if s.name == SEAL_TOOL
            ]
        await asyncio.to_thread(self._keep_run, inp.run_id, catalog, execution_dir)
        return c.PrepareResult(
            workflow=wf,
            profiles={pid: {"kind": data.get("kind")} for pid, data in profiles.items()},
            active_provider=wf.settings.provider_id or "",
            tool_names=tool_names,
            execution_dir=execution_dir,
            warnings=warnings,
            agents=self._callable_agents(wf),
            read_tools=read_tools,
            webhooks=webhook_refs(settings.webhooks),
        )

    def _settle(
        self, inp: c.PrepareInput
    ) -> tuple[AppSettings, Workflow, dict[str, dict[str, Any]], str]:
        """The run's settings, its workflow with providers and models filled in, the profiles
        it keeps (stored, keys left out) and its execution folder (created)."""
        settings = self.settings()
        # The input is this activity's own (decoded from its payload): filled in in place.
        wf = inp.workflow
        default = inp.provider_id or wf.settings.provider_id or settings.active_provider
        if not default:
            raise_app(
                "no provider is selected: set active_provider in settings.json or the "
                "workflow's settings.provider_id"
            )
        wf.settings.provider_id = default
        used = {default} | {n.agent.provider_id for n in wf.nodes if n.agent.provider_id}
        profiles: dict[str, dict[str, Any]] = {}
        for pid in sorted(p for p in used if p):
            profile = settings.profile(pid)
            if profile is None:
                raise_app(f"provider {pid!r} is not configured: add it to settings.json")
            _check_credentials(pid, profile, settings)
            data = profile.model_dump(mode="json", by_alias=False)
            if profile.kind == "scripted":
                try:
                    data["script"] = load_script(
                        profile.script, profile.script_path, self.files.env
                    )
                except ScriptError as exc:
                    raise_app(str(exc))
            data.pop("api_key", None)
            profiles[pid] = data
        for node in wf.nodes:
            agent = node.agent
            pid = agent.provider_id or default
            if agent.reasoning_effort is None and wf.settings.reasoning_effort is not None:
                agent.reasoning_effort = wf.settings.reasoning_effort
                if agent.reasoning_budget_tokens is None:
                    agent.reasoning_budget_tokens = wf.settings.reasoning_budget_tokens
            prof = settings.profile(pid)
            if prof is not None and not agent.model.strip():
                agent.model = prof.default_model
        execution_dir = self.files.make_execution_dir(inp.run_id, inp.project_dir)
        self.files.store.put_bytes(
            inp.run_id, PROFILES_KEY, json.dumps(profiles, sort_keys=True).encode()
        )
        return settings, wf, profiles, execution_dir

    def settings(self) -> AppSettings:
        """settings.json, parsed again only when the file changes (read, never changed)."""
        path = self.files.home / SETTINGS_FILE
        try:
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = (0, 0, -1)
        known = self._settings
        if known is not None and known[0] == stamp:
            return known[1]
        settings = load_settings(self.files.home)
        self._settings = (stamp, settings)
        return settings

    def _builtin_catalog(self) -> tuple[dict[str, ToolSpec], list[dict[str, Any]]]:
        """The worker's built-in tools by name and as catalog entries, made again only when a
        tool is registered (entries are read, never changed)."""
        names = tuple(self.tools.names()) if self.tools is not None else ()
        known = self._builtin
        if known is None or known[0] != names:
            builtin = tool_specs(self.tools)
            entries = [builtin[n].model_dump(mode="json") for n in sorted(builtin)]
            known = self._builtin = (names, builtin, entries)
        return known[1], known[2]

    def _keep_run(self, run_id: str, catalog: list[dict[str, Any]], execution_dir: str) -> None:
        """Store the run's tool catalog and where it runs."""
        store = self.files.store
        store.put_bytes(run_id, CATALOG_KEY, json.dumps(catalog).encode())
        store.put_bytes(run_id, RUN_KEY, json.dumps({"execution_dir": execution_dir}).encode())

    def _keep_context(self, run_id: str, wf: Workflow) -> None:
        """Store each large MCP content and leave its name in the node's snapshot."""
        for node in wf.nodes:
            agent = node.agent
            agent.mcp_context_snapshots = [
                stored(self.files.store, run_id, s) for s in agent.mcp_context_snapshots
            ]

    def _callable_agents(self, wf: Workflow) -> list[CallableAgent]:
        """The saved agents the workflow's nodes may call, read from agents.json (spec 6)."""
        if not any(n.agent.callable_agents or n.agent.allow_all_callable_agents for n in wf.nodes):
            return []
        path = agents_path(self.files.home)
        try:
            saved = AgentsFile.load_json(path.read_bytes()).agents
        except FileNotFoundError:
            return []
        except (WorkflowFormatError, LimitExceeded) as exc:
            raise_app(f"{path} cannot be read: {exc}; fix or remove the file")
        kept = snapshot_agents(wf, saved)
        for agent in kept:
            over = schema_limit_problem(agent.output_schema, f"agent {agent.id!r}: output_schema")
            if over is not None:
                raise_app(f"{path}: {over[1]}")
        return kept


def _check_credentials(provider_id: str, profile: ProviderProfile, settings: AppSettings) -> None:
    """A run whose provider has no usable key fails at start, naming the variable."""
    if profile.kind in ("scripted", "bedrock"):
        return
    from openflow.activities.providers.registry import default_registry

    try:
        default_registry().api_key(provider_id, profile, settings)
    except ProviderError as exc:
        raise_app(exc.failure.message)


__all__ = ["PrepareRunActivity", "raise_app"]
