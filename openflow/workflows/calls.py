"""One stub per activity of `OpenFlowRun`: each builds its one input, calls its activity typed
(`workflow.execute_activity_method`) with its timeouts and retry policy, and answers the fact
the engine folds, a failure included. Cancellation propagates to the caller.

Activity names, inputs and the order of the commands are a durable contract: a recorded history
replays only if these calls stay as they were (`patches.on` guards each change).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, RetryState

with workflow.unsafe.imports_passed_through():
    from openflow import contracts as c
    from openflow.activities.model_turn import ModelTurnActivity
    from openflow.activities.prepare_run import PrepareRunActivity, stored_parts
    from openflow.activities.read_receipt import ReadReceiptActivity
    from openflow.activities.revert_batch import RevertBatchActivity
    from openflow.activities.tool_batch import ToolBatchActivity
    from openflow.activities.write_handoff import WriteHandoffActivity
    from openflow.engine.advance import eager_tools
    from openflow.engine.display import model_summary, tools_summary
    from openflow.engine.headers import by_reference, header_set, part_digest
    from openflow.engine.recipes import RECIPE_MARK, InputRecipe, input_recipe
    from openflow.engine.request import AgentRequest, ProviderFailure
    from openflow.engine.spec import template_headings
    from openflow.engine.state import (
        CallModel,
        HandoffStored,
        ModelFailed,
        ModelReplied,
        ReadReceipt,
        ReceiptRead,
        RunSnapshot,
        RunTools,
        ToolResultSummary,
        ToolsFailed,
        ToolsFinished,
        WriteHandoff,
    )
    from openflow.workflows import patches

MODEL_TIMEOUT = timedelta(minutes=30)
TOOL_TIMEOUT = timedelta(hours=2)
HEARTBEAT_TIMEOUT = timedelta(seconds=4)
RECEIPT_TIMEOUT = timedelta(seconds=30)
NO_RETRY = RetryPolicy(maximum_attempts=1)
#: How often a batch is tried when its worker cannot see the run's folder (RunFolderMissing).
FOLDER_MISSING_TRIES = 8

TOOL_RECEIPTS = "tool-receipts"
#: Tool batches go to the worker's tool pool (`contracts.tool_task_queue`); runs recorded
#: before scheduled them on the run's own task queue.
TOOL_POOL = "tool-pool"
#: A node's turn that submits stores its handoff (`TurnHandoff`); runs recorded before wrote
#: it with a `write_handoff` activity of its own.
HANDOFF_IN_TURN = "handoff-in-turn"
#: A run's start prepares in a local activity (`prepare_run`); runs recorded before ran it as
#: an activity of its own, one workflow task before the first model call.
PREPARE_LOCAL = "prepare-local"
#: A model turn's result leaves out `handoff_stored`: the workflow works it out from the reply
#: (the engine makes the manifest from the submission); runs recorded before read it.
LEAN_TURN_RESULTS = "lean-turn-results"
#: A model turn's activity id names its call (`contracts.turn_activity_id`), which its input
#: leaves out (the activity reads it from `activity.info()`); runs recorded before let
#: Temporal number the activity.
TURN_ACTIVITY_IDS = "turn-activity-ids"


def finished(
    batch_id: str, result: c.ToolBatchResult, in_transcript: bool = False
) -> ToolsFinished:
    """The engine's fact for a batch's result (`in_transcript`: a model turn ran it and wrote
    the results to the transcript after its reply)."""
    return ToolsFinished(
        batch_id=batch_id,
        # A model turn's results leave out their calls: the engine names them.
        results=tuple(
            ToolResultSummary.model_validate(
                {"tool_call_id": "", "tool_name": "", **r.model_dump()}
            )
            for r in result.results
        ),
        store_key="" if in_transcript else result.store_key or c.batch_key(batch_id),
        store_index=result.store_index,
        in_transcript=in_transcript,
        interrupted=result.interrupted,
        changed_files=tuple(result.changed_files),
        reads=tuple(result.reads),
        events=tuple(result.events),
        ms=tuple(result.ms),
    )


async def prepare_run(inp: c.RunInput) -> c.PrepareResult:
    """The run's start, its workflow, provider and folder always filled in (a result leaves
    out the workflow when it is the run's own with its provider settled, the provider when it
    is the one profile, and the folder when it is the run's project). A start that cannot be made raises an `ActivityError`, or from a local
    activity the `ApplicationError` itself.

    New runs prepare in a local activity: the first workflow task runs it on its own worker
    and, in the same completion, schedules the first model calls. Runs recorded before ran a
    regular activity (and replay as they ran).
    """
    local = patches.on(PREPARE_LOCAL)
    result = await _prepare_run(inp, local)
    update: dict[str, Any] = {}
    if result.active_provider is None:
        # Left out when it is the one profile (results before always named it).
        update["active_provider"] = result.provider
    if result.workflow is None:
        update["workflow"] = c.settled_workflow(inp.workflow, result.provider)
    if result.run_folder or result.run_home:
        # The store's own folder for the run, named without the run's id.
        update["execution_dir"] = result.folder(inp.run_id)
        update["run_folder"] = update["run_home"] = ""
    elif not result.execution_dir:
        # Left out when the run works in its project (results before always named it).
        update["execution_dir"] = inp.project_dir or ""
    return result.model_copy(update=update) if update else result


async def _prepare_run(inp: c.RunInput, local: bool) -> c.PrepareResult:
    """The run's start, with the workflow its client stored named instead of carried; asked
    again with the workflow itself when the store does not have it."""
    if inp.workflow_stored:
        result = await _prepare_activity(inp, by_reference=True, local=local)
        if not result.workflow_missing:
            return result
    return await _prepare_activity(inp, by_reference=False, local=local)


#: A start tried again after a transient failure: after 0.5, 1, 2 and 4 s.
PREPARE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=500), maximum_attempts=5)
#: A start in the workflow's task tried again here, after 0.1 and 0.2 s, before it moves
#: to `PREPARE_RETRY`'s activity, which any worker may take.
PREPARE_LOCAL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3)
#: How long one try of a start may take (MCP servers that start slowly included).
PREPARE_TIMEOUT = timedelta(minutes=2)


async def _prepare_activity(inp: c.RunInput, *, by_reference: bool, local: bool) -> c.PrepareResult:
    prepare_input = c.PrepareInput(
        run_id=inp.run_id,
        workflow=None if by_reference else inp.workflow,
        project_dir=inp.project_dir,
        provider_id=inp.provider_id,
        workflow_stored=inp.workflow_stored if by_reference else "",
    )
    if local:
        try:
            # On the workflow's own worker, inside its task: history records only the
            # outcome, and the first model calls go out in the same task's completion. A
            # worker lost here loses the task, which another worker takes over once it times
            # out (`WORKFLOW_TASK_TIMEOUT`) and prepares again. The retries' backoffs are far
            # below the threshold: they run inside the task too.
            return await workflow.execute_local_activity_method(
                PrepareRunActivity.prepare_run,
                prepare_input,
                start_to_close_timeout=PREPARE_TIMEOUT,
                retry_policy=PREPARE_LOCAL_RETRY,
                local_retry_threshold=timedelta(seconds=5),
                # No summary: the marker names its activity, and history keeps every byte.
            )
        except FailureError as exc:
            # A local activity's failure arrives as itself (an ApplicationError, a
            # TimeoutError), not wrapped in an ActivityError.
            if _permanent(exc):
                raise
            # What may pass elsewhere (a folder this worker cannot see, a store that did not
            # answer): the start goes on as an activity of its own, which any worker takes.
    return await workflow.execute_activity_method(
        PrepareRunActivity.prepare_run,
        prepare_input,
        start_to_close_timeout=PREPARE_TIMEOUT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        # Safe to run again: a worker lost here is replaced after half a second.
        retry_policy=PREPARE_RETRY,
        summary="prepare run",
    )


def _permanent(exc: FailureError) -> bool:
    """Whether an activity failed for good: trying it again elsewhere would not help."""
    if isinstance(exc, ActivityError):
        if exc.retry_state == RetryState.NON_RETRYABLE_FAILURE:
            return True
        exc = exc.cause if isinstance(exc.cause, FailureError) else exc
    return isinstance(exc, ApplicationError) and exc.non_retryable


async def listed_webhooks() -> list[c.WebhookRef]:
    """The webhooks of a run whose preparation failed (and so did not list them)."""
    try:
        listed: c.ListWebhooksResult = await workflow.execute_activity(
            c.ACTIVITY_LIST_WEBHOOKS,
            c.ListWebhooksInput(),
            result_type=c.ListWebhooksResult,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=3),
            summary="webhooks",
        )
    except ActivityError:
        return []
    return listed.webhooks


async def model_turn(
    intent: CallModel,
    snapshot: RunSnapshot,
    provider_id: str,
    headers_sent: set[str],
    parts: AbstractSet[str] | None = None,
    profiles: Mapping[str, Mapping[str, Any]] | None = None,
) -> ModelReplied | ModelFailed:
    """One model call. The request's header travels until a worker has stored it
    (`headers_sent`, kept current here); then only its digest does. The header's parts the
    run's start stored (`parts`) travel by reference even then; when the store has lost
    what a call refers to (a `ModelFailed` with `refs_missing`), the caller empties its
    parts and headers travel whole again. `profiles`
    (the run's, by id: their kinds) say what wire the call asks for (`contracts.TurnAsked`)."""
    request = intent.request
    header = request.model_copy(update={"turn_index": 0})
    digest = hashlib.sha256(header.model_dump_json().encode()).hexdigest()[:16]
    sent: AgentRequest | None = None
    rest: AgentRequest | None = None
    refs = None
    stored_set = ""
    if digest not in headers_sent:
        slim, refs = by_reference(header, parts or ())
        if refs is None:
            sent = slim
        else:
            rest = slim
            # The node's whole header set stored: one reference and the input travel.
            found = part_digest(header_set(slim, refs))
            if parts and found in parts:
                stored_set = found
    set_input = rest.input if stored_set and rest is not None else None
    if stored_set:
        rest, refs = None, None
    stored_set, set_input, recipe = _input_by_reference(snapshot, stored_set, set_input, parts)
    eager = (
        eager_tools(snapshot, intent.node_id, request.tool_names)
        if intent.purpose == "node"
        else ()
    )
    handoff = turn_handoff(snapshot, intent) if intent.purpose == "node" else None
    # A call id is the engine's, new for every call of the run: no other activity of the run
    # has it, pending or not. (Asked after the handoff's patch, as runs recorded before did.)
    activity_id = c.turn_activity_id(intent.call_id) if patches.on(TURN_ACTIVITY_IDS) else None
    arg = c.ModelTurnInput(
        # The activity id names the call, and the input leaves it out.
        call_id="" if activity_id else intent.call_id,
        node_id="" if c.call_node(intent.call_id) == request.node_id else request.node_id,
        model_attempt=intent.model_attempt,
        turn_index=request.turn_index,
        header_digest=digest,
        header=sent,
        header_rest=rest,
        header_refs=refs,
        header_set=stored_set,
        header_input=set_input,
        header_recipe=recipe,
        delta=intent.delta,
        # The header names its provider, unless it is the run's.
        provider_id="" if request.provider_id else provider_id,
        eager=bool(eager),
        purpose="review" if intent.purpose == "review" else "node",
        handoff=handoff,
    )
    try:
        result = await workflow.execute_activity_method(
            ModelTurnActivity.model_turn,
            arg,
            activity_id=activity_id,
            start_to_close_timeout=MODEL_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=NO_RETRY,
            cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
            summary=model_summary(intent),
        )
    except ActivityError as exc:
        headers_sent.discard(digest)
        failure = ProviderFailure(
            kind="transient", message=f"model turn did not finish: {exc.cause or exc}"
        )
        return ModelFailed(
            call_id=intent.call_id, node_id=intent.node_id, failure=failure, lost=True
        )
    headers_sent.add(digest)
    provider = (profiles or {}).get(request.provider_id or provider_id) or {}
    result = result.restored(c.turn_asked(arg, provider.get("kind"), request.model))
    if result.reply is None:
        if result.refs_missing:
            headers_sent.discard(digest)
        return ModelFailed(
            call_id=intent.call_id,
            node_id=intent.node_id,
            failure=result.failure or ProviderFailure(kind="failed", message="no reply"),
            persisted_len=result.persisted_len,
            refs_missing=result.refs_missing,
            ms=result.ms,
        )
    # A reply stored under its own key comes from an older worker; a model turn now writes its
    # reply (then the results of the reads it ran) into the transcript.
    return ModelReplied(
        call_id=intent.call_id,
        node_id=intent.node_id,
        reply=result.reply,
        reply_key=result.reply_key,
        persisted_len=result.persisted_len,
        in_transcript=not result.reply_key,
        ms=result.ms,
        eager=None if result.tools is None else finished("", result.tools, True),
        handoff=result.handoff if arg.handoff is not None else None,
        # A turn that stored its submission's handoff leaves the manifest out: the engine,
        # which classifies the reply anyway, makes it again.
        handoff_stored=_handoff_stored(arg, result),
    )


def _input_by_reference(
    snapshot: RunSnapshot,
    stored_set: str,
    set_input: dict[str, Any] | None,
    parts: AbstractSet[str] | None,
) -> tuple[str, dict[str, Any] | None, InputRecipe | None]:
    """The header set, input and recipe a call that names its header set carries: what of
    its input the run store holds travels as references (`engine.recipes`), while the store
    keeps the parts (a call the store failed empties them)."""
    if not stored_set or not parts:
        return stored_set, set_input, None
    sent, recipe = input_recipe(snapshot, set_input, parts)
    if recipe is None:
        return stored_set, set_input, None
    return stored_set + RECIPE_MARK, sent, recipe


def _handoff_stored(arg: c.ModelTurnInput, result: c.ModelTurnResult) -> bool:
    """Whether the turn stored the handoff of what its reply submits, leaving the manifest
    out. A turn of this worker leaves `handoff_stored` out too: it stored one when its reply
    submits (the engine makes the manifest from the submission, as the turn did). Runs
    recorded before read it from the result, as they did."""
    if arg.handoff is None or result.handoff is not None:
        return False
    return result.handoff_stored or patches.on(LEAN_TURN_RESULTS)


def turn_handoff(snapshot: RunSnapshot, intent: CallModel) -> c.TurnHandoff | None:
    """What a node's turn needs to store the handoff of its submission, if the node has a
    handoff file; runs recorded before turns stored handoffs leave it to `write_handoff`."""
    node = next((n for n in snapshot.workflow.nodes if n.id == intent.node_id), None)
    if node is None:
        return None
    spec = node.agent.handoff
    if spec.format not in ("json", "markdown") or not patches.on(HANDOFF_IN_TURN):
        return None
    if spec.format == "markdown":
        headings = template_headings(getattr(spec, "template", "") or "")
        return c.TurnHandoff(format="markdown", headings=headings)
    return c.TurnHandoff(format="json")


async def tool_batch(intent: RunTools, snapshot: RunSnapshot) -> ToolsFinished | ToolsFailed:
    """One tool batch, tried as often as its intent says."""
    policy = snapshot.workflow.settings.retry_policy
    arg = c.ToolBatchInput(
        batch_id=intent.batch_id,
        node_id=intent.node_id,
        calls=list(intent.calls),
        side_effects=intent.side_effects,
        max_attempts=policy.max_attempts,
        backoff_ms=policy.backoff_ms,
    )
    try:
        result = await _batch_activity(arg, RetryPolicy(maximum_attempts=intent.attempts), intent)
    except ActivityError as exc:
        # Runs recorded before receipts settled a lost batch as unknown at once (the marker is
        # asked only where they asked it).
        receipts = intent.side_effects and patches.on(TOOL_RECEIPTS)
        return ToolsFailed(
            batch_id=intent.batch_id, reason=str(exc.cause or exc), receipts=receipts
        )
    return finished(intent.batch_id, result)


def _folder_missing(exc: ActivityError) -> bool:
    """Whether the activity failed because its worker could not see the run's folder."""
    cause = exc.cause
    return isinstance(cause, ApplicationError) and cause.type == c.RUN_FOLDER_MISSING


async def _batch_activity(
    arg: c.ToolBatchInput, retry: RetryPolicy, intent: RunTools
) -> c.ToolBatchResult:
    """Run the batch activity; again, after a pause, when its worker could not see the run's
    folder (it ran nothing, so even a batch with side effects is safe to repeat on whichever
    worker takes it)."""
    tries = 0
    while True:
        try:
            return await workflow.execute_activity_method(
                ToolBatchActivity.tool_batch,
                arg,
                task_queue=c.tool_task_queue(workflow.info().task_queue)
                if patches.on(TOOL_POOL)
                else None,
                start_to_close_timeout=TOOL_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=retry,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=tools_summary(intent),
            )
        except ActivityError as exc:
            tries += 1
            if not _folder_missing(exc) or tries >= FOLDER_MISSING_TRIES:
                raise
            await workflow.sleep(timedelta(seconds=min(2**tries, 30)))


async def read_receipt(intent: ReadReceipt) -> ReceiptRead:
    """A lost batch's receipt: its recorded results, or why there are none."""
    try:
        found = await workflow.execute_activity_method(
            ReadReceiptActivity.read_receipt,
            c.ReceiptInput(batch_id=intent.batch_id),
            start_to_close_timeout=RECEIPT_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=5),
            summary=f"receipt · {intent.node_id}",
        )
    except ActivityError as exc:
        reason = f"its receipt could not be read: {exc.cause or exc}"
        return ReceiptRead(batch_id=intent.batch_id, reason=reason)
    if found.result is None:
        return ReceiptRead(batch_id=intent.batch_id, reason="it left no receipt")
    return ReceiptRead(batch_id=intent.batch_id, finished=finished(intent.batch_id, found.result))


