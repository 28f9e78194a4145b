"""The `prepare_run` activity: settle a run's providers, models, tools and folder at its start.

Keys are resolved here, on the worker; none of them ever travels in an input or a result.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NoReturn

from temporalio import activity

from openflow import contracts as c
from openflow.activities.heartbeat import heartbeating
from openflow.activities.lru import Lru
from openflow.activities.mcp_context import stored
from openflow.activities.providers.errors import ProviderError
from openflow.activities.providers.scripted import ScriptError, load_script
from openflow.activities.run_files import CATALOG_KEY, PROFILES_KEY, RUN_KEY, RunFiles
from openflow.activities.store import KeyNotFound
from openflow.activities.tools_runner import MCP_PACKAGE, tool_specs
from openflow.activities.webhooks import webhook_refs
from openflow.engine.advance import start
from openflow.engine.errors import LimitExceeded, WorkflowFormatError
from openflow.engine.headers import expected_parts
from openflow.engine.limits import schema_limit_problem
from openflow.engine.policy import HARNESS_TOOLS, SEAL_TOOL
from openflow.engine.spec import AgentsFile, CallableAgent, Workflow
from openflow.engine.state import RunSnapshot
from openflow.engine.subagents import snapshot_agents
from openflow.paths import agents_path
from openflow.settings import SETTINGS_FILE, AppSettings, ProviderProfile, load_settings

if TYPE_CHECKING:
    from openflow.activities.tools.registry import ToolRegistry


#: A start settled: its settings, its workflow with providers and models filled in, and the
#: profiles it keeps (`PrepareRunActivity._settle`).
_Settled = tuple[AppSettings, Workflow, dict[str, dict[str, Any]]]
#: What a start without MCP kept (`PrepareRunActivity._keep_all`).
_Kept = tuple[list[str], str, list[CallableAgent], str]


def raise_app(message: str) -> NoReturn:
    """Fail an activity for good with a message a person can act on."""
    from temporalio.exceptions import ApplicationError

    raise ApplicationError(message, non_retryable=True)


class PrepareRunActivity:
    """Settles a run at its start; the worker's tools and run files come in explicitly."""

    def __init__(self, files: RunFiles, tools: ToolRegistry | None) -> None:
        self.files = files
        self.tools = tools
        self._builtin: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
        #: The catalog of a run without MCP tools, as stored: the same bytes for every run.
        self._listed: bytes | None = None
        #: The header parts of recent starts (stored JSON and digests), by all they depend on.
        self._parts: Lru[str, tuple[bytes, list[str]]] = Lru(64)
        self._settings: tuple[tuple[int, int, int], AppSettings] | None = None
        #: Stored workflows as parsed, by digest.
        self._workflows: Lru[str, Workflow] = Lru(64)

    def builtin_catalog(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The worker's own tools as the catalog lists them, and the seal tool's entry (which
        the engine offers a plan source only): the same for every run, so made once."""
        if self._builtin is None:
            builtin = tool_specs(self.tools)
            seal = []
            if self.tools is not None:
                seal = [
                    s.model_dump(mode="json")
                    for s in self.tools.specs("planning", plan_source=True)
                    if s.name == SEAL_TOOL
                ]
            self._builtin = ([builtin[n].model_dump(mode="json") for n in sorted(builtin)], seal)
        return self._builtin

    @activity.defn(name=c.ACTIVITY_PREPARE)
    async def prepare_run(self, inp: c.PrepareInput) -> c.PrepareResult:
        if activity.in_activity() and activity.info().is_local:
            # In the workflow's task (new runs): a worker killed here loses the task, which
            # another worker takes over when it times out; a local activity has no heartbeat.
            return await self._prepare(inp)
        # Heartbeating throughout (MCP servers may take seconds to start): a worker killed
        # here is replaced within seconds.
        return await heartbeating(self._prepare(inp))

    async def _prepare(self, inp: c.PrepareInput) -> c.PrepareResult:
        settled: _Settled | None = None
        kept_all: _Kept | None = None
        if inp.workflow is None:
            # One thread hop for the stored workflow, the settling that follows it and, for a
            # run without MCP, all it keeps.
            stored, settled, kept_all = await self.files.off_loop(self._stored_and_settled, inp)
            if stored is None:
                return c.PrepareResult(
                    profiles={},
                    active_provider="",
                    tool_names=[],
                    execution_dir="",
                    workflow_missing=True,
                )
            inp = inp.model_copy(update={"workflow": stored})
        # Off the event loop (settings, provider SDK imports), so the heartbeat goes on however
        # long they take on a loaded machine.
        if settled is None:
            found, kept_all = await self.files.off_loop(self._settle_and_keep, inp)
            settled = found
        settings, wf, profiles = settled
        if kept_all is not None:
            # No MCP: all was kept in the same thread hop (`_keep_all`).
            tool_names, execution_dir, agents, parts = kept_all
            return self._result(
                inp, wf, settings, profiles, tool_names, execution_dir, [], agents, [], parts
            )
        # With MCP: what the run keeps in its folder is written at once, each write in a
        # thread of its own, while the MCP servers start.
        kept = json.dumps(profiles, sort_keys=True).encode()
        builtin, seal = self.builtin_catalog()
        profiles_kept = asyncio.ensure_future(
            asyncio.to_thread(self._put_kept, inp.run_id, PROFILES_KEY, kept)
        )
        folder = asyncio.ensure_future(asyncio.to_thread(self._make_folder, inp))
        catalog = list(builtin)
        warnings: list[str] = []
        read_tools: list[str] = []
        if settings.mcp or _mcp_context(wf):
            # The MCP servers start in the run's folder: it is made first.
            execution_dir, _ = await asyncio.gather(folder, profiles_kept)
            mcp_tools, warnings, read_tools = await self._mcp(inp, settings, wf, execution_dir)
            catalog += mcp_tools
        tool_names = sorted(entry["name"] for entry in catalog)
        # The seal tool is offered only to a plan source while planning; the engine adds it
        # to that node's request, so its spec is in the catalog but not in tool_names.
        catalog += seal
        listed = json.dumps(catalog).encode()
        execution_dir, _, _ = await asyncio.gather(
            folder,
            profiles_kept,
            asyncio.to_thread(self._put_kept, inp.run_id, CATALOG_KEY, listed),
        )
        agents = self._callable_agents(wf)
        parts = await asyncio.to_thread(
            self._store_parts, inp, wf, execution_dir, tool_names, agents, read_tools
        )
        return self._result(
            inp,
            wf,
            settings,
            profiles,
            tool_names,
            execution_dir,
            warnings,
            agents,
            read_tools,
            parts,
        )

    def _result(
        self,
        inp: c.PrepareInput,
        wf: Workflow,
        settings: AppSettings,
        profiles: dict[str, dict[str, Any]],
        tool_names: list[str],
        execution_dir: str,
        warnings: list[str],
        agents: list[CallableAgent],
        read_tools: list[str],
        parts: str,
    ) -> c.PrepareResult:
        active = wf.settings.provider_id or ""
        return c.PrepareResult(
            # The workflow goes back only when the start changed more than its provider.
            workflow=None if c.settled_workflow(_workflow(inp), active) == wf else wf,
            profiles={pid: {"kind": data.get("kind")} for pid, data in profiles.items()},
            # The one profile needs no name: the workflow's stub fills it in (`provider`).
            active_provider=None if list(profiles) == [active] else active,
            tool_names=tool_names,
            # The run's project, when it works there: the workflow knows it; the run's own
            # folder without the run's id, which the workflow knows too.
            **_folder(inp, execution_dir),
            warnings=warnings,
            agents=agents,
            read_tools=read_tools,
            webhooks=webhook_refs(settings.webhooks),
            # One digest for the set: the workflow knows the set from its own start.
            header_parts_digest=parts,
        )

    def _stored_and_settled(
        self, inp: c.PrepareInput
    ) -> tuple[Workflow | None, _Settled | None, _Kept | None]:
        """The stored workflow and, when it is there, the start settled with it (and all it
        keeps, when it has no MCP)."""
        stored = self._stored_workflow(inp)
        if stored is None:
            return None, None, None
        return stored, *self._settle_and_keep(inp.model_copy(update={"workflow": stored}))

    def _settle_and_keep(self, inp: c.PrepareInput) -> tuple[_Settled, _Kept | None]:
        """The start settled, then, for a run without MCP, all it keeps (`_keep_all`)."""
        settled = self._settle(inp)
        settings, wf, profiles = settled
        if settings.mcp or _mcp_context(wf):
            return settled, None
        return settled, self._keep_all(inp, wf, profiles)

    def _keep_all(
        self, inp: c.PrepareInput, wf: Workflow, profiles: dict[str, dict[str, Any]]
    ) -> _Kept:
        """What a run without MCP keeps, written one after another in the thread the start
        settled in: its profiles, its catalog (the worker's own tools, known already), its
        folder and its header parts. One thread hop for a start, not three: under a burst of
        starts each hop waits its turn for the event loop and a thread, which the first model
        call waits on; the writes one after another cost an idle machine about a millisecond.
        Its tool names, folder, callable agents and header parts' digest."""
        builtin, _ = self.builtin_catalog()
        tool_names = sorted(entry["name"] for entry in builtin)
        self._put_kept(inp.run_id, PROFILES_KEY, json.dumps(profiles, sort_keys=True).encode())
        self._put_kept(inp.run_id, CATALOG_KEY, self.listed_catalog())
        agents = self._callable_agents(wf)
        execution_dir = self._make_folder(inp)
        parts = self._store_parts(inp, wf, execution_dir, tool_names, agents, [])
        return tool_names, execution_dir, agents, parts

    def listed_catalog(self) -> bytes:
        """The stored catalog of a run without MCP tools: the worker's tools and the seal
        tool's entry (`builtin_catalog`), as JSON, made once."""
        if self._listed is None:
            builtin, seal = self.builtin_catalog()
            self._listed = json.dumps([*builtin, *seal]).encode()
        return self._listed

    def _put_kept(self, run_id: str, key: str, data: bytes, *, sync: bool = True) -> None:
        """Store a JSON file of the run, which this worker then keeps (its next activities
        for the run usually run here and read it)."""
        self.files.store.put_bytes(run_id, key, data, sync=sync)
        self.files.keep_json(run_id, key, data)

    def _stored_workflow(self, inp: c.PrepareInput) -> Workflow | None:
        """The workflow the run's client stored, or None when it is missing or not the one
        the input names (the run then asks again with the workflow itself)."""
        try:
            data = self.files.store.get_bytes(inp.run_id, c.workflow_key(inp.workflow_stored))
        except KeyNotFound:
            data = b""
        if data and c.workflow_digest(data) == inp.workflow_stored:
            # Runs of one workflow store the same bytes: parsed once (a start never changes
            # it; `_settle` fills in its own copy).
            known = self._workflows.get(inp.workflow_stored)
            if known is not None:
                return known
            try:
                parsed = Workflow.model_validate_json(data)
            except ValueError:
                pass
            else:
                self._workflows.put(inp.workflow_stored, parsed)
                return parsed
        activity.logger.warning("run %r: its stored workflow is missing; asking for it", inp.run_id)
        return None

    def _store_parts(
        self,
        inp: c.PrepareInput,
        wf: Workflow,
        execution_dir: str,
        tool_names: list[str],
        agents: list[CallableAgent],
        read_tools: list[str],
    ) -> str:
        """Store the request header parts the run's calls will carry (the engine's start,
        as the workflow will make it, foretells them); the digest of their set ("" for none).

        The parts depend on neither the run's id nor its folder, so the runs of one workflow
        share the engine's work; a part is named by its digest, so one the calls do not carry
        only goes unused.
        """
        # The workflow's own JSON (pydantic's, field order fixed), not a canonical one: a key
        # made another way for an equal workflow only costs the engine's work once more.
        material = [
            wf.model_dump_json().encode(),
            json.dumps(
                [
                    inp.project_dir,
                    tool_names,
                    [a.model_dump(mode="json") for a in agents],
                    read_tools,
                ],
                sort_keys=True,
            ).encode(),
        ]
        key = hashlib.sha256(b"\0".join(material)).hexdigest()
        known = self._parts.get(key)
        if known is None:
            known = self._foretold_parts(inp, wf, execution_dir, tool_names, agents, read_tools)
            self._parts.put(key, known)
        data, digests = known
        if not digests:
            return ""
        # Unsynced: a call that finds the parts missing (lost in a machine crash) says so, and
        # the workflow sends its headers whole instead.
        self._put_kept(inp.run_id, c.HEADER_PARTS_KEY, data, sync=False)
        digest = c.parts_digest(digests)
        # The run's workflow, on this worker, finds its set here: one set for every run that
        # stored it (each paused run keeps it).
        if _FORETOLD.get(digest) is None:
            _FORETOLD.put(digest, frozenset(digests))
        return digest

    def _foretold_parts(
        self,
        inp: c.PrepareInput,
        wf: Workflow,
        execution_dir: str,
        tool_names: list[str],
        agents: list[CallableAgent],
        read_tools: list[str],
    ) -> tuple[bytes, list[str]]:
        plan = start(
            wf,
            inp.run_id,
            0,
            execution_dir=execution_dir,
            project_root=inp.project_dir,
            tool_names=tool_names,
            agents=agents,
            read_tools=read_tools,
        )
        if plan.status == "failed":
            return b"", []
        parts = expected_parts(plan.snapshot)
        if not parts:
            return b"", []
        return json.dumps(parts, separators=(",", ":"), ensure_ascii=False).encode(), list(parts)

    async def _mcp(
        self, inp: c.PrepareInput, settings: AppSettings, wf: Workflow, execution_dir: str
    ) -> tuple[list[dict[str, Any]], list[str], list[str]]:
        """The MCP tools' catalog entries, warnings and read tools; the nodes' MCP resources
        and prompts frozen for the run."""
        store = self.files.store
        catalog: list[dict[str, Any]] = []
        warnings: list[str] = []
        read_tools: list[str] = []
        if settings.mcp:
            # Importing the MCP SDK takes seconds on a busy machine: never on the event loop.
            mcp_package = await asyncio.to_thread(importlib.import_module, MCP_PACKAGE)
            builtin = tool_specs(self.tools)
            mcp = await mcp_package.discover_tools(
                settings.mcp,
                reserved=[*builtin, *HARNESS_TOOLS, SEAL_TOOL],
                cwd=Path(execution_dir),
                run_dir=store.run_dir(inp.run_id),
            )
            catalog = [tool.catalog_entry() for tool in mcp.tools]
            read_tools = sorted(t.spec.name for t in mcp.tools if t.spec.tier == "read")
            warnings = mcp.warnings
        if _mcp_context(wf):
            # The nodes' MCP resources and prompts, frozen for the run (spec 2.3 step 9);
            # large contents go to the run store, so history carries only their names.
            mcp_package = await asyncio.to_thread(importlib.import_module, MCP_PACKAGE)
            await mcp_package.resolve_context(
                settings.mcp, wf, cwd=Path(execution_dir), run_dir=store.run_dir(inp.run_id)
            )
            await asyncio.to_thread(self._keep_context, inp.run_id, wf)
        return catalog, warnings, read_tools

    def _make_folder(self, inp: c.PrepareInput) -> str:
        """The run's execution folder, created, and where the run's tools find it."""
        execution_dir = self.files.make_execution_dir(inp.run_id, inp.project_dir)
        data = json.dumps({"execution_dir": execution_dir}).encode()
        self._put_kept(inp.run_id, RUN_KEY, data)
        return execution_dir

    def _settle(
        self, inp: c.PrepareInput
    ) -> tuple[AppSettings, Workflow, dict[str, dict[str, Any]]]:
        """The run's settings, its workflow with providers and models filled in, and the
        profiles it keeps (keys left out)."""
        settings = self.settings()
        wf = _own_copy(_workflow(inp))
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
        return settings, wf, profiles

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


#: The header part sets recent starts stored, by `contracts.parts_digest`.
_FORETOLD: Lru[str, frozenset[str]] = Lru(256)


def stored_parts(result: c.PrepareResult, snapshot: RunSnapshot) -> frozenset[str]:
    """The header parts a run's start stored (`snapshot`: the run's first).

    A result names the set by its digest: the worker that prepared the run knows it; any
    other (one that took the run over) foretells it again from the snapshot, as the start
    did. A set that does not match the digest is none (its calls send their headers whole).
    Results from before the digest list the parts themselves.
    """
    digest = result.header_parts_digest
    if not digest:
        return frozenset(result.header_parts)
    known = _FORETOLD.get(digest)
    if known is None:
        found = frozenset(expected_parts(snapshot))
        if c.parts_digest(found) != digest:
            return frozenset()
        _FORETOLD.put(digest, found)
        known = found
    return known


def _mcp_context(wf: Workflow) -> bool:
    """Whether a node of the workflow reads MCP resources or prompts."""
    return any(n.agent.mcp_resources or n.agent.mcp_prompts for n in wf.nodes)


def _check_credentials(provider_id: str, profile: ProviderProfile, settings: AppSettings) -> None:
    """A run whose provider has no usable key fails at start, naming the variable."""
    if profile.kind in ("scripted", "bedrock"):
        return
    from openflow.activities.providers.registry import default_registry

    try:
        default_registry().api_key(provider_id, profile, settings)
    except ProviderError as exc:
        raise_app(exc.failure.message)


def _own_copy(wf: Workflow) -> Workflow:
    """A copy of `wf` whose settings and agents (what a start fills in) can be changed in
    place; the rest is shared with `wf`, which stays as it was."""
    nodes = [node.model_copy(update={"agent": node.agent.model_copy()}) for node in wf.nodes]
    return wf.model_copy(update={"settings": wf.settings.model_copy(), "nodes": nodes})


def _workflow(inp: c.PrepareInput) -> Workflow:
    """The input's workflow, filled in from the store when it travelled by reference."""
    assert inp.workflow is not None
    return inp.workflow


__all__ = ["PrepareRunActivity", "raise_app", "stored_parts"]


def _folder(inp: c.PrepareInput, execution_dir: str) -> dict[str, str]:
    """How a start's result names the run's folder: not at all when it is the run's project,
    as `run_folder` when it is a folder of the run's own named by its id (`<root>/<run_id>`
    or `<root>/<run_id>/workspace`), else as it is."""
    if execution_dir == inp.project_dir:
        return {"execution_dir": ""}
    parts = PurePosixPath(execution_dir).parts
    if (
        "*" not in execution_dir
        and parts.count(inp.run_id) == 1
        and parts[-1]
        in (
            inp.run_id,
            "workspace",
        )
    ):
        at = parts.index(inp.run_id)
        if at >= len(parts) - 2:
            pattern = str(PurePosixPath(*parts[:at], "*", *parts[at + 1 :]))
            home = pattern.removesuffix(c.RUN_HOME_FOLDER)
            if home and home != pattern and "*" not in home:
                # The run store's own layout: its home says it.
                found = c.PrepareResult(profiles={}, tool_names=[], run_home=home)
                if found.folder(inp.run_id) == execution_dir:
                    return {"run_home": home}
            if pattern.replace("*", inp.run_id, 1) == execution_dir:
                return {"run_folder": pattern}
    return {"execution_dir": execution_dir}
