"""The activities of a run: prepare it, call a model, run a tool batch, write a handoff.

Everything that touches the world is here. Keys are resolved inside these activities, on the
worker; none of them ever travels in an input or a result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import importlib
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import TypeAdapter
from temporalio import activity

from openflow import contracts as c
from openflow.activities.providers.errors import ProviderError
from openflow.activities.providers.scripted import ScriptedProvider, ScriptError, load_script
from openflow.activities.spans import elapsed_ms, model_span, record_failure, record_reply
from openflow.activities.store import KeyNotFound, RunStore
from openflow.engine.advance import reply_items
from openflow.engine.errors import LimitExceeded, WorkflowFormatError
from openflow.engine.limits import schema_limit_problem
from openflow.engine.policy import EAGER_TOOLS, HARNESS_TOOLS, SEAL_TOOL
from openflow.engine.request import AgentRequest, ModelReply, ProviderFailure, ToolSpec
from openflow.engine.review import REVIEW_NODE, render_evidence
from openflow.engine.spec import AgentsFile, CallableAgent, Workflow
from openflow.engine.state import StoredItemRef
from openflow.engine.subagents import snapshot_agents
from openflow.engine.transcript import ToolResultItem, TranscriptItem
from openflow.live import LiveChannel
from openflow.paths import agents_path
from openflow.settings import (
    AppSettings,
    ProviderProfile,
    load_settings,
    runtime_settings,
)

log = logging.getLogger(__name__)
_ITEM = TypeAdapter(TranscriptItem)
_ITEMS = TypeAdapter(list[TranscriptItem])
PREVIEW_LIMIT = 2_000
HEARTBEAT_EVERY_S = 0.5
HANDOFF_LIMIT = 1024 * 1024
PROFILES_KEY = "profiles.json"
RUN_KEY = "run.json"
MCP_PACKAGE = "openflow.activities.mcp"
T = TypeVar("T")
_CACHE_LOCK = threading.Lock()


def _line(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def preview(text: str, limit: int = PREVIEW_LIMIT) -> str:
    """The part of a tool result history keeps; the run store keeps the whole."""
    if len(text) <= limit:
        return text
    head = text[: limit - 200]
    return f"{head}\n… [{len(text) - len(head)} more characters in the run store]"


def compact_reply(reply: ModelReply) -> ModelReply:
    """A reply without what history need not carry twice (raw arguments that parsed)."""
    calls = tuple(
        call.model_copy(update={"arguments_raw": ""}) if call.arguments is not None else call
        for call in reply.tool_calls
    )
    return reply.model_copy(update={"tool_calls": calls})


def handoff_segment(node_id: str) -> str:
    """A node id as one safe path segment (spec 7)."""
    return quote(node_id, safe="-_.")


async def heartbeating(work: Awaitable[T], every_s: float = HEARTBEAT_EVERY_S) -> T:
    """Await `work` while heartbeating, so a dead worker is noticed and cancels arrive.

    Outside an activity (the activities called as plain methods) it only awaits `work`.
    """
    if not activity.in_activity():
        return await work

    async def beat() -> None:
        # The heartbeat timeout counts from the start, so a short call never needs a heartbeat
        # (one RPC saved per turn); a long one beats every `every_s` seconds.
        while True:
            await asyncio.sleep(every_s)
            activity.heartbeat()

    beater = asyncio.create_task(beat())
    try:
        return await work
    finally:
        beater.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beater


ProviderFactory = Callable[[str, ProviderProfile, AppSettings], Any]


def _tool_budget(env: Mapping[str, str]) -> int:
    return runtime_settings(env, only=("tool_budget",)).tool_budget


class RunActivities:
    """The activities a worker registers; clients and stores come in through the constructor."""

    def __init__(
        self,
        home: Path,
        store: RunStore,
        live: LiveChannel | None = None,
        tools: Any = None,
        provider_factory: ProviderFactory | None = None,
        env: Mapping[str, str] | None = None,
        db: Any = None,
    ) -> None:
        self.home = home
        self.db = db
        self.store = store
        self.live = live
        self.tools = tools
        self.provider_factory = provider_factory
        self.env = dict(env if env is not None else os.environ)
        self._locks: dict[str, Any] = {}
        self._caches: dict[str, Any] = {}
        self._files: dict[tuple[str, str], Any] = {}
        self._providers: dict[tuple[str, str], Any] = {}
        self._writer = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="openflow-cache")
        self._transcripts: dict[
            tuple[str, str], tuple[list[str], list[TranscriptItem], tuple[int, int] | None]
        ] = {}
        self._catalogs: dict[str, dict[str, ToolSpec]] = {}
        self._headers: dict[tuple[str, str], AgentRequest] = {}
        self._batches: dict[tuple[str, str], bytes] = {}
        self._settings_cache: tuple[tuple[int, int], AppSettings] | None = None
        self._budget = asyncio.Semaphore(_tool_budget(self.env))
        self._cluster_locks: Any = None
        self._staging: Any = None

    def cluster_locks(self) -> Any:
        """The advisory tool locks shared with every worker (None without a database)."""
        if self.db is None:
            return None
        if self._cluster_locks is None:
            from openflow.activities.tools.cluster_locks import ClusterLocks

            self._cluster_locks = ClusterLocks(self.db)
        return self._cluster_locks

    def staging(self) -> Any:
        """Local copies of run files for tools, when the store is not on this disk."""
        if self._staging is None:
            from openflow.activities.tools.staging import RunStaging

            self._staging = RunStaging()
        return self._staging

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.prepare_run,
            self.model_turn,
            self.tool_batch,
            self.write_handoff,
            self.read_receipt,
        ]

    # --- prepare ------------------------------------------------------------------------

    @activity.defn(name=c.ACTIVITY_PREPARE)
    async def prepare_run(self, inp: c.PrepareInput) -> c.PrepareResult:
        # Heartbeating throughout (MCP servers may take seconds to start): a worker killed
        # here is replaced within seconds.
        return await heartbeating(self._prepare(inp))

    async def _prepare(self, inp: c.PrepareInput) -> c.PrepareResult:
        # Off the event loop (settings, provider SDK imports, the store), so the heartbeat
        # goes on however long they take on a loaded machine.
        settings, wf, profiles, execution_dir = await asyncio.to_thread(self._settle, inp)
        builtin = self._tool_specs_by_name()
        catalog = [builtin[n].model_dump(mode="json") for n in sorted(builtin)]
        warnings: list[str] = []
        read_tools: list[str] = []
        if settings.mcp:
            # Importing the MCP SDK takes seconds on a busy machine: never on the event loop.
            mcp_package = await asyncio.to_thread(importlib.import_module, MCP_PACKAGE)
            mcp = await mcp_package.discover_tools(
                settings.mcp,
                reserved=[*builtin, *HARNESS_TOOLS, SEAL_TOOL],
                cwd=Path(execution_dir),
                run_dir=self.store.run_dir(inp.run_id),
            )
            catalog += [tool.catalog_entry() for tool in mcp.tools]
            read_tools = sorted(t.spec.name for t in mcp.tools if t.spec.tier == "read")
            warnings = mcp.warnings
        tool_names = sorted(entry["name"] for entry in catalog)
        if self.tools is not None:
            # The seal tool is offered only to a plan source while planning; the engine adds
            # it to that node's request, so its spec is in the catalog but not in tool_names.
            catalog += [
                s.model_dump(mode="json")
                for s in self.tools.specs("planning", plan_source=True)
                if s.name == SEAL_TOOL
            ]
        await asyncio.to_thread(
            self.store.put_bytes, inp.run_id, "catalog.json", json.dumps(catalog).encode()
        )
        await asyncio.to_thread(
            self.store.put_bytes,
            inp.run_id,
            RUN_KEY,
            json.dumps({"execution_dir": execution_dir}).encode(),
        )
        return c.PrepareResult(
            workflow=wf,
            profiles={pid: {"kind": data.get("kind")} for pid, data in profiles.items()},
            active_provider=wf.settings.provider_id or "",
            tool_names=tool_names,
            execution_dir=execution_dir,
            warnings=warnings,
            agents=self._callable_agents(wf),
            read_tools=read_tools,
        )

    def _settle(
        self, inp: c.PrepareInput
    ) -> tuple[AppSettings, Workflow, dict[str, dict[str, Any]], str]:
        """The run's settings, its workflow with providers and models filled in, the profiles
        it keeps (stored, keys left out) and its execution folder (created)."""
        settings = load_settings(self.home)
        wf = inp.workflow.model_copy(deep=True)
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
                continue
            self._check_credentials(pid, profile, settings)
            data = profile.model_dump(mode="json", by_alias=False)
            if profile.kind == "scripted":
                try:
                    data["script"] = load_script(profile.script, profile.script_path, self.env)
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
        execution_dir = self._execution_dir(inp)
        self.store.put_bytes(
            inp.run_id, PROFILES_KEY, json.dumps(profiles, sort_keys=True).encode()
        )
        return settings, wf, profiles, execution_dir

    def _execution_dir(self, inp: c.PrepareInput) -> str:
        """The folder the run's tools work in: its project, or its own workspace.

        The workspace is `$OPENFLOW_WORKSPACES/<run_id>` when that is set (a volume every worker
        mounts), else `$OPENFLOW_HOME/runs/<run_id>/workspace`. A folder this worker cannot see
        fails the activity retryably (another worker may see it); it is never made elsewhere.
        """
        if inp.project_dir:
            require_folder(Path(inp.project_dir))
            return inp.project_dir
        root = runtime_settings(self.env, only=("workspaces",)).workspaces or ""
        if not root:
            folder = self.home / "runs" / inp.run_id / "workspace"
            folder.mkdir(parents=True, exist_ok=True)
            return str(folder)
        require_folder(Path(root), "OPENFLOW_WORKSPACES")
        folder = Path(root) / inp.run_id
        folder.mkdir(exist_ok=True)
        return str(folder)

    def _callable_agents(self, wf: Workflow) -> list[CallableAgent]:
        """The saved agents the workflow's nodes may call, read from agents.json (spec 6)."""
        if not any(n.agent.callable_agents or n.agent.allow_all_callable_agents for n in wf.nodes):
            return []
        path = agents_path(self.home)
        try:
            saved = AgentsFile.load_json(path.read_bytes()).agents
        except FileNotFoundError:
            return []
        except (WorkflowFormatError, LimitExceeded) as exc:
            raise_app(f"{path} cannot be read: {exc}; fix or remove the file")
            return []
        kept = snapshot_agents(wf, saved)
        for agent in kept:
            over = schema_limit_problem(agent.output_schema, f"agent {agent.id!r}: output_schema")
            if over is not None:
                raise_app(f"{path}: {over[1]}")
        return kept

    def _check_credentials(
        self, provider_id: str, profile: ProviderProfile, settings: AppSettings
    ) -> None:
        """A run whose provider has no usable key fails at start, naming the variable."""
        if profile.kind in ("scripted", "bedrock"):
            return
        from openflow.activities.providers.registry import default_registry

        try:
            default_registry().api_key(provider_id, profile, settings)
        except ProviderError as exc:
            raise_app(exc.failure.message)

    def _tool_specs_by_name(self) -> dict[str, ToolSpec]:
        if self.tools is None:
            return {}
        return {spec.name: spec for spec in self.tools.specs("execution")}

    # --- model turns --------------------------------------------------------------------

    def _prepare_turn(
        self, inp: c.ModelTurnInput
    ) -> tuple[AgentRequest, list[TranscriptItem], list[ToolSpec], int]:
        """Store what this turn adds to the transcript and load what the provider needs."""
        header_key = f"headers/{inp.header_digest}.json"
        if inp.header is not None:
            # A remote store is not asked first: writing the cache in the background is
            # cheaper than a round trip on the turn's path.
            if self._remote_store(inp.run_id) or not self.store.exists(inp.run_id, header_key):
                self._cache_blob(inp.run_id, header_key, inp.header.model_dump_json().encode())
            header = inp.header
        else:
            # A header is named by its digest, so what was read once is good for every turn.
            cached = self._headers.get((inp.run_id, header_key))
            if cached is None:
                cached = AgentRequest.model_validate_json(
                    self.store.get_bytes(inp.run_id, header_key)
                )
                self._remember(self._headers, (inp.run_id, header_key), cached, limit=256)
            header = cached
        request = header.model_copy(update={"turn_index": inp.turn_index})
        if request.node_id == REVIEW_NODE:
            request = self._with_conversations(inp.run_id, request)
        key = c.transcript_key(inp.node_id)
        blobs: dict[str, list[Any]] = {}
        lines = [
            line for item in inp.delta.items for line in self._resolve(inp.run_id, item, blobs, key)
        ]
        persisted = self.store.append_lines(inp.run_id, key, lines, expected_len=inp.delta.base_len)
        transcript = self._appended_transcript(inp.run_id, key, inp.delta.base_len, lines)
        if transcript is None:
            transcript = self._transcript(inp.run_id, key)
        tools = self._offered(inp.run_id, request.tool_names)
        return request, transcript, tools, persisted

    def _with_conversations(self, run_id: str, request: AgentRequest) -> AgentRequest:
        """The post-run review's evidence with each node's whole conversation from the store,
        rendered as the reviewer reads it (history carries the evidence without them)."""
        evidence = (request.input or {}).get("runEvidence")
        if not isinstance(evidence, dict):
            return request
        nodes = []
        for node in evidence.get("nodes") or []:
            lines = self.store.read_lines(run_id, c.transcript_key(str(node.get("id"))))
            nodes.append({**node, "transcript": [json.loads(line) for line in lines]})
        text, truncated = render_evidence({**evidence, "nodes": nodes})
        return request.model_copy(
            update={"input": {"runEvidence": text, "evidenceTruncated": truncated}}
        )

    def _remote_store(self, run_id: str) -> bool:
        # Local stores can tell whether a log changed (`stamp`); remote ones are read over the
        # network and never on the event loop.
        return (
            bool(getattr(self.store, "remote", False)) or getattr(self.store, "stamp", None) is None
        )

    def _transcript(self, run_id: str, key: str) -> list[TranscriptItem]:
        """The stored transcript's items; lines read before are not parsed again, and a log
        this worker left unchanged is not read again."""
        stamp = self._stamp(run_id, key)
        seen = self._transcripts.get((run_id, key))
        if seen is not None and stamp is not None and seen[2] == stamp:
            return list(seen[1])
        lines = self.store.read_lines(run_id, key)
        seen_lines, seen_items = (seen[0], seen[1]) if seen is not None else ([], [])
        items: list[TranscriptItem] = []
        for i, line in enumerate(lines):
            if i < len(seen_lines) and seen_lines[i] == line:
                items.append(seen_items[i])
            else:
                items.append(_ITEM.validate_json(line))
        self._remember(self._transcripts, (run_id, key), (lines, items, stamp), limit=64)
        return items

    def _appended_transcript(
        self, run_id: str, key: str, base: int, lines: list[str]
    ) -> list[TranscriptItem] | None:
        """The transcript as the append just made it, when that is known without reading it.

        A store whose appends report the log's generation (PostgreSQL) tells whether anyone
        else wrote since this worker last saw the log; a log has one writer at a time.
        """
        appended = getattr(self.store, "appended_stamp", None)
        after = appended(run_id, key) if appended is not None else None
        if after is None:
            return None
        seen = self._transcripts.get((run_id, key))
        if base == 0:
            kept_lines: list[str] = []
            kept_items: list[TranscriptItem] = []
        elif seen is None or seen[2] is None or len(seen[0]) < base:
            return None
        elif after[1] == seen[2][1] + (1 if lines else 0):
            # Only this append changed the log since (an append of nothing changes nothing).
            kept_lines, kept_items = seen[0][:base], seen[1][:base]
        else:
            return None
        items = [*kept_items, *(_ITEM.validate_json(line) for line in lines)]
        all_lines = [*kept_lines, *lines]
        if len(all_lines) != after[0]:
            return None
        self._remember(self._transcripts, (run_id, key), (all_lines, items, after), limit=64)
        return list(items)

    def _stamp(self, run_id: str, key: str) -> tuple[int, int] | None:
        stamp = getattr(self.store, "stamp", None)
        return stamp(run_id, key) if stamp is not None else None

    @activity.defn(name=c.ACTIVITY_MODEL_TURN)
    async def model_turn(self, inp: c.ModelTurnInput) -> c.ModelTurnResult:
        return await heartbeating(self._model_turn(inp))

    async def _model_turn(self, inp: c.ModelTurnInput) -> c.ModelTurnResult:
        if not inp.run_id or not inp.node_id:
            inp = inp.model_copy(
                update={
                    "run_id": inp.run_id or activity.info().workflow_id,
                    "node_id": inp.node_id or c.call_node(inp.call_id),
                }
            )
        try:
            if inp.delta.items or inp.node_id == REVIEW_NODE or self._remote_store(inp.run_id):
                # Heartbeating: a store riding out a database restart must not look dead.
                prepared = await heartbeating(asyncio.to_thread(self._prepare_turn, inp))
            else:
                # Nothing to write (the last turn left its reply in place) on the local disk:
                # no thread hop for what is a lock, a stat and a cached read.
                prepared = self._prepare_turn(inp)
            request, transcript, tools, persisted = prepared
        except KeyNotFound:
            # A stored header or item this call refers to is gone (an unsynced blob lost in a
            # machine crash): ask for the items themselves instead of calling the model.
            return c.ModelTurnResult(
                failure=ProviderFailure(
                    kind="transient", message="stored conversation items are missing; resending"
                ),
                refs_missing=True,
            )
        live = self.live
        message_id = f"{inp.call_id}"
        streamed: set[str] = set()

        def on_delta(kind: str, text: str) -> None:
            if live is None or not text:
                return
            role = "thinking" if kind == "thinking" else "assistant"
            streamed.add(role)
            live.publish(
                inp.run_id,
                {
                    "type": "ChatMessageDelta",
                    "node_id": inp.node_id,
                    "message_id": message_id,
                    "role": role,
                    "delta": text,
                    "finalize": False,
                },
            )

        started = time.monotonic()
        try:
            provider = None if inp.profile else self._providers.get((inp.run_id, inp.provider_id))
            if provider is None:
                # A real provider reads settings.json and may import its SDK for the first
                # time (seconds on a busy machine): off the event loop, so the heartbeat goes on.
                provider = await asyncio.to_thread(self._run_provider, inp)
            with model_span(inp, request) as span:
                try:
                    reply = await provider.complete(request, transcript, tools, on_delta)
                except ProviderError as exc:
                    span.error(exc.failure.message)
                    span.set({"error.type": exc.failure.kind})
                    raise
                reply = self._priced(reply, request.model)
                record_reply(span, inp, request, reply, transcript)
        except ProviderError as exc:
            record_failure(inp, request, exc.failure.kind)
            return c.ModelTurnResult(
                failure=exc.failure,
                persisted_len=persisted,
                ms=elapsed_ms(started),
            )
        finally:
            for role in sorted(streamed):
                assert live is not None
                live.publish(
                    inp.run_id,
                    {
                        "type": "ChatMessageDelta",
                        "node_id": inp.node_id,
                        "message_id": message_id,
                        "role": role,
                        "delta": "",
                        "finalize": True,
                    },
                )
        latency_ms = elapsed_ms(started)
        reply = compact_reply(reply)
        tools, results = await self._eager_tools(inp, request, reply)
        items: list[TranscriptItem] = [*reply_items(reply), *results]
        if tools is not None:
            # The reply's calls name these results, in order: history need not repeat them.
            anonymous = [
                r.model_copy(update={"tool_call_id": "", "tool_name": ""}) for r in tools.results
            ]
            tools = tools.model_copy(update={"results": anonymous})
        # The reply (and any results) go straight after what this turn sent, synced: the next
        # turn finds them in place, and they are the only full copy of the tools' output.
        await heartbeating(asyncio.to_thread(self._keep_reply, inp, persisted, items))
        return c.ModelTurnResult(reply=reply, persisted_len=persisted, tools=tools, ms=latency_ms)

    def _keep_reply(
        self, inp: c.ModelTurnInput, persisted: int, items: list[TranscriptItem]
    ) -> None:
        key = c.transcript_key(inp.node_id)
        lines = [_line(item.model_dump(mode="json")) for item in items]
        self.store.append_lines(inp.run_id, key, lines, expected_len=persisted)
        seen = self._transcripts.get((inp.run_id, key))
        if seen is not None and len(seen[0]) == persisted:
            appended = getattr(self.store, "appended_stamp", None)
            stamp = appended(inp.run_id, key) if appended is not None else None
            stamp = stamp if stamp is not None else self._stamp(inp.run_id, key)
            both = ([*seen[0], *lines], [*seen[1], *items], stamp)
            self._remember(self._transcripts, (inp.run_id, key), both, 64)

    def _cache_blob(self, run_id: str, key: str, data: bytes) -> None:
        """Store a blob that only caches what history holds, off the turn's critical path.

        Unsynced and written in the background: if it is lost (a crash) or not there yet when a
        later call looks, that call reports its reference missing and the engine sends the items
        themselves.
        """

        def write() -> None:
            try:
                self.store.put_bytes(run_id, key, data, sync=False)
            except Exception as exc:  # a cache write failing only costs a resend
                log.warning("could not store %s for run %s: %s", key, run_id, exc)

        self._writer.submit(write)

    def _profile(self, inp: c.ModelTurnInput) -> dict[str, Any]:
        """The profile the run started with, as prepare_run stored it (keys never included)."""
        if inp.profile:
            return inp.profile
        profiles = self._run_file(inp.run_id, PROFILES_KEY)
        if not isinstance(profiles, dict):
            return {}
        found = profiles.get(inp.provider_id)
        return dict(found) if isinstance(found, dict) else {}

    def _priced(self, reply: ModelReply, model: str) -> ModelReply:
        """The reply with this turn's estimated cost (settings' `prices` override the table)."""
        if reply.usage is None or reply.usage.cost_usd is not None:
            return reply
        from openflow.activities.providers.pricing import estimate_cost

        settings = self._settings()
        prices = dict(getattr(settings, "prices", None) or {})
        cost = estimate_cost(reply.model or model, reply.usage, prices or None)
        usage = reply.usage.model_copy(update={"cost_usd": cost})
        return reply.model_copy(update={"usage": usage})

    def _resolve(
        self, run_id: str, item: Any, blobs: dict[str, list[Any]], transcript_key: str
    ) -> list[str]:
        """The transcript lines of one delta item: itself, or the stored items it refers to
        (an empty key: lines of the transcript itself, read before this turn appends)."""
        if not isinstance(item, StoredItemRef):
            return [_line(item.model_dump(mode="json"))]
        if not item.store_key:
            own = blobs.get("")
            if own is None:
                own = blobs[""] = self.store.read_lines(run_id, transcript_key)
            if item.index < 0 or item.index + item.count > len(own):
                raise KeyNotFound(f"{transcript_key} holds fewer lines than referred to")
            return list(own[item.index : item.index + item.count])
        stored = blobs.get(item.store_key)
        if stored is None:
            try:
                kept = self._batches.get((run_id, item.store_key))
                data = kept if kept is not None else self.store.get_bytes(run_id, item.store_key)
                stored = json.loads(data)
            except ValueError as exc:
                raise KeyNotFound(f"{item.store_key} cannot be read: {exc}") from exc
            if not isinstance(stored, list):
                raise KeyNotFound(f"{item.store_key} is not a stored item list")
            blobs[item.store_key] = stored
        if item.index < 0 or item.index + item.count > len(stored):
            raise KeyNotFound(f"{item.store_key} holds fewer items than referred to")
        return [_line(x) for x in stored[item.index : item.index + item.count]]

    def _offered(self, run_id: str, names: tuple[str, ...]) -> list[ToolSpec]:
        if not names:
            return []
        by_name = self._catalogs.get(run_id)
        if by_name is None:
            catalog = self._run_file(run_id, "catalog.json")
            if not isinstance(catalog, list):
                catalog = [s.model_dump(mode="json") for s in self._tool_specs_by_name().values()]
            by_name = {spec["name"]: ToolSpec.model_validate(spec) for spec in catalog}
            self._remember(self._catalogs, run_id, by_name)
        return [by_name[n] for n in names if n in by_name]

    def _run_file(self, run_id: str, key: str) -> Any:
        """A JSON file a run writes once at its start (profiles, catalog), read once a worker."""
        cached = self._files.get((run_id, key))
        if cached is not None:
            return cached
        try:
            data = json.loads(self.store.get_bytes(run_id, key))
        except FileNotFoundError:
            return None
        self._remember(self._files, (run_id, key), data)
        return data

    @staticmethod
    def _remember(cache: dict[Any, Any], key: Any, value: Any, limit: int = 256) -> None:
        """Keep `value` under `key`, dropping the least recently stored entry beyond `limit`."""
        with _CACHE_LOCK:
            cache.pop(key, None)
            while len(cache) >= limit:
                cache.pop(next(iter(cache)))
            cache[key] = value

    def _settings(self) -> AppSettings:
        """settings.json, parsed again only when the file changes."""
        path = self.home / "settings.json"
        try:
            stat = path.stat()
            stamp: tuple[int, int] = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        if self._settings_cache is None or self._settings_cache[0] != stamp:
            self._settings_cache = (stamp, load_settings(self.home))
        return self._settings_cache[1]

    def _run_provider(self, inp: c.ModelTurnInput) -> Any:
        """The provider for this call. A run's script is fixed when it starts, so its scripted
        provider is kept; real ones are resolved each call (the registry keeps their clients,
        and a key changed in settings.json applies at once)."""
        if inp.profile:
            return self._provider(inp.provider_id, inp.profile)
        key = (inp.run_id, inp.provider_id)
        provider = self._providers.get(key)
        if provider is None:
            provider = self._provider(inp.provider_id, self._profile(inp))
            if isinstance(provider, ScriptedProvider):
                self._remember(self._providers, key, provider, limit=64)
        return provider

    def _provider(self, provider_id: str, profile_data: dict[str, Any]) -> Any:
        if not profile_data:
            raise ProviderError(
                ProviderFailure(
                    kind="permanent",
                    message=f"provider {provider_id!r} is not configured for this workflow run",
                )
            )
        profile = ProviderProfile.model_validate(profile_data)
        if profile.kind == "scripted":
            script = profile.script or {}
            return ScriptedProvider(script, exhausted=profile.exhausted)
        if self.provider_factory is None:
            raise ProviderError(
                ProviderFailure(
                    kind="permanent",
                    message=f"provider {provider_id!r} ({profile.kind}) is not available on this worker",
                )
            )
        return self.provider_factory(provider_id, profile, self._settings())

    # --- tool batches -------------------------------------------------------------------

    @activity.defn(name=c.ACTIVITY_TOOL_BATCH)
    async def tool_batch(self, inp: c.ToolBatchInput) -> c.ToolBatchResult:
        if not inp.run_id:
            inp = inp.model_copy(update={"run_id": activity.info().workflow_id})
        return await heartbeating(self._run_tools(inp))

    async def _run_tools(self, inp: c.ToolBatchInput) -> c.ToolBatchResult:
        """Run one batch, store its full results and return what history keeps.

        A side-effecting batch then stores its receipt, what it is about to report, so a run
        whose completion gets lost (a server restart, a network cut, this worker killed now)
        settles it with these results instead of as outcome unknown (`read_receipt`).
        """
        result, full = await self._execute_tools(inp)
        # Synced: this is the only full copy of the tools' output (history keeps previews).
        data = _ITEMS.dump_json(full)
        await heartbeating(
            asyncio.to_thread(self.store.put_bytes, inp.run_id, c.batch_key(inp.batch_id), data)
        )
        if inp.side_effects:
            await asyncio.to_thread(
                self.store.put_bytes,
                inp.run_id,
                c.receipt_key(inp.batch_id),
                result.model_dump_json().encode(),
            )
        # The next turn of the node usually runs here and refers to these results: keep them.
        self._remember(self._batches, (inp.run_id, c.batch_key(inp.batch_id)), data, limit=64)
        return result

    @activity.defn(name=c.ACTIVITY_RECEIPT)
    async def read_receipt(self, inp: c.ReceiptInput) -> c.ReceiptResult:
        """The receipt a lost batch left, if any; reads only."""
        run_id = inp.run_id or activity.info().workflow_id
        try:
            data = await heartbeating(
                asyncio.to_thread(self.store.get_bytes, run_id, c.receipt_key(inp.batch_id))
            )
        except FileNotFoundError:
            return c.ReceiptResult()
        return c.ReceiptResult(result=c.ToolBatchResult.model_validate_json(data))

    async def _execute_tools(
        self, inp: c.ToolBatchInput
    ) -> tuple[c.ToolBatchResult, list[TranscriptItem]]:
        """Run one batch: its result for history and its full result items."""
        if not inp.execution_dir:
            run = (
                await asyncio.to_thread(self._run_file, inp.run_id, RUN_KEY)
                if self._remote_store(inp.run_id)
                else self._run_file(inp.run_id, RUN_KEY)
            )
            folder = run.get("execution_dir") if isinstance(run, dict) else None
            inp = inp.model_copy(
                update={
                    "execution_dir": str(folder or self.home / "runs" / inp.run_id / "workspace")
                }
            )
        from openflow.activities.tools_runner import run_batch

        outcome = await run_batch(self, inp)
        full: list[TranscriptItem] = [ToolResultItem(result=r) for r in outcome.results]
        result = c.ToolBatchResult(
            results=[
                {
                    "tool_call_id": r.tool_call_id,
                    "tool_name": r.tool_name,
                    "content": preview(r.content),
                    "is_error": r.is_error,
                    "artifact_ids": r.artifact_ids,
                    "output_meta": r.output_meta,
                }
                for r in outcome.results
            ],
            interrupted=outcome.interrupted,
            changed_files=outcome.changed_files,
            reads=outcome.reads,
            events=outcome.events,
            ms=outcome.durations_ms,
        )
        return result, full

    async def _eager_tools(
        self, inp: c.ModelTurnInput, request: AgentRequest, reply: ModelReply
    ) -> tuple[c.ToolBatchResult | None, list[TranscriptItem]]:
        """Run the reply's calls now when every one is a read the node lets through unasked.

        The engine still decides: the workflow feeds these results only for a batch of exactly
        these calls planned from this reply; reads run twice change nothing when it does not.
        """
        calls = reply.tool_calls
        allowed = EAGER_TOOLS.intersection(request.tool_names) if inp.eager else set()
        if not calls or not all(
            call.name in allowed and call.arguments is not None for call in calls
        ):
            return None, []
        batch = c.ToolBatchInput(
            run_id=inp.run_id,
            batch_id=f"{inp.call_id}-tools",
            node_id=inp.node_id,
            calls=[call.as_call() for call in calls],
            side_effects=False,
        )
        try:
            return await self._execute_tools(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the batch then runs as its own activity, with its retries
            log.warning("reads asked for by %s could not run at once: %s", inp.call_id, exc)
            return None, []

    # --- handoffs -----------------------------------------------------------------------

    @activity.defn(name=c.ACTIVITY_HANDOFF)
    async def write_handoff(self, inp: c.HandoffInput) -> c.HandoffResult:
        return await heartbeating(self._write_handoff(inp))

    async def _write_handoff(self, inp: c.HandoffInput) -> c.HandoffResult:
        segment = handoff_segment(inp.node_id)
        if inp.format == "markdown":
            markdown = inp.output.get("markdown") if isinstance(inp.output, dict) else None
            if not isinstance(markdown, str):
                return c.HandoffResult(error="the Markdown handoff has no `markdown` text")
            data = markdown.encode()
            name, media = "HANDOFF.md", "text/markdown"
        else:
            data = (json.dumps(inp.output, indent=2, ensure_ascii=False) + "\n").encode()
            name, media = "HANDOFF.json", "application/json"
        if len(data) > HANDOFF_LIMIT:
            return c.HandoffResult(error=f"the handoff is {len(data)} bytes; the limit is 1 MiB")
        await asyncio.to_thread(
            self.store.put_bytes, inp.run_id, f"handoffs/{segment}/{name}", data
        )
        return c.HandoffResult(
            manifest={
                "format": inp.format,
                "uri": f"run://handoffs/{segment}/{name}",
                "mediaType": media,
                "sha256": hashlib.sha256(data).hexdigest(),
                "sizeBytes": len(data),
            }
        )


def require_folder(folder: Path, what: str = "the run's folder") -> None:
    """Fail the activity retryably when `folder` is not visible here (another worker may see it)."""
    if folder.is_dir():
        return
    from temporalio.exceptions import ApplicationError

    raise ApplicationError(
        f"{what} {str(folder)!r} is not visible on this worker; mount the shared workspace "
        "volume (or the project folder) at the same path on every worker",
        type=c.RUN_FOLDER_MISSING,
    )


def raise_app(message: str) -> None:
    """Fail an activity for good with a message a person can act on."""
    from temporalio.exceptions import ApplicationError

    raise ApplicationError(message, non_retryable=True)


__all__ = [
    "RunActivities",
    "handoff_segment",
    "heartbeating",
    "preview",
    "require_folder",
]