async def write_handoff(intent: WriteHandoff, run_id: str) -> HandoffStored:
    try:
        result = await workflow.execute_activity_method(
            WriteHandoffActivity.write_handoff,
            c.HandoffInput(
                run_id=run_id, node_id=intent.node_id, format=intent.format, output=intent.output
            ),
            start_to_close_timeout=timedelta(minutes=1),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=5),
            summary=f"handoff · {intent.node_id}",
        )
    except ActivityError as exc:
        return HandoffStored(node_id=intent.node_id, error=str(exc.cause or exc))
    return HandoffStored(node_id=intent.node_id, manifest=result.manifest, error=result.error)


__all__ = [
    "finished",
    "listed_webhooks",
    "model_turn",
    "prepare_run",
    "read_receipt",
    "stored_parts",
    "tool_batch",
    "write_handoff",
]


async def revert_batch(inp: c.RevertInput) -> c.RevertResult:
    """Undo an edit batch's file changes on the tool pool; a revert that cannot finish says
    why instead of failing the update."""
    try:
        return await workflow.execute_activity_method(
            RevertBatchActivity.revert_batch,
            inp,
            task_queue=c.tool_task_queue(workflow.info().task_queue),
            start_to_close_timeout=timedelta(minutes=2),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=3),
            summary=f"revert · {inp.batch.batch_id}",
        )
    except ActivityError as exc:
        return c.RevertResult(error=f"the revert did not finish: {exc.cause or exc}")
