"""The worker: hosts OpenFlowRun and its activities on a task queue."""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.metadata
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
from temporalio.client import Client
from temporalio.worker import (
    PollerBehaviorSimpleMaximum,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from openflow import contracts as c
from openflow.activities.model_providers import ModelProviders, ProviderFactory
from openflow.activities.model_turn import ModelTurnActivity
from openflow.activities.prepare_run import PrepareRunActivity
from openflow.activities.read_receipt import ReadReceiptActivity
from openflow.activities.revert_batch import RevertBatchActivity
from openflow.activities.run_files import RunFiles
from openflow.activities.store import RunStore
from openflow.activities.tool_batch import ToolBatchActivity
from openflow.activities.tools.confine import announce as announce_confinement
from openflow.activities.tools_runner import BatchDeps, default_tools, tool_budget
from openflow.activities.webhooks import WebhookActivities
from openflow.activities.write_handoff import WriteHandoffActivity
from openflow.backends import open_backends
from openflow.engine.errors import EngineError
from openflow.live import FileLiveChannel, LiveChannel
from openflow.pools import PooledWorker, WorkerPools
from openflow.settings import check_webhooks, load_settings, runtime_settings
from openflow.workflows.inline import InlineExecutor
from openflow.workflows.notices import OpenFlowNotice
from openflow.workflows.run import EngineFault, OpenFlowRun

if TYPE_CHECKING:
    from openflow.activities.tools.registry import ToolRegistry

#: Bugs in engine or workflow code fail the run visibly instead of retrying its task forever.
FAILURE_TYPES: list[type[BaseException]] = [
    EngineFault,
    EngineError,
    pydantic.ValidationError,
    AssertionError,
    AttributeError,
    KeyError,
    IndexError,
    TypeError,
    ValueError,
]


def build_id() -> str:
    """The worker's build id as history records it: the package version, short and readable."""
    try:
        return "openflow-" + importlib.metadata.version("openflow-temporal")
    except importlib.metadata.PackageNotFoundError:
        return "openflow"


def workflow_runner(sandboxed: bool | None = None) -> WorkflowRunner:
    """How the worker runs OpenFlowRun.

    Users never write workflow code here: their workflows are data, and OpenFlowRun is ours,
    deterministic by construction (the engine is pure and every workflow test replays its
    history under the sandbox). So by default it runs without the sandbox, whose cost per
    activation is about a third of a model turn's orchestration; `sandboxed=True` or
    OPENFLOW_WORKFLOW_SANDBOX=1 turns it on.
    """
    if sandboxed is None:
        sandboxed = runtime_settings(only=("workflow_sandbox",)).workflow_sandbox
    return sandbox_runner() if sandboxed else UnsandboxedWorkflowRunner()


def sandbox_runner() -> SandboxedWorkflowRunner:
    """The workflow sandbox, with the deterministic engine passed through once."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "openflow",
            "pydantic",
            "pydantic_core",
            "jsonschema",
            "networkx",
            "referencing",
            "opentelemetry",
        )
    )


@dataclass(frozen=True)
class Activities:
    """The activities a worker registers, built once over the dependencies they share."""

    files: RunFiles
    batches: BatchDeps
    prepare_run: PrepareRunActivity
    model_turn: ModelTurnActivity
    tool_batch: ToolBatchActivity
    write_handoff: WriteHandoffActivity
    read_receipt: ReadReceiptActivity
    revert_batch: RevertBatchActivity

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.prepare_run.prepare_run,
            self.model_turn.model_turn,
            self.tool_batch.tool_batch,
            self.write_handoff.write_handoff,
            self.read_receipt.read_receipt,
            self.revert_batch.revert_batch,
        ]


def make_activities(
    home: Path,
    store: RunStore | None = None,
    live: LiveChannel | None = None,
    env: Mapping[str, str] | None = None,
    provider_factory: ProviderFactory | None = None,
    tools: ToolRegistry | None = None,
) -> Activities:
    """The run activities with the default store, live channel, tools and providers, and
    the run files and batch dependencies they share.

    Without a `store`, OPENFLOW_DATABASE_URL chooses it (`openflow.backends`): files under
    `home`, or the cluster database (which then also holds the live channel and tool locks).
    """
    if provider_factory is None:
        provider_factory = _default_provider_factory()
    db = None
    if store is None:
        backends = open_backends(home)
        store, db = backends.store, backends.db
        live = live if live is not None else backends.live
    if live is None:
        live = FileLiveChannel(home / "runs")
    files = RunFiles(home, store, env)
    cluster_locks = None
    if db is not None:
        from openflow.activities.tools.cluster_locks import ClusterLocks

        cluster_locks = ClusterLocks(db)
    batches = BatchDeps(
        files=files,
        tools=tools if tools is not None else default_tools(),
        live=live,
        budget=asyncio.Semaphore(tool_budget(files.env)),
        cluster_locks=cluster_locks,
    )
    return Activities(
        files=files,
        batches=batches,
        prepare_run=PrepareRunActivity(files, batches.tools),
        model_turn=ModelTurnActivity(files, ModelProviders(files, provider_factory), batches, live),
        tool_batch=ToolBatchActivity(batches),
        write_handoff=WriteHandoffActivity(files),
        read_receipt=ReadReceiptActivity(files),
        revert_batch=RevertBatchActivity(files),
    )


def _default_provider_factory() -> ProviderFactory | None:
    try:
        from openflow.activities.providers.registry import provider_for
    except ImportError:
        return None
    return provider_for


_FROZEN = False


def _freeze_loaded() -> None:
    """Keep what the process has loaded (SDKs, schemas, the engine), which lives as long as it,
    out of the cyclic collector: its full passes over all of it otherwise stall turns for up to
    ~100 ms. Done once, after a collection, so no garbage is frozen with it."""
    global _FROZEN
    if not _FROZEN:
        _FROZEN = True
        gc.collect()
        gc.freeze()


def _warm_up_mcp(home: Path) -> None:
    """Import the MCP SDK in the background when settings.json configures servers: it takes
    seconds on a busy machine, which a run taken over from a killed worker should not wait."""
    try:
        configured = bool(load_settings(home).mcp)
    except Exception:  # a broken settings.json is reported when a run starts
        return
    if configured and "openflow.activities.mcp" not in sys.modules:
        threading.Thread(
            target=importlib.import_module,
            args=("openflow.activities.mcp",),
            name="openflow-mcp-import",
            daemon=True,
        ).start()


def build_worker(
    client: Client,
    task_queue: str,
    home: Path,
    activities: Activities | None = None,
    sandboxed: bool | None = None,
    api_url: str | None = None,
    pools: WorkerPools | None = None,
) -> PooledWorker:
    """A worker for OpenFlowRun; tuned so a dead worker's runs move on within seconds.

    It polls `task_queue` (runs, model turns: the model pool) and its tool queue (tool
    batches: the tool pool), sized by `pools`, else by the OPENFLOW_* variables. `api_url` is
    where webhook notices link run pages (default: OPENFLOW_API_URL).
    """
    check_webhooks(home)  # a bad webhooks entry stops the worker here, in one line
    pools = pools or WorkerPools.from_environment()
    acts = activities or make_activities(home)
    announce_confinement()
    _freeze_loaded()
    _warm_up_mcp(home)
    registered = acts.all()
    runner = workflow_runner(sandboxed)
    inline = isinstance(runner, UnsandboxedWorkflowRunner) and _workflow_inline()
    main = Worker(
        client,
        task_queue=task_queue,
        workflows=[OpenFlowRun, OpenFlowNotice],
        # Tool batches of runs recorded before the tool pool still come here.
        activities=[*registered, *WebhookActivities(home, api_url).all()],
        workflow_runner=runner,
        # OPENFLOW_WORKFLOW_INLINE=1: activations on the loop's own thread, one a turn
        # (`openflow.workflows.inline`), instead of the SDK's threads.
        workflow_task_executor=InlineExecutor() if inline else None,
        workflow_failure_exception_types=FAILURE_TYPES,
        max_concurrent_activities=pools.model,
        max_cached_workflows=pools.workflow_cache,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=pools.sticky_timeout_s),
        workflow_task_poller_behavior=PollerBehaviorSimpleMaximum(pools.workflow_pollers),
        build_id=build_id(),
        graceful_shutdown_timeout=timedelta(seconds=2),
    )
    tools = Worker(
        client,
        task_queue=c.tool_task_queue(task_queue),
        activities=[
            fn
            for fn in registered
            if _activity_name(fn) in (c.ACTIVITY_TOOL_BATCH, c.ACTIVITY_REVERT)
        ],
        max_concurrent_activities=pools.tool,
        build_id=build_id(),
        graceful_shutdown_timeout=timedelta(seconds=2),
    )
    return PooledWorker(main, tools, on_last_stop=_close_providers)


def _workflow_inline() -> bool:
    """Whether OPENFLOW_WORKFLOW_INLINE asks for activations on the worker's event loop."""
    return runtime_settings(only=("workflow_inline",)).workflow_inline


def _activity_name(fn: Any) -> str | None:
    definition = getattr(fn, "__temporal_activity_definition", None)
    return getattr(definition, "name", None)


async def _close_providers() -> None:
    """Close the shared provider clients (and their pooled connections), if any were built."""
    registry = sys.modules.get("openflow.activities.providers.registry")
    default = getattr(registry, "_default", None)
    if default is not None:
        await default.aclose()


async def connect(address: str | None = None, namespace: str | None = None) -> Client:
    """A client of the configured Temporal (`openflow.connect`), speaking pydantic payloads."""
    from openflow.connect import connect as connect_target
    from openflow.connect import load_target

    return await connect_target(load_target(address=address, namespace=namespace))


__all__ = [
    "FAILURE_TYPES",
    "Activities",
    "build_id",
    "build_worker",
    "connect",
    "make_activities",
    "sandbox_runner",
    "workflow_runner",
]
