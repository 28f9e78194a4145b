"""`OpenFlowRun`: the Temporal shell around the engine.

The workflow holds no business rules. It feeds facts (activity results, human actions, timers,
cancellation) to `advance`, runs every intent of the plan concurrently, records the plan's
events for the `events` and `state` queries, and keeps search attributes current.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextlib import nullcontext
from datetime import timedelta
from typing import Any, assert_never

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from openflow import contracts as c
    from openflow.engine import advance as engine
    from openflow.engine import display
    from openflow.engine.compact import compact
    from openflow.engine.errors import EngineError
    from openflow.engine.state import (
        ActionMalformed,
        ApprovalDecided,
        BatchReverted,
        BudgetSet,
        CallModel,
        CancelRequested,
        CancelWork,
        Fact,
        GrantRevoked,
        InputGiven,
        Intent,
        InterruptRequested,
        MessageSent,
        ModelFailed,
        Plan,
        ReadReceipt,
        RetryRequested,
        RevertRequested,
        RunSnapshot,
        RunTools,
        SleepUntil,
        TimerFired,
        WriteHandoff,
    )
    from openflow.workflows import calls, notices, patches
    from openflow.workflows.approvals import approval_fact, revoke_fact
    from openflow.workflows.handlers import (
        Malformed,
        action_signal,
        plain_query,
        read_act,
        read_after,
    )
    from openflow.workflows.held import HeldSnapshot
    from openflow.workflows.journal import Journal
    from openflow.workflows.shared import shared_profiles, shared_settled, shared_workflow
    from openflow.workflows.tracing import RunSpans

STATUS = SearchAttributeKey.for_keyword(c.SA_STATUS)
AWAITING = SearchAttributeKey.for_keyword_list(c.SA_AWAITING)

#: An execution continues as new past this many events, so a worker that takes a run over
#: (and replays its history from the start) does so well inside the workflow task timeout.
HISTORY_EVENTS_LIMIT = 2_000
#: The limit of executions that started before it was lowered (they replay as they ran).
OLD_HISTORY_EVENTS_LIMIT = 10_000
SHORT_EXECUTIONS = "short-executions"


POST_RUN_REVIEW = "post-run-review"
INPUT_LIMITS = "input-limits"
FAILED_START_NOTICES = "failed-start-notices"
ACTIONS_DELIVERED = "actions-delivered"
#: A run upserts only the search attributes that changed since its start or its last upsert.
LEAN_ATTRIBUTES = "lean-attributes"
#: The engine plans what runs next after each fact of a step (`engine.advance(each=True)`):
#: a workflow task's facts may reach the workflow in one activation or in several (a worker
#: that takes over a run after a task timed out may be given them apart), and the commands
#: must not depend on which.
SCHEDULE_EACH_FACT = "schedule-each-fact"
#: A run continues as new with a node's agent that is much like an earlier node's given by
#: reference (`contracts.lean_workflow`); runs recorded before carried every agent whole.
AGENT_REFS = "agent-refs"


def _start_attributes() -> tuple[str, tuple[str, ...]] | None:
    """The status and awaiting nodes the execution started with, if its start set a status
    (the server keeps no empty list: an awaiting left out is none)."""
    attrs = workflow.info().typed_search_attributes
    status = attrs.get(STATUS)
    if status is None:
        return None
    return (status, tuple(attrs.get(AWAITING) or ()))


class EngineFault(ApplicationError):
    """A bug in engine or workflow code: fails the run instead of retrying the task forever."""


def _action_fact(
    action: c.Action, snapshot: RunSnapshot | None = None, source: str = c.UPDATE_ACT
) -> (
    InputGiven
    | ApprovalDecided
    | GrantRevoked
    | ActionMalformed
    | RetryRequested
    | MessageSent
    | InterruptRequested
    | RevertRequested
    | BudgetSet
):
    if action.kind == "input":
        return InputGiven(
            node_id=action.node_id or "",
            text=action.text or "",
            attachments=tuple(action.attachments),
        )
    if action.kind == "approval":
        return approval_fact(action, snapshot, source)
    if action.kind == "revoke_grant":
        return revoke_fact(action)
    if action.kind == "retry":
        return RetryRequested(node_id=action.node_id or "", message=action.message)
    if action.kind == "interrupt":
        return InterruptRequested(node_id=action.node_id or "")
    if action.kind == "revert":
        return RevertRequested(batch_id=action.batch_id or "")
    if action.kind == "budget":
        return BudgetSet(max_cost_usd=action.max_cost_usd, max_tokens=action.max_tokens)
    return MessageSent(
        node_id=action.node_id or "", text=action.text or "", attachments=tuple(action.attachments)
    )


@workflow.defn(name=c.WORKFLOW_NAME)
class OpenFlowRun:
    """One OpenFlow run: a durable host for the engine."""

    def __init__(self) -> None:
        # First, in the run's first activation: before the run method and any handler.
        patches.begin(self)
        self._facts: list[Fact] = []
        self._journal = Journal()
        #: The latest snapshot (`_snapshot`), held compactly while the run waits for a person.
        self._held = HeldSnapshot()
        self._status = "running"
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._headers_sent: set[str] = set()
        #: The header parts the run's start stored: calls send them by reference.
        self._header_parts: frozenset[str] = frozenset()
        self._input: c.RunInput | None = None
        self._applied = 0
        self._received = 0
        self._profiles: dict[str, dict[str, Any]] = {}
        self._active_provider = "scripted"
        self._execution_dir = ""
        self._last_attrs: tuple[str, tuple[str, ...]] | None = None
        self._deferred: list[Intent] | None = None
        self._events_limit = OLD_HISTORY_EVENTS_LIMIT
        self._spans = RunSpans()
        self._webhooks: list[c.WebhookRef] = []
        self._notices = notices.Notifier()

    # --- the run ------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: c.RunInput) -> c.RunResult:
        # The SDK keeps the run's input as long as the run: its workflow is the worker's one.
        inp.workflow = shared_workflow(inp.workflow, inp.workflow_stored)
        if not inp.run_id:
            # A schedule's runs, and lean start inputs: the workflow id is the run's. Set on
            # the input the SDK keeps anyway (a copy would be a second input to keep).
            inp.run_id = workflow.info().workflow_id
        self._input = inp
        self._events_limit = (
            HISTORY_EVENTS_LIMIT if patches.on(SHORT_EXECUTIONS) else OLD_HISTORY_EVENTS_LIMIT
        )
        self._journal.begin(inp)
        self._headers_sent = set(inp.headers_sent)
        self._header_parts = frozenset(inp.header_parts)
        now = self._now()
        self._spans.start(inp.run_id, inp.workflow.id, now, continued=inp.snapshot is not None)
        if inp.snapshot is not None and inp.state is not None:
            self._spans.carry_on(dict(self._journal.projection().status_by_node), now)
        plan: Plan
        if inp.snapshot is None:
            try:
                prepared = await calls.prepare_run(inp)
            except (ActivityError, ApplicationError) as exc:
                # Settings that cannot start the run (a missing key, an unknown provider, a
                # broken script): the run ends failed, saying what to fix. (A local
                # activity's failure is its cause itself.)
                cause = exc.cause if isinstance(exc, ActivityError) else exc
                message = getattr(cause, "message", None) or str(cause or exc)
                if patches.on(FAILED_START_NOTICES):
                    self._webhooks = await calls.listed_webhooks()
                plan = engine.start(
                    inp.workflow,
                    inp.run_id,
                    now,
                    entrypoint_text=inp.entrypoint,
                    start_error=message,
                    limits=patches.on(INPUT_LIMITS),
                )
                self._apply(plan, [])
                if self._notices.tasks:
                    await workflow.wait_condition(self._notices.started)
                self._spans.end("failed", self._now())
                return self._result()
            self._profiles = shared_profiles(prepared.profiles)
            self._active_provider = prepared.provider
            self._webhooks = prepared.webhooks
            self._execution_dir = prepared.execution_dir
            assert prepared.workflow is not None  # calls.prepare_run fills it in
            plan = engine.start(
                shared_settled(prepared.workflow, inp, prepared.provider),
                inp.run_id,
                now,
                entrypoint_text=inp.entrypoint,
                entrypoint_attachments=inp.attachments,
                execution_dir=prepared.execution_dir,
                project_root=inp.project_dir,
                tool_names=prepared.tool_names,
                warnings=prepared.warnings,
                agents=prepared.agents,
                read_tools=prepared.read_tools,
                # Runs recorded before the review existed must replay as they ran.
                review=patches.on(POST_RUN_REVIEW),
                # Runs recorded before the input limits existed must replay as they ran too.
                limits=patches.on(INPUT_LIMITS),
                budget=inp.budget,
            )
            # One set for every run of the workflow on this worker.
            self._header_parts = calls.stored_parts(prepared, plan.snapshot)
            del prepared  # a run waits for months: nothing of its start is kept but the plan
        else:
            self._profiles = shared_profiles(inp.profiles or {})
            self._active_provider = inp.active_provider or "scripted"
            self._execution_dir = inp.execution_dir or inp.snapshot.execution_dir
            self._webhooks = inp.webhooks
            if inp.resume:
                plan = engine.resume(inp.snapshot, now, inp.continuation)
            else:
                plan = Plan(snapshot=inp.snapshot, status=inp.snapshot.status)
                self._snapshot = inp.snapshot
                self._status = inp.snapshot.status
                # What the execution before told of already.
                self._notices.paused = notices.pause_keys(inp.snapshot)
        self._apply(plan, list(inp.pending_intents))
        # The first plan's intents (a whole request header) and snapshot are not kept either,
        # nor what only the start read of the input the SDK keeps.
        del plan
        if inp.snapshot is not None or inp.events or inp.pending_intents or inp.continuation:
            # (A new run's input has none of them: setting them would only grow its fields set.)
            inp.snapshot, inp.events, inp.pending_intents, inp.continuation = None, [], [], None
        while not self._finished():
            try:
                if self._deferred is not None:
                    await workflow.wait_condition(
                        lambda: (
                            bool(self._facts)
                            or (workflow.all_handlers_finished() and self._notices.started())
                        )
                    )
                    if not self._facts:
                        self._continue_as_new(self._deferred)
                await workflow.wait_condition(lambda: bool(self._facts))
            except asyncio.CancelledError:
                self._facts.append(CancelRequested())
            self._step()
        await self._settle_cancelled_work()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._notices.tasks:
            # A notice's child must have started before the run closes, or it never would.
            await workflow.wait_condition(self._notices.started)
        result = self._result()
        self._spans.end(result.status, self._now())
        return result

    @property
    def _snapshot(self) -> RunSnapshot | None:
        return self._held.get()

    @_snapshot.setter
    def _snapshot(self, snapshot: RunSnapshot | None) -> None:
        self._held.set(snapshot)

    def _now(self) -> int:
        return int(workflow.now().timestamp() * 1000)

    def _step(self) -> None:
        facts, self._facts = self._facts, []
        assert self._snapshot is not None
        try:
            plan = engine.advance(
                self._snapshot, facts, self._now(), each=patches.on(SCHEDULE_EACH_FACT)
            )
        except (EngineError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EngineFault(
                f"engine fault while applying {[f.kind for f in facts]}: {exc}",
                type="EngineFault",
                non_retryable=True,
            ) from exc
        self._applied += sum(
            1
            for f in facts
            if isinstance(
                f,
                InputGiven
                | ApprovalDecided
                | GrantRevoked
                | RetryRequested
                | MessageSent
                | InterruptRequested
                | BatchReverted
                | BudgetSet,
            )
        )
        self._apply(plan, [])

    def _apply(self, plan: Plan, carried: list[Intent]) -> None:
        self._snapshot = plan.snapshot
        self._status = plan.status
        self._journal.record(plan.events)
        self._spans.observe(plan.events)
        self._facts.extend(plan.facts)
        intents = [*carried, *plan.intents]
        if not plan.done and self._history_long() and not self._busy():
            self._deferred = [
                *(self._deferred or []),
                *(i for i in intents if not isinstance(i, CancelWork)),
            ]
        else:
            for intent in intents:
                self._start(intent)
        self._update_visibility(plan)
        if self._webhooks:
            self._notices.notify(plan, self._webhooks, self._journal.projection)
        if not plan.done and not self._facts and not self._busy():
            # Nothing in flight: the run waits for a person (or to continue as new), maybe
            # for months. Until something needs them again, its snapshot and its events are
            # held compactly.
            self._held.pack()
            self._journal.pack()

    def _update_visibility(self, plan: Plan) -> None:
        attrs = (self._status, display.awaiting_nodes(plan))
        lean = patches.on(LEAN_ATTRIBUTES)
        if self._last_attrs is None and lean:
            # What the start set needs no upsert to say again.
            self._last_attrs = _start_attributes()
        if attrs != self._last_attrs:
            last, self._last_attrs = self._last_attrs, attrs
            upserts: list[SearchAttributeUpdate[Any]] = []
            if not lean or last is None or attrs[0] != last[0]:
                upserts.append(STATUS.value_set(attrs[0]))
            if not lean or last is None or attrs[1] != last[1]:
                upserts.append(AWAITING.value_set(list(attrs[1])))
            workflow.upsert_search_attributes(upserts)
        workflow.set_current_details(display.run_details(plan))

    # --- webhooks -----------------------------------------------------------------------

    # --- intents ------------------------------------------------------------------------

    def _start(self, intent: Intent) -> None:
        assert self._snapshot is not None
        if isinstance(intent, CallModel):
            turn = calls.model_turn(
                intent,
                self._snapshot,
                self._active_provider,
                self._headers_sent,
                self._header_parts,
                self._profiles,
            )
            self._spawn(intent.call_id, turn, intent.node_id)
        elif isinstance(intent, RunTools):
            self._spawn(intent.batch_id, calls.tool_batch(intent, self._snapshot), intent.node_id)
        elif isinstance(intent, WriteHandoff):
            handoff = calls.write_handoff(intent, self._snapshot.run_id)
            self._spawn(f"handoff:{intent.node_id}", handoff)
        elif isinstance(intent, ReadReceipt):
            # Under the batch's id, so a stop that cancels the batch cancels its lookup.
            self._spawn(intent.batch_id, calls.read_receipt(intent))
        elif isinstance(intent, SleepUntil):
            key = f"timer:{intent.node_id}"
            old = self._timers.pop(key, None)
            if old is not None:
                old.cancel()
            self._timers[key] = asyncio.create_task(self._sleep(intent))
        elif isinstance(intent, CancelWork):
            for work_id in intent.ids:
                task = self._tasks.get(work_id)
                if task is not None and not task.done():
                    task.cancel()
            for key, timer in self._timers.items():
                if intent.timers is None or key.removeprefix("timer:") in intent.timers:
                    timer.cancel()
        else:
            assert_never(intent)

    def _spawn(self, work_id: str, call: Awaitable[Fact], node_id: str | None = None) -> None:
        """Run one activity's stub; the fact it answers goes to the engine's next step (a
        cancelled one answers nothing). `node_id`: the span its activity belongs to."""

        async def run() -> None:
            try:
                with self._spans.within(node_id) if node_id else nullcontext():
                    fact = await call
            except asyncio.CancelledError:
                return
            if isinstance(fact, ModelFailed) and fact.refs_missing:
                # The store lost what the run's calls refer to: headers travel whole again.
                self._header_parts = frozenset()
            self._facts.append(fact)

        task: asyncio.Task[None] = asyncio.create_task(run())
        self._tasks[work_id] = task

        def done(finished: asyncio.Task[None], key: str = work_id) -> None:
            # A lost batch's receipt lookup may already run under the same id.
            if self._tasks.get(key) is finished:
                self._tasks.pop(key)

        task.add_done_callback(done)

    async def _sleep(self, intent: SleepUntil) -> None:
        delay = max(intent.wake_at_ms - self._now(), 0)
        try:
            await workflow.sleep(
                timedelta(milliseconds=delay), summary=f"backoff · {intent.node_id}"
            )
        except asyncio.CancelledError:
            return
        self._facts.append(TimerFired(node_id=intent.node_id))

    async def _settle_cancelled_work(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        pending = [t for t in self._tasks.values() if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    # --- continue-as-new ----------------------------------------------------------------

    def _busy(self) -> bool:
        work = [*self._tasks.values(), *self._timers.values()]
        return any(not task.done() for task in work)

    def _history_long(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self._events_limit
        )

    def _continue_as_new(self, pending: list[Intent]) -> None:
        assert self._input is not None and self._snapshot is not None
        self._spans.end("continued", self._now())
        workflow.continue_as_new(
            c.RunInput(
                run_id=self._input.run_id,
                workflow=self._snapshot.workflow,
                entrypoint=self._input.entrypoint,
                project_dir=self._input.project_dir,
                provider_id=self._input.provider_id,
                tenant=self._input.tenant,
                profiles=self._profiles,
                active_provider=self._active_provider,
                snapshot=compact(self._snapshot),
                state=self._journal.carried_state(),
                events=self._journal.carried_events(),
                first_seq=self._snapshot.event_seq + 1,
                previous_run_id=workflow.info().run_id,
                pending_intents=pending,
                headers_sent=sorted(self._headers_sent),
                header_parts=sorted(self._header_parts),
                execution_dir=self._execution_dir,
                webhooks=self._webhooks,
                agent_refs=patches.on(AGENT_REFS),
            ),
            task_timeout=c.WORKFLOW_TASK_TIMEOUT,
        )

    def _result(self) -> c.RunResult:
        assert self._snapshot is not None
        status = self._snapshot.status
        outputs = {n: ns.output for n, ns in sorted(self._snapshot.nodes.items()) if ns.has_output}
        run_id = self._snapshot.run_id
        return c.RunResult(
            # The workflow id says it (history need not): a reader of a result takes it there.
            run_id="" if run_id == workflow.info().workflow_id else run_id,
            status=status if status in ("completed", "failed", "stopped") else "failed",
            outputs=outputs,
            error=self._snapshot.terminal_error,
        )

    # --- people -------------------------------------------------------------------------

    def _receive(self, action: c.Action, source: str = c.UPDATE_ACT) -> None:
        fact = _action_fact(action, self._snapshot, source)
        if isinstance(fact, RevertRequested):
            # A revert needs the update (it runs an activity); a signal carries none.
            return
        # Runs recorded when an input to a failed node was ignored, or a message taken during
        # a node's last turn was lost to its submit, replay as they ran.
        if isinstance(fact, InputGiven):
            fact = fact.model_copy(update={"retry_failed": patches.on(ACTIONS_DELIVERED)})
        elif isinstance(fact, MessageSent):
            fact = fact.model_copy(update={"deliver_late": patches.on(ACTIONS_DELIVERED)})
        if not isinstance(fact, ActionMalformed):
            self._received += 1
        self._facts.append(fact)

    def _ignore(self, fact: ActionMalformed) -> None:
        """A signal that did not parse: the engine records it, and nothing else changes."""
        self._facts.append(fact)

    # Every handler reads its own arguments (`openflow.workflows.handlers`): nothing a caller
    # sends can raise out of a signal handler and fail the run.

    @action_signal(c.SIGNAL_INPUT)
    def submit_user_input(self, action: c.Action) -> None:
        self._receive(action)

    @action_signal(c.SIGNAL_APPROVAL)
    def submit_tool_approval(self, action: c.Action) -> None:
        self._receive(action, c.SIGNAL_APPROVAL)

    @action_signal(c.SIGNAL_RETRY)
    def retry_node(self, action: c.Action) -> None:
        self._receive(action)

    @action_signal(c.SIGNAL_MESSAGE)
    def send_message(self, action: c.Action) -> None:
        self._receive(action)

    @action_signal(c.SIGNAL_INTERRUPT)
    def interrupt_node(self, action: c.Action) -> None:
        self._receive(action)

    @workflow.update(name=c.UPDATE_ACT)
    async def act(self, *args: Any) -> c.ActResult:
        # The validator read these arguments when the update arrived (it does not run again on
        # replay), so they parse: the same model as before.
        action = c.Action.model_validate(args[0])
        if action.kind == "revert":
            return await self._revert(action.batch_id or "")
        self._receive(action)
        target = self._received
        await workflow.wait_condition(lambda: self._applied >= target or self._finished())
        return c.ActResult(status=self._status)

    async def _revert(self, batch_id: str) -> c.RevertAnswer:
        """Undo an edit batch in an activity; the engine records what it did."""
        batch = self._edit_batch(batch_id)
        if batch is None or self._snapshot is None:  # the validator checked both
            return c.RevertAnswer(accepted=False, status=self._status, error="no such edit batch")
        result = await calls.revert_batch(
            c.RevertInput(
                run_id=self._snapshot.run_id,
                execution_dir=self._execution_dir or self._snapshot.execution_dir,
                batch=batch,
            )
        )
        self._received += 1
        target = self._received
        self._facts.append(
            BatchReverted(batch_id=batch_id, paths=tuple(result.paths), error=result.error)
        )
        await workflow.wait_condition(lambda: self._applied >= target or self._finished())
        return c.RevertAnswer(
            accepted=result.error is None,
            status=self._status,
            paths=result.paths,
            error=result.error,
        )

    def _edit_batch(self, batch_id: str) -> Any:
        """The edit batch with its before-snapshots, as the run's events recorded it."""
        return next(
            (b for b in self._journal.projection().edit_batches if b.batch_id == batch_id), None
        )

    @act.validator
    def _validate_act(self, *args: Any) -> None:
        try:
            action = read_act(args)
        except Malformed as bad:
            raise ValueError(bad.reason) from None
        if self._snapshot is None:
            raise ValueError("the run is still starting; try again in a moment")
        fact = _action_fact(action, self._snapshot)
        if isinstance(fact, ActionMalformed):
            raise ValueError(fact.reason)
        reason = engine.check(self._snapshot, fact)
        if reason is not None:
            raise ValueError(reason)
        if isinstance(fact, RevertRequested) and self._edit_batch(fact.batch_id) is None:
            raise ValueError(f"edit batch {fact.batch_id!r} is too old: its snapshots are gone")

    def _finished(self) -> bool:
        return self._held.finished

    @plain_query(c.QUERY_STATE)
    def state(self) -> dict[str, Any]:
        data = self._journal.projection().as_json()
        data["status"] = self._status
        return data

    @plain_query(c.QUERY_CHECKPOINT)
    def checkpoint(self) -> dict[str, Any]:
        """The latest snapshot with what a resume needs to continue from it."""
        if self._input is None or self._snapshot is None:
            return {}
        base = self._input.model_copy(
            update={
                "profiles": self._profiles,
                "active_provider": self._active_provider,
                "execution_dir": self._execution_dir,
                "webhooks": self._webhooks,
                "header_parts": sorted(self._header_parts),
                "workflow": self._snapshot.workflow,
                "snapshot": None,
                "events": [],
                "pending_intents": [],
                "continuation": None,
            }
        )
        return c.Checkpoint(
            input=base.model_dump(mode="json"),
            snapshot=self._snapshot.model_dump(mode="json"),
            state=self._journal.carried_state(),
            events=self._journal.carried_events(),
            first_seq=self._snapshot.event_seq + 1,
            previous_run_id=workflow.info().run_id,
        ).model_dump(mode="json")

    @workflow.query(name=c.QUERY_EVENTS)
    def events(self, *args: Any) -> list[dict[str, Any]]:
        after = read_after(args)
        return self._journal.after(after)

    @plain_query(c.QUERY_EVENTS_ORIGIN)
    def events_origin(self) -> c.EventsOrigin:
        """Where this execution's events start, and the execution that holds the earlier ones."""
        return self._journal.origin()


__all__ = ["EngineFault", "OpenFlowRun"]
