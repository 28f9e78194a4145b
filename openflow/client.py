"""Runs seen from the outside: start, act, follow, stop, resume and list, over the Temporal client.

The CLI and the HTTP API both speak to runs through this module, so they behave alike.

Errors:
    RunError            base
    ├── InvalidWorkflow the workflow does not validate
    ├── RunNotFound     no run with that id (for this tenant)
    ├── ActionRejected  the run refused an action (the engine's reason)
    └── RunConflict     the run is not in a state that allows the request
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from openflow import contracts as c
from openflow.activities.lru import Lru
from openflow.activities.revert_batch import revert as revert_files
from openflow.activities.store import RunStore, StoreError
from openflow.attachments import Upload, prepare, store_uploads
from openflow.engine import RunEvent, WorkflowRunState
from openflow.engine.advance import continuation_problem
from openflow.engine.facts import batch_node
from openflow.engine.graph import workflow_problems
from openflow.engine.limits import check_entrypoint, check_message
from openflow.engine.spec import Budget, Workflow
from openflow.engine.state import Continuation, RunSnapshot
from openflow.engine.transcript import Attachment

logger = logging.getLogger(__name__)

SA_STATUS = SearchAttributeKey.for_keyword(c.SA_STATUS)
SA_WORKFLOW_ID = SearchAttributeKey.for_keyword(c.SA_WORKFLOW_ID)
SA_WORKFLOW_NAME = SearchAttributeKey.for_text(c.SA_WORKFLOW_NAME)
SA_AWAITING = SearchAttributeKey.for_keyword_list(c.SA_AWAITING)
SA_TENANT = SearchAttributeKey.for_keyword(c.SA_TENANT)
#: The memo key a run's project folder is kept under, for the mutation gate (see `start`).
MEMO_PROJECT = "openflow_project"
CLOSED_STATUS = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "stopped",
    WorkflowExecutionStatus.TERMINATED: "failed",
    WorkflowExecutionStatus.TIMED_OUT: "failed",
}


class RunError(Exception):
    """Something about a run that the caller can act on."""


class RunNotFound(RunError):
    pass


class ActionRejected(RunError):
    pass


class RunConflict(RunError):
    pass


class EditBatchNotFound(RunError):
    """A revert names no edit batch of the run."""


class InvalidWorkflow(RunError):
    """The workflow does not validate; the message names every problem."""


@dataclass
class RunSummary:
    run_id: str
    status: str
    workflow_id: str
    workflow_name: str
    awaiting: list[str]
    tenant: str
    start_time: str | None


@dataclass(frozen=True)
class RunStart:
    """What a run's start sends to Temporal besides its id and task queue."""

    input: c.RunInput
    search_attributes: TypedSearchAttributes
    static_summary: str
    memo: dict[str, Any] | None = None


_EVENT: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)

#: Digests of the workflows this process started runs of lately, found valid: a client that
#: starts many runs of one workflow checks it once (the check depends on its bytes alone).
_VALID: Lru[str, bool] = Lru(256)


def parse_state(data: Mapping[str, Any]) -> WorkflowRunState:
    """The `state` query's JSON as the engine's own projection model."""
    return WorkflowRunState.model_validate(data)


def parse_event(data: Mapping[str, Any]) -> RunEvent | None:
    """One event of the `events` query as its RunEvent variant; None (logged) when it does not
    match a variant this version knows."""
    try:
        return _EVENT.validate_python(data)
    except ValidationError:
        logger.warning("run event of type %r does not match its model", data.get("type"))
        return None


def parse_events(data: Iterable[Mapping[str, Any]]) -> list[RunEvent]:
    """The `events` query's JSON as RunEvent models, in order."""
    return [event for event in map(parse_event, data) if event is not None]


def state_json(state: WorkflowRunState) -> dict[str, Any]:
    """A projection as the `state` query and `GET /runs/{id}` show it (camelCase keys)."""
    return state.as_json()


def event_json(event: RunEvent, *, by_alias: bool = False) -> dict[str, Any]:
    """An event as the `events` query shows it (snake_case); `by_alias` as the API does."""
    data: dict[str, Any] = _EVENT.dump_python(event, mode="json", by_alias=by_alias)
    return data


RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def new_run_id() -> str:
    return f"run-{uuid.uuid4()}"


def check_run_id(run_id: str) -> str:
    """A run id is one safe path component: letters, digits, `_`, `.`, `-` (at most 128)."""
    if not RUN_ID.match(run_id):
        raise RunError(
            f"run id {run_id!r} is not usable: use 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return run_id


def _store_failure(exc: BaseException) -> bool:
    """A run store's own failure: the files' or PostgreSQL's (loaded only when a store uses it)."""
    if isinstance(exc, OSError | StoreError):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.Error)


def start_attributes(workflow: Workflow, tenant: str) -> TypedSearchAttributes:
    """The search attributes a run starts with. A deployment without tenants sets none: a
    run without `OpenFlowTenant` is one of tenant "" (`tenant_clause`)."""
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(SA_STATUS, "running"),
        SearchAttributePair(SA_WORKFLOW_ID, workflow.id),
        SearchAttributePair(SA_WORKFLOW_NAME, workflow.name),
        SearchAttributePair(SA_AWAITING, []),
    ]
    if tenant:
        pairs.append(SearchAttributePair(SA_TENANT, tenant))
    return TypedSearchAttributes(pairs)


def status_clause(status: str) -> str:
    """The visibility query's clause for runs of a status ("running": a run started from a
    Temporal client without search attributes too, which sets none until its first task)."""
    if status == "running":
        return f"({c.SA_STATUS} = 'running' OR {c.SA_STATUS} IS NULL)"
    return f"{c.SA_STATUS} = '{_q(status)}'"


def tenant_clause(tenant: str) -> str:
    """The visibility query's clause for a tenant's runs (tenant "": runs started without the
    attribute, and those started with it empty before)."""
    if tenant:
        return f"{c.SA_TENANT} = '{_q(tenant)}'"
    return f"({c.SA_TENANT} = '' OR {c.SA_TENANT} IS NULL)"


