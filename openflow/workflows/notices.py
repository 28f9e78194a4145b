"""Run notices for settings.json webhooks: what to tell, and the child workflow that tells it.

A run tells its webhooks when something new waits for a person (`paused`) and when it ends
(`completed`, `failed`, `stopped`). It starts an `OpenFlowNotice` child workflow, abandoned
when the run closes, which runs the `deliver_webhook` activity once per webhook with retries:
so a receiver that is slow or down never holds the run up, and the notice outlives the run.
History carries only the notice and the webhooks' places in settings.json.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from openflow import contracts as c
    from openflow.engine.projection import WorkflowRunState
    from openflow.engine.state import Plan, RunSnapshot
    from openflow.workflows import patches

#: Between attempts: 1 s, doubling up to 10 minutes, for a day; then the notice is dropped.
DELIVERY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=10),
    non_retryable_error_types=["WebhookRefused"],
)
DELIVERY_WINDOW = timedelta(days=1)
ATTEMPT_TIMEOUT = timedelta(seconds=30)
#: Runs recorded before webhooks start no notice children.
WEBHOOKS = "webhooks"
QUESTION_CHARS = 2_000

PauseKey = tuple[str, str]


def pause_keys(snapshot: RunSnapshot) -> frozenset[PauseKey]:
    """Each thing the run waits on from a person, as (kind, id): what a plan's `awaiting` says."""
    nodes = snapshot.nodes.items()
    return frozenset(
        [
            *(("input", n) for n, ns in nodes if ns.awaiting),
            *(("approval", b.batch_id) for b in snapshot.batches.values() if b.requires_approval),
            *(("retry", n) for n, ns in nodes if ns.failed is not None or ns.interrupted),
        ]
    )


def pending_pauses(plan: Plan, state: WorkflowRunState) -> list[c.PendingPause]:
    """What the plan waits for, in the order the engine lists it, as a notice tells it."""
    pauses: list[c.PendingPause] = []
    for node in plan.awaiting.inputs:
        pauses.append(c.PendingPause(kind="input", node_id=node, question=_question(state, node)))
    for batch_id in plan.awaiting.approvals:
        batch = plan.snapshot.batches.get(batch_id)
        pauses.append(
            c.PendingPause(
                kind="approval",
                node_id=batch.node_id if batch is not None else "",
                approval_id=batch_id,
                tools=list(dict.fromkeys(call.name for call in batch.calls)) if batch else [],
            )
        )
    for node in plan.awaiting.retryables:
        ns = plan.snapshot.nodes.get(node)
        error = None
        if ns is not None:
            error = ns.failed or ("interrupted" if ns.interrupted else None)
        pauses.append(c.PendingPause(kind="retry", node_id=node, error=error))
    return pauses


def _question(state: WorkflowRunState, node: str) -> str | None:
    """The node's last model message, when it is what the node asks."""
    for message in reversed(state.chat_logs.get(node, [])):
        if message.role == "user":
            return None
        if message.role == "assistant" and message.content.strip():
            return message.content[:QUESTION_CHARS]
    return None


def subscribers(hooks: list[c.WebhookRef], event: c.WebhookEvent) -> list[int]:
    """The places of the webhooks that take `event`."""
    return [hook.index for hook in hooks if event in hook.events]


class Notifier:
    """A run's side of its notices: the pauses it told of, and the children that tell."""

    def __init__(self) -> None:
        self.paused: frozenset[PauseKey] = frozenset()
        self.tasks: list[asyncio.Task[None]] = []

    def started(self) -> bool:
        """Whether every notice's child workflow has started."""
        return all(task.done() for task in self.tasks)

    def notify(
        self, plan: Plan, hooks: list[c.WebhookRef], state: Callable[[], WorkflowRunState]
    ) -> None:
        """Tell the webhooks when something new waits for a person, and when the run ends."""
        if plan.done:
            if plan.status not in ("completed", "failed", "stopped"):
                return
            event: c.WebhookEvent = plan.status
            awaiting: list[c.PendingPause] = []
        else:
            keys, self.paused = self.paused, pause_keys(plan.snapshot)
            if not self.paused - keys:
                return
            event, awaiting = "paused", pending_pauses(plan, state())
        places = subscribers(hooks, event)
        if not places or not patches.on(WEBHOOKS):
            return
        run_id = plan.snapshot.run_id
        notice = c.RunNotice(
            run_id=run_id,
            workflow_id=plan.snapshot.workflow.id,
            status=plan.status,
            event=event,
            awaiting=awaiting,
        )
        child_id = f"{run_id}.notice.{workflow.info().run_id}.{len(self.tasks)}"
        self.tasks.append(asyncio.create_task(self._tell(child_id, notice, places)))

    async def _tell(self, child_id: str, notice: c.RunNotice, hooks: list[int]) -> None:
        try:
            await workflow.start_child_workflow(
                c.WORKFLOW_NOTICE,
                c.NoticeInput(notice=notice, hooks=hooks),
                id=child_id,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                cancellation_type=workflow.ChildWorkflowCancellationType.ABANDON,
                static_summary=f"{notice.event} notice of {notice.run_id}",
            )
        except WorkflowAlreadyStartedError:
            workflow.logger.warning("notice %s of run %s already sent", child_id, notice.run_id)


@workflow.defn(name=c.WORKFLOW_NOTICE)
class OpenFlowNotice:
    """One notice, delivered to each of its webhooks, each retried on its own."""

    @workflow.run
    async def run(self, inp: c.NoticeInput) -> list[str]:
        outcomes = await asyncio.gather(*(self._deliver(inp.notice, hook) for hook in inp.hooks))
        failed = [
            f"webhooks[{hook}]" for hook, ok in zip(inp.hooks, outcomes, strict=True) if not ok
        ]
        if failed:
            # Fails this workflow, visibly; the run it tells of is not concerned.
            raise ApplicationError(
                f"the {inp.notice.event} notice could not be delivered to {', '.join(failed)}",
                type="NoticeUndelivered",
                non_retryable=True,
            )
        return [f"webhooks[{hook}]" for hook in inp.hooks]

    async def _deliver(self, notice: c.RunNotice, hook: int) -> bool:
        try:
            await workflow.execute_activity(
                c.ACTIVITY_WEBHOOK,
                c.WebhookInput(notice=notice, hook=hook),
                result_type=c.WebhookResult,
                start_to_close_timeout=ATTEMPT_TIMEOUT,
                schedule_to_close_timeout=DELIVERY_WINDOW,
                retry_policy=DELIVERY_RETRY,
                summary=f"webhook · webhooks[{hook}] · {notice.event}",
            )
        except ActivityError as exc:
            workflow.logger.warning(
                "%s notice of run %s to webhooks[%d] given up: %s",
                notice.event,
                notice.run_id,
                hook,
                exc.cause or exc,
            )
            return False
        return True


__all__ = [
    "DELIVERY_RETRY",
    "Notifier",
    "OpenFlowNotice",
    "pause_keys",
    "pending_pauses",
    "subscribers",
]