class Runs:
    """The runs of one tenant ("" when the deployment has none)."""

    def __init__(
        self, client: Client, task_queue: str, tenant: str = "", store: RunStore | None = None
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.tenant = tenant
        self._store = store

    @property
    def store(self) -> RunStore:
        """The run store attachments go to (this process's own, unless one was given)."""
        if self._store is None:
            from openflow.backends import open_backends
            from openflow.paths import openflow_home

            self._store = open_backends(openflow_home()).store
        return self._store

    # --- start --------------------------------------------------------------------------

    def start_request(
        self,
        workflow: Workflow,
        entrypoint: str = "",
        run_id: str = "",
        project_dir: str | None = None,
        provider_id: str | None = None,
        attachments: Sequence[Attachment] = (),
        budget: Budget | None = None,
    ) -> RunStart:
        """What starting a run of `workflow` sends, checked; an empty `run_id` means the run
        takes its workflow id (a schedule's runs, whose ids Temporal makes). `budget` is the
        run's own, over the workflow's `settings.budget` field by field."""
        return self._start_request(
            workflow, entrypoint, run_id, project_dir, provider_id, attachments, budget
        )

    def _start_request(
        self,
        workflow: Workflow,
        entrypoint: str,
        run_id: str,
        project_dir: str | None,
        provider_id: str | None,
        attachments: Sequence[Attachment],
        budget: Budget | None,
        digest: str = "",
    ) -> RunStart:
        """`start_request`; a workflow whose `digest` (of its JSON) validated before in this
        process is not checked again."""
        if not digest or _VALID.get(digest) is None:
            problems = workflow_problems(workflow)
            if problems:
                raise InvalidWorkflow("; ".join(str(p) for p in problems))
            if digest:
                _VALID.put(digest, True)
        check_entrypoint(entrypoint)
        project = os.path.realpath(project_dir) if project_dir else None
        attrs = start_attributes(workflow, self.tenant)
        return RunStart(
            input=c.RunInput(
                run_id=run_id,
                workflow=workflow,
                entrypoint=entrypoint,
                project_dir=project_dir,
                provider_id=provider_id,
                tenant=self.tenant,
                attachments=list(attachments),
                budget=budget if budget is not None and not budget.empty else None,
            ),
            search_attributes=attrs,
            static_summary=f"{workflow.name} · {entrypoint[:60]}" if entrypoint else workflow.name,
            memo=_project_memo(project, changes_files(workflow)),
        )

    async def start(
        self,
        workflow: Workflow,
        entrypoint: str = "",
        run_id: str | None = None,
        project_dir: str | None = None,
        provider_id: str | None = None,
        attachments: Sequence[Upload] = (),
        allow_concurrent: bool = False,
        budget: Budget | None = None,
    ) -> str:
        """Start a run of `workflow` as it is now; later edits to the file change nothing.

        `attachments` go to the run store before the run starts; history carries references.
        A run on a `project_dir` another live run may change is refused, naming that run,
        unless `allow_concurrent` (OpenFlow's mutation gate; see `changing_run`).
        """
        run_id = check_run_id(run_id) if run_id else new_run_id()
        # Its JSON once: what the store keeps, and its digest names it and keys the check.
        data = workflow.model_dump_json().encode()
        digest = c.workflow_digest(data)
        request = self._start_request(
            workflow, entrypoint, run_id, project_dir, provider_id, (), budget, digest
        )
        prepared = prepare(attachments) if attachments else []
        project = os.path.realpath(project_dir) if project_dir else None
        if project is not None and changes_files(workflow) and not allow_concurrent:
            other = await self.changing_run(project)
            if other is not None:
                raise RunConflict(
                    f"{other} is changing the project folder {project!r}; wait for it to end or "
                    "stop it, or start this run with --allow-concurrent (API: allowConcurrent)"
                )
        if prepared:
            refs = await asyncio.to_thread(store_uploads, self.store, run_id, prepared)
            run_input = request.input.model_copy(update={"attachments": refs})
        else:
            run_input = request.input
        # The workflow goes to the run store too, so the run's start need not carry it twice.
        stored = await asyncio.to_thread(self._store_workflow, run_id, data, digest)
        # The run takes its workflow id as its run id: the input need not say it again.
        run_input = run_input.model_copy(update={"workflow_stored": stored, "run_id": ""})
        try:
            await self.client.start_workflow(
                c.WORKFLOW_NAME,
                run_input,
                id=run_id,
                task_queue=self.task_queue,
                search_attributes=request.search_attributes,
                memo=request.memo,
                static_summary=request.static_summary,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                task_timeout=c.WORKFLOW_TASK_TIMEOUT,
            )
        except WorkflowAlreadyStartedError as exc:
            raise RunConflict(f"a run with id {run_id!r} already exists") from exc
        except RPCError as exc:
            if exc.status == RPCStatusCode.ALREADY_EXISTS:
                raise RunConflict(f"a run with id {run_id!r} already exists") from exc
            raise
        return run_id

    def _store_workflow(self, run_id: str, data: bytes, digest: str) -> str:
        """Store the run's workflow (`data`, its JSON) under its digest; "" when the store
        refuses it (the run's start then carries it, as a start from Temporal's own client
        does)."""
        try:
            self.store.put_bytes(run_id, c.workflow_key(digest), data)
        except Exception as exc:
            if not _store_failure(exc):
                raise
            logger.warning(
                "run %r: its workflow could not be stored (%s)", run_id, type(exc).__name__
            )
            return ""
        return digest

    async def changing_run(self, project: str) -> str | None:
        """The live run that may be changing the folder `project` (a canonical path), or None.

        A run may change its folder while its execution is open (running or paused) and any of
        its nodes may write (an approval mode other than `read_only`; unset counts as write),
        as OpenFlow's mutation gate counts them. It is found through Temporal's visibility and
        the runs' memo, so every API process and CLI of a cluster sees the same runs.
        """
        query = f"WorkflowType = '{c.WORKFLOW_NAME}' AND ExecutionStatus = 'Running'"
        async for wf in self.client.list_workflows(query):
            raw = wf.raw_info.memo.fields.get(MEMO_PROJECT) if wf.raw_info.memo else None
            if raw is None:
                continue
            memo = await wf.memo()
            held = memo.get(MEMO_PROJECT)
            if not isinstance(held, dict) or held.get("dir") != project or not held.get("mutates"):
                continue
            tenant = wf.typed_search_attributes.get(SA_TENANT) or ""
            return f"run {wf.id!r}" if tenant == self.tenant else "another tenant's run"
        return None

    # --- look ---------------------------------------------------------------------------

    async def handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        """The run's latest execution, checked against the tenant."""
        handle = self.client.get_workflow_handle(run_id)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise RunNotFound(f"no run {run_id!r}") from exc
            raise
        if desc.workflow_type != c.WORKFLOW_NAME:
            raise RunNotFound(f"no run {run_id!r}")
        tenant = desc.typed_search_attributes.get(SA_TENANT) or ""
        if tenant != self.tenant:
            raise RunNotFound(f"no run {run_id!r}")
        return handle

    async def state(self, run_id: str) -> WorkflowRunState:
        """The run's state projection, parsed once here for every reader."""
        return parse_state(await self.raw_state(run_id))

    async def raw_state(self, run_id: str) -> dict[str, Any]:
        """The `state` query's JSON as it is, for a reader of the wire shape itself (most
        readers want `state`)."""
        handle = await self.handle(run_id)
        state: dict[str, Any] = await handle.query(c.QUERY_STATE, result_type=dict)
        return state

    async def events(self, run_id: str, after: int = 0) -> list[RunEvent]:
        """The run's events after `after` as RunEvent models, gap-free across continue-as-new
        and resume."""
        return parse_events(await self.raw_events(run_id, after))

    async def raw_events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """The `events` query's JSON as it is (see `events_after`), for a reader of the wire
        shape itself (most readers want `events`)."""
        handle = await self.handle(run_id)
        return await events_after(self.client, handle, after)

    async def status(self, run_id: str) -> str:
        handle = await self.handle(run_id)
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            return desc.typed_search_attributes.get(SA_STATUS) or "running"
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            return (await self.state(run_id)).status
        return CLOSED_STATUS.get(desc.status, "failed") if desc.status else "failed"

    async def list(
        self, status: str | None = None, workflow_id: str | None = None, limit: int = 200
    ) -> list[RunSummary]:
        """Runs from Temporal's visibility, newest first."""
        clauses = [f"WorkflowType = '{c.WORKFLOW_NAME}'", tenant_clause(self.tenant)]
        if status:
            clauses.append(status_clause(status))
        if workflow_id:
            clauses.append(f"{c.SA_WORKFLOW_ID} = '{_q(workflow_id)}'")
        query = " AND ".join(clauses)
        seen: set[str] = set()
        out: list[RunSummary] = []
        async for wf in self.client.list_workflows(query, limit=limit):
            if wf.id in seen:
                continue
            seen.add(wf.id)
            attrs = wf.typed_search_attributes
            out.append(
                RunSummary(
                    run_id=wf.id,
                    status=attrs.get(SA_STATUS) or "running",
                    workflow_id=attrs.get(SA_WORKFLOW_ID) or "",
                    workflow_name=attrs.get(SA_WORKFLOW_NAME) or "",
                    awaiting=list(attrs.get(SA_AWAITING) or []),
                    tenant=attrs.get(SA_TENANT) or "",
                    start_time=wf.start_time.isoformat() if wf.start_time else None,
                )
            )
        return out

    # --- act ----------------------------------------------------------------------------

    async def act(
        self, run_id: str, action: c.Action, attachments: Sequence[Upload] = ()
    ) -> dict[str, Any]:
        """Apply a human action through the `act` update; a mismatch raises ActionRejected.

        A text over max_message_bytes raises LimitExceeded before anything is sent, and so does
        an attachment that cannot be given (AttachmentError, LimitExceeded). `attachments` go
        with an input answer or a message only; their bytes are stored before the action is sent.
        """
        check_action_texts(action)
        if attachments and action.kind not in ("input", "message"):
            raise ActionRejected("attachments go with an input answer or a message only")
        prepared = prepare(attachments) if attachments else []
        handle = await self.handle(run_id)
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise ActionRejected(f"run {run_id!r} has ended; resume it first")
        if prepared:
            refs = await asyncio.to_thread(store_uploads, self.store, run_id, prepared)
            action = action.model_copy(update={"attachments": [*action.attachments, *refs]})
        try:
            result: dict[str, Any] = await handle.execute_update(
                c.UPDATE_ACT, action, result_type=dict
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            message = getattr(cause, "message", None) or str(cause or exc)
            raise ActionRejected(message) from exc
        return result

    async def stop(self, run_id: str) -> None:
        handle = await self.handle(run_id)
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise RunConflict(f"run {run_id!r} is not running")
        await handle.cancel()

    async def interrupt(self, run_id: str, node_id: str) -> dict[str, Any]:
        """Interrupt one running node; one that is not running raises ActionRejected."""
        return await self.act(run_id, c.Action(kind="interrupt", node_id=node_id))

    async def revert(self, run_id: str, batch_id: str) -> builtins.list[str]:
        """Undo one edit batch of a live run; the files it restored.

        An unknown batch raises EditBatchNotFound; a file changed since, RunConflict naming it.
        A finished run is reverted here, from its checkpoint, in this process's view of the
        run's folder and store; the store keeps `reverts/<batch_id>.json` as its record.
        """
        handle = await self.handle(run_id)
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            return await self._revert_finished(handle, run_id, batch_id)
        try:
            result = await self.act(run_id, c.Action(kind="revert", batch_id=batch_id))
        except ActionRejected as exc:
            if str(exc).startswith("no edit batch"):
                raise EditBatchNotFound(str(exc)) from None
            raise
        if result.get("error"):
            raise RunConflict(f"cannot revert edit batch {batch_id!r}: {result['error']}")
        return [str(p) for p in result.get("paths") or []]

    async def _revert_finished(
        self, handle: WorkflowHandle[Any, Any], run_id: str, batch_id: str
    ) -> builtins.list[str]:
        checkpoint = await handle.query(c.QUERY_CHECKPOINT, result_type=dict)
        if not checkpoint or not checkpoint.get("snapshot"):
            raise RunConflict(f"run {run_id!r} has no checkpoint to revert from")
        snapshot = RunSnapshot.model_validate(checkpoint["snapshot"])
        key = f"reverts/{batch_id}.json"
        node_id = batch_node(snapshot, batch_id)
        if node_id is None or await asyncio.to_thread(_stored, self.store, run_id, key):
            raise EditBatchNotFound(
                f"no edit batch {batch_id!r} to revert (see the run's editBatches)"
            )
        state = WorkflowRunState.model_validate(checkpoint.get("state") or {})
        batch = next((b for b in state.edit_batches if b.batch_id == batch_id), None)
        if batch is None:
            raise RunConflict(f"edit batch {batch_id!r} is too old: its snapshots are gone")
        inp = c.RevertInput(
            run_id=run_id,
            execution_dir=checkpoint["input"].get("execution_dir") or snapshot.execution_dir,
            batch=batch,
        )
        result = await asyncio.to_thread(revert_files, self.store, inp)
        if result.error:
            raise RunConflict(f"cannot revert edit batch {batch_id!r}: {result.error}")
        record = {"batch_id": batch_id, "node_id": node_id, "paths": result.paths}
        await asyncio.to_thread(
            self.store.put_bytes, run_id, key, json.dumps(record).encode("utf-8")
        )
        return result.paths

    async def resume(
        self, run_id: str, node_id: str | None = None, message: str | None = None
    ) -> str:
        """Start a new execution of a stopped or failed run from its checkpoint.

        With `node_id` and `message`, that node gets the message as its next user turn (its
        answer when it waits for input, else its retry's message).
        """
        handle = await self.handle(run_id)
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            raise RunConflict(
                f"run {run_id!r} is still live; answer its pauses instead of resuming it"
            )
        checkpoint = await handle.query(c.QUERY_CHECKPOINT, result_type=dict)
        if not checkpoint or not checkpoint.get("snapshot"):
            raise RunConflict(f"run {run_id!r} has no checkpoint to resume from")
        status = checkpoint["snapshot"].get("status")
        if status == "completed":
            raise RunConflict(f"run {run_id!r} completed; completed runs can only be replayed")
        continuation = None
        if node_id is not None or message is not None:
            if not node_id or message is None:
                raise ActionRejected("a resume message needs both a node id and a text")
            snapshot = RunSnapshot.model_validate(checkpoint["snapshot"])
            problem = continuation_problem(snapshot, node_id, message)
            if problem is not None:
                raise ActionRejected(problem)
            continuation = Continuation(node_id=node_id, text=message)
        data = dict(checkpoint["input"])
        data.update(
            continuation=continuation.model_dump() if continuation is not None else None,
            snapshot=checkpoint["snapshot"],
            resume=True,
            events=checkpoint.get("events", []),
            state=checkpoint.get("state"),
            first_seq=checkpoint.get("first_seq", 1),
            previous_run_id=checkpoint.get("previous_run_id"),
            pending_intents=[],
        )
        inp = c.RunInput.model_validate(data)
        attrs = start_attributes(inp.workflow, self.tenant)
        project = os.path.realpath(inp.project_dir) if inp.project_dir else None
        await self.client.start_workflow(
            c.WORKFLOW_NAME,
            inp,
            id=run_id,
            task_queue=self.task_queue,
            search_attributes=attrs,
            memo=_project_memo(project, changes_files(inp.workflow)),
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            task_timeout=c.WORKFLOW_TASK_TIMEOUT,
        )
        return run_id


def _stored(store: RunStore, run_id: str, key: str) -> bool:
    try:
        store.get_bytes(run_id, key)
    except FileNotFoundError:
        return False
    return True


async def events_after(
    client: Client, handle: WorkflowHandle[Any, Any], after: int, **query: Any
) -> list[dict[str, Any]]:
    """Events after `after` from an execution and, when they started later, the ones before it.

    Each execution holds the events it recorded; a continued or resumed execution names the
    one before it (`events_origin`), so the whole sequence is read back without gaps.
    """
    events: list[dict[str, Any]] = await handle.query(
        c.QUERY_EVENTS, {"after": after}, result_type=list, **query
    )
    origin: dict[str, Any] = await handle.query(c.QUERY_EVENTS_ORIGIN, result_type=dict, **query)
    first = int(origin.get("first_seq") or 1)
    previous = origin.get("previous_run_id")
    earlier: list[dict[str, Any]] = []
    while after + 1 < first and previous:
        older = client.get_workflow_handle(handle.id, run_id=previous)
        chunk: list[dict[str, Any]] = await older.query(
            c.QUERY_EVENTS, {"after": after}, result_type=list, **query
        )
        earlier = [e for e in chunk if int(e.get("seq", 0)) < first] + earlier
        origin = await older.query(c.QUERY_EVENTS_ORIGIN, result_type=dict, **query)
        first = int(origin.get("first_seq") or 1)
        previous = origin.get("previous_run_id")
    return earlier + events


def check_action_texts(action: c.Action) -> None:
    """Raise LimitExceeded when a text of the action is over max_message_bytes."""
    check_message(action.text, "the answer" if action.kind == "input" else "the message")
    check_message(action.message, "the retry message")
    check_message(action.reason, "the reason")
    for decision in action.decisions:
        check_message(decision.reason, f"the reason for call {decision.call_id!r}")


def action_from(kind: str, payload: Mapping[str, Any]) -> c.Action:
    return c.Action.model_validate({"kind": kind, **payload})


def changes_files(workflow: Workflow) -> bool:
    """Whether a run of `workflow` may change its folder: a node not explicitly `read_only`."""
    return any(node.agent.tools.approval_mode != "read_only" for node in workflow.nodes)


def _project_memo(project: str | None, mutates: bool) -> dict[str, Any] | None:
    if project is None:
        return None
    return {MEMO_PROJECT: {"dir": project, "mutates": mutates}}


def _q(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


__all__ = [
    "ActionRejected",
    "EditBatchNotFound",
    "InvalidWorkflow",
    "RunConflict",
    "RunError",
    "RunNotFound",
    "RunStart",
    "RunSummary",
    "Runs",
    "action_from",
    "changes_files",
    "check_action_texts",
    "event_json",
    "events_after",
    "new_run_id",
    "parse_event",
    "parse_events",
    "parse_state",
    "start_attributes",
    "status_clause",
    "state_json",
    "tenant_clause",
]
