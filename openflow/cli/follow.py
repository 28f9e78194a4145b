"""Follow a run at the terminal: live progress, streamed tokens, and prompts when it pauses.

The durable run events (the `events` query) drive what is shown; token deltas and streaming
tool output come from the live channel when the worker shares this machine's `OPENFLOW_HOME`.
When the run pauses for a person, `follow_run` either asks at the terminal (interactive) or
returns the open pauses so the caller can print how to answer them (`answer_hint`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.text import Text
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from openflow import contracts as c
from openflow.client import ActionRejected, Runs
from openflow.engine import RunEvent, WorkflowRunState
from openflow.engine.events import (
    Aborted,
    ActionIgnored,
    ChatMessage,
    Error,
    FileChanged,
    Finished,
    NodeAwaitingInput,
    NodeCompleted,
    NodeErrored,
    NodeFailed,
    NodeInterrupted,
    NodeRetrying,
    NodeStarted,
    OutputRepairFailed,
    OutputRepairStarted,
    RunStarted,
    ToolApprovalRequested,
    ToolApproved,
    ToolCompleted,
    ToolDenied,
    ToolRetrying,
    ToolStarted,
    UsageReported,
)
from openflow.engine.projection import Usage
from openflow.engine.request import UsageReport
from openflow.engine.spec import MAX_BUDGET_TOKENS, MAX_BUDGET_USD
from openflow.engine.transcript import ToolCall

logger = logging.getLogger(__name__)

TERMINAL_STATUSES = frozenset({"completed", "failed", "stopped"})
POLL_INTERVAL_S = 0.15
NO_WORKER_HINT_AFTER_S = 5.0
QUERY_TIMEOUT_S = 5.0

PauseKind = Literal["input", "approval", "retry"]
Prompter = Callable[[str], Awaitable[str | None]]
LiveSource = Callable[[str], AsyncIterator[dict[str, Any]]]


@dataclass(frozen=True)
class Pause:
    """Something the run waits for a person to do."""

    kind: PauseKind
    node_id: str
    label: str
    key: str
    detail: str = ""
    approval_id: str = ""
    calls: tuple[ToolCall, ...] = ()


@dataclass
class FollowOutcome:
    """How following ended: the run's status and, when it waits for a person, what for."""

    status: str
    pauses: list[Pause] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        return bool(self.pauses) and self.status not in TERMINAL_STATUSES


def shell_quote(text: str) -> str:
    """`text` as one shell word, in double quotes only when it needs them."""
    if text and all(ch.isalnum() or ch in "-_./:@" for ch in text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return f'"{escaped}"'


def answer_hint(run_id: str, pause: Pause) -> str:
    """The command that answers `pause`, for people following without a terminal."""
    run = shell_quote(run_id)
    if pause.kind == "input":
        return f"openflow runs input {run} {shell_quote(pause.node_id)} TEXT"
    if pause.kind == "approval":
        approval = shell_quote(pause.approval_id)
        return (
            f"openflow runs approve {run} {approval}   "
            f"or: openflow runs deny {run} {approval} --reason TEXT"
        )
    if budget_pause(pause):
        option = "--max-tokens N" if "tokens spent" in pause.detail else "--max-cost USD"
        return f"openflow runs budget {run} {option}"
    return f"openflow runs retry {run} {shell_quote(pause.node_id)} [--message TEXT]"


def budget_pause(pause: Pause) -> bool:
    """Whether the run's budget holds the node (a larger budget, not a retry, lets it go on)."""
    return pause.kind == "retry" and pause.detail.startswith("budget reached")


async def _ask_budget(follower: Any, pause: Pause) -> c.Action | None:
    """A larger budget typed at the prompt, or None to leave the run paused."""
    tokens = "tokens spent" in pause.detail
    what = "tokens" if tokens else "US dollars"
    while True:
        text = await follower.prompt(f"  {pause.label}: new budget in {what} (empty: leave it)> ")
        text = (text or "").strip()
        if not text:
            return None
        try:
            value = int(text) if tokens else float(text)
        except ValueError:
            value = 0
        if 0 < value <= (MAX_BUDGET_TOKENS if tokens else MAX_BUDGET_USD):
            if tokens:
                return c.Action(kind="budget", max_tokens=int(value))
            return c.Action(kind="budget", max_cost_usd=float(value))
        follower.console.print(Text(f"  give a positive number of {what}", style="red"))


def describe_pause(pause: Pause) -> str:
    """One line saying what the run waits for."""
    if pause.kind == "input":
        question = f": {_clip(pause.detail, 300)}" if pause.detail else ""
        return f"{pause.label} is waiting for input{question}"
    if pause.kind == "approval":
        tools = ", ".join(call_summary(call) for call in pause.calls) or "a tool batch"
        return f"{pause.label} asks to run {tools} (approval {pause.approval_id})"
    return f"{pause.label} failed and waits for a retry: {_clip(pause.detail, 300)}"


def call_summary(call: ToolCall, width: int = 60) -> str:
    """`write(path=notes.md, content=<312 chars>)`: a tool call in one short line."""
    return _call_text(call.name, call.arguments, width)


def _call_text(name: str, arguments: dict[str, Any], width: int = 60) -> str:
    parts = []
    for key, value in arguments.items():
        if key in ("_i", "intent"):
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if "\n" in text or len(text) > width:
            text = f"<{len(text)} chars>"
        parts.append(f"{key}={text}")
    return f"{name or 'tool'}({', '.join(parts)})"


def find_pauses(state: WorkflowRunState, opened: dict[str, Any]) -> list[Pause]:
    """Every pause the state shows, keyed so an answered pause is not asked about twice.

    `opened` maps `"input:<node>"` and `"retry:<node>"` to the seq of the event that opened
    the pause (so a node that pauses again gets a new key) and `"question:<node>"` to the
    text of its input request.
    """
    if state.status in TERMINAL_STATUSES:
        return []
    labels = node_labels(state)
    pauses: list[Pause] = []
    for node_id in state.awaiting_node_ids:
        seq = opened.get(f"input:{node_id}", 0)
        pauses.append(
            Pause(
                kind="input",
                node_id=node_id,
                label=labels.get(node_id, node_id),
                key=f"input:{node_id}:{seq}",
                detail=question_text(state, node_id, opened),
            )
        )
    for pending in state.pending_approvals:
        pauses.append(
            Pause(
                kind="approval",
                node_id=pending.node_id,
                label=pending.node_label or labels.get(pending.node_id, pending.node_id),
                key=f"approval:{pending.approval_id}",
                approval_id=pending.approval_id,
                calls=pending.tool_calls or (pending.tool_call,),
            )
        )
    if state.active:
        for node_id, status in sorted(state.status_by_node.items()):
            if status not in ("failed", "interrupted"):
                continue
            seq = opened.get(f"retry:{node_id}", 0)
            detail = "interrupted" if status == "interrupted" else state.last_error or ""
            pauses.append(
                Pause(
                    kind="retry",
                    node_id=node_id,
                    label=labels.get(node_id, node_id),
                    key=f"retry:{node_id}:{seq}",
                    detail=detail,
                )
            )
    return pauses


def node_labels(state: WorkflowRunState) -> dict[str, str]:
    """Node labels as the run trace shows them."""
    labels: dict[str, str] = {}
    for entry in state.run_trace:
        node_id, label = entry.node_id, entry.node_label
        if node_id and label and node_id not in labels and entry.status != "running":
            labels[node_id] = label
    return labels


def question_text(state: WorkflowRunState, node_id: str, opened: dict[str, Any]) -> str:
    """The question a node asked: its structured question, its last message, or its prompt."""
    structured = state.structured_input_by_node.get(node_id)
    if structured:
        return structured_question_text(structured)
    for message in reversed(state.chat_logs.get(node_id, [])):
        content = message.content.strip()
        if message.role == "user":
            break
        if message.role == "assistant" and content and not message.message_kind:
            return content
    text = opened.get(f"question:{node_id}")
    return str(text) if text else ""


def structured_question_text(structured: dict[str, Any]) -> str:
    """An ask_user_question payload as one line: questions and their options."""
    items = structured.get("questions")
    if not isinstance(items, list):
        items = [structured]
    parts = []
    for item in items:
        if not isinstance(item, dict):
            continue
        question = str(item.get("question") or item.get("header") or "").strip()
        options = [
            str(o.get("label") if isinstance(o, dict) else o) for o in item.get("options") or []
        ]
        parts.append(f"{question} [{' / '.join(options)}]" if options else question)
    return " ".join(p for p in parts if p) or json.dumps(structured, ensure_ascii=False)


def usage_text(usage: Usage) -> str:
    """`1,234 in · 56 out · 800 cached · ~$0.0123`: a state's usage (U of CONTRACT 8)."""
    parts = [f"{usage.input_tokens:,} in", f"{usage.output_tokens:,} out"]
    if usage.cached_tokens:
        parts.append(f"{usage.cached_tokens:,} cached")
    if usage.cache_write_tokens:
        parts.append(f"{usage.cache_write_tokens:,} cache writes")
    parts.append(f"~${usage.estimated_cost_usd:.4f}")
    return " · ".join(parts)


def _add_usage(total: Usage | None, report: UsageReport) -> Usage:
    total = total or Usage()
    return total.model_copy(
        update={
            "input_tokens": total.input_tokens + report.prompt_tokens,
            "output_tokens": total.output_tokens + report.completion_tokens,
            "cached_tokens": total.cached_tokens + report.cached_input_tokens,
            "cache_write_tokens": total.cache_write_tokens + report.cache_creation_input_tokens,
            "estimated_cost_usd": total.estimated_cost_usd + (report.cost_usd or 0.0),
        }
    )


class Renderer:
    """Prints run events as short lines; streamed tokens flow inline under their node."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.labels: dict[str, str] = {}
        self._stream: str | None = None
        self._streamed: set[str] = set()
        self.usage: Usage | None = None

    def label(self, node_id: str | None) -> str:
        if not node_id:
            return "run"
        return self.labels.get(node_id, node_id)

    def _line(self, text: str | Text, style: str = "") -> None:
        self._close_stream()
        if isinstance(text, str):
            text = Text(text, style=style)
        self.console.print(text, soft_wrap=True, highlight=False)

    def _close_stream(self) -> None:
        if self._stream is not None:
            self.console.print(soft_wrap=True)
            self._stream = None

    def live(self, event: dict[str, Any]) -> None:
        """Render one live-channel message (token deltas, streaming tool output).

        Live messages are not durable events (they carry a `live_seq` of their own), so they
        are read as the live channel sends them.
        """
        kind = event.get("type")
        if kind == "ChatMessageDelta":
            message_id = str(event.get("message_id") or "")
            if event.get("finalize"):
                if self._stream == message_id:
                    self._close_stream()
                return
            delta = str(event.get("delta") or "")
            if not delta:
                return
            if self._stream != message_id:
                self._close_stream()
                node = self.label(event.get("node_id"))
                self.console.print(Text(f"  {node} › ", style="cyan"), end="", soft_wrap=True)
                self._stream = message_id
            self._streamed.add(str(event.get("node_id") or ""))
            style = "dim italic" if event.get("role") == "thinking" else "dim"
            self.console.print(Text(delta, style=style), end="", soft_wrap=True)
        elif kind == "ToolUpdated":
            content = str(event.get("content") or "").rstrip()
            if content:
                tool = event.get("tool_name") or "tool"
                for row in content.splitlines()[-5:]:
                    self._line(f"      {tool} │ {row}", "dim")

    def event(self, event: RunEvent) -> None:
        """Render one durable run event."""
        node_id: str | None = getattr(event, "node_id", None)
        label: str = getattr(event, "label", "")
        if node_id and label:
            self.labels[node_id] = label
        node = self.label(node_id)
        handler = getattr(self, f"_on_{event.type}", None)
        if handler is not None:
            handler(event, node)

    def _on_RunStarted(self, event: RunStarted, node: str) -> None:  # noqa: N802
        name = event.workflow_name or event.workflow_id or "workflow"
        self._line(f"▶ {name}: run started", "bold")

    def _on_NodeStarted(self, event: NodeStarted, node: str) -> None:  # noqa: N802
        attempt = event.model_attempt or 1
        again = f" (attempt {attempt})" if attempt > 1 else ""
        self._line(f"● {node} started{again}", "cyan")

    def _on_ChatMessage(self, event: ChatMessage, node: str) -> None:  # noqa: N802
        content = event.content.strip()
        if not content or event.message_kind == "node_completed":
            return
        if event.role == "assistant":
            self._line(f"  {node} › {_clip(content, 400)}", "dim")
        elif event.role == "user":
            self._line(f"  you → {node}: {_clip(content, 200)}", "magenta")
        elif event.role == "system":
            self._line(f"  {node}: {_clip(content, 200)}", "dim")

    def _on_NodeAwaitingInput(self, event: NodeAwaitingInput, node: str) -> None:  # noqa: N802
        question = event.context.strip()
        if event.structured_input:
            question = structured_question_text(event.structured_input)
        suffix = f": {_clip(question, 400)}" if question else ""
        self._line(f"⏸ {node} is waiting for input{suffix}", "yellow")

    def _on_ToolApprovalRequested(self, event: ToolApprovalRequested, node: str) -> None:  # noqa: N802
        request = event.request
        label = request.node_label or self.label(request.node_id)
        calls = request.tool_calls or (request.tool_call,)
        tools = ", ".join(call_summary(call) for call in calls)
        self._line(f"⏸ {label} asks to run {tools}", "yellow")

    def _on_ToolApproved(self, event: ToolApproved, node: str) -> None:  # noqa: N802
        self._line(f"  ✓ {event.tool_name} approved", "green")

    def _on_ToolDenied(self, event: ToolDenied, node: str) -> None:  # noqa: N802
        self._line(f"  ✗ {event.tool_name} denied: {_clip(event.reason, 200)}", "red")

    def _on_ToolStarted(self, event: ToolStarted, node: str) -> None:  # noqa: N802
        self._line(f"  ⚙ {node}: {_call_text(event.tool_name, event.arguments)}", "blue")

    def _on_ToolRetrying(self, event: ToolRetrying, node: str) -> None:  # noqa: N802
        self._line(
            f"  ↻ {event.tool_name} retrying (attempt {event.attempt}, in {event.backoff_ms} ms)",
            "yellow",
        )

    def _on_ToolCompleted(self, event: ToolCompleted, node: str) -> None:  # noqa: N802
        first = _first_line(event.content)
        if event.is_error:
            self._line(f"    ✗ {event.tool_name}: {_clip(first, 160)}", "red")
        else:
            self._line(f"    ✓ {event.tool_name}: {_clip(first, 160)}", "dim")

    def _on_FileChanged(self, event: FileChanged, node: str) -> None:  # noqa: N802
        self._line(f"    {event.record.op} {event.record.path}", "dim")

    def _on_NodeCompleted(self, event: NodeCompleted, node: str) -> None:  # noqa: N802
        handoff = event.handoff or {}
        where = f" → {handoff['uri']}" if handoff.get("uri") else ""
        self._line(f"✔ {node} completed{where}", "green")
        summary = _output_summary(event.output)
        if summary and event.node_id not in self._streamed:
            self._line(f"  {_clip(summary, 300)}", "dim")

    def _on_NodeErrored(self, event: NodeErrored, node: str) -> None:  # noqa: N802
        self._line(f"✖ {node} failed: {_clip(event.error, 300)}", "red")

    def _on_NodeRetrying(self, event: NodeRetrying, node: str) -> None:  # noqa: N802
        self._line(
            f"  ↻ {node}: {_clip(event.error, 160)}; retrying in {event.backoff_ms} ms",
            "yellow",
        )

    def _on_NodeFailed(self, event: NodeFailed, node: str) -> None:  # noqa: N802
        self._line(f"✖ {node} failed: {_clip(event.error, 300)}", "bold red")
        self._spent()

    def _on_NodeInterrupted(self, event: NodeInterrupted, node: str) -> None:  # noqa: N802
        self._line(f"⏸ {node} interrupted", "yellow")

    def _on_OutputRepairStarted(self, event: OutputRepairStarted, node: str) -> None:  # noqa: N802
        self._line(f"  {node}: repairing malformed output with {event.model}", "dim")

    def _on_OutputRepairFailed(self, event: OutputRepairFailed, node: str) -> None:  # noqa: N802
        self._line(f"  {node}: output repair failed: {event.reason}", "yellow")

    def _on_ActionIgnored(self, event: ActionIgnored, node: str) -> None:  # noqa: N802
        self._line(f"  ignored action: {event.reason}", "yellow")

    def _on_Finished(self, event: Finished, node: str) -> None:  # noqa: N802
        for suggestion in event.report.suggestions:
            where = f" ({suggestion.target_node_id})" if suggestion.target_node_id else ""
            self._line(
                f"  suggestion [{suggestion.category}]{where}: {suggestion.title}"
                f" — {_clip(suggestion.recommendation, 200)}",
                "cyan",
            )
        self._line("■ run completed", "bold green")
        self._spent()

    def _on_UsageReported(self, event: UsageReported, node: str) -> None:  # noqa: N802
        self.usage = _add_usage(self.usage, event.usage)

    def _spent(self) -> None:
        if self.usage is not None:
            self._line(f"  spent {usage_text(self.usage)}", "dim")

    def _on_Aborted(self, event: Aborted, node: str) -> None:  # noqa: N802
        self._line("■ run stopped", "bold yellow")
        self._spent()

    def _on_Error(self, event: Error, node: str) -> None:  # noqa: N802
        style = "yellow" if event.message.startswith("ignored ") else "bold red"
        self._line(f"  {event.message}", style)

    def flush(self) -> None:
        """End a token stream that is still open, so what follows starts on its own line."""
        self._close_stream()


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _output_summary(output: Any) -> str:
    if isinstance(output, dict) and isinstance(output.get("summary"), str):
        return str(output["summary"])
    if output is None:
        return ""
    return json.dumps(output, ensure_ascii=False, separators=(", ", ": "))


async def terminal_prompt(message: str) -> str | None:
    """Ask at the terminal; None when standard input is closed."""
    try:
        return await asyncio.to_thread(input, message)
    except EOFError:
        return None


class Follower:
    """Follows one run until it ends or waits for a person it will not ask."""

    def __init__(
        self,
        runs: Runs,
        run_id: str,
        console: Console,
        *,
        interactive: bool,
        auto_approve: bool = False,
        live: LiveSource | None = None,
        prompt: Prompter = terminal_prompt,
        poll_interval: float = POLL_INTERVAL_S,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.runs = runs
        self.run_id = run_id
        self.console = console
        self.interactive = interactive
        self.auto_approve = auto_approve
        self.live = live
        self.prompt = prompt
        self.poll_interval = poll_interval
        self.renderer = Renderer(console)
        self.renderer.labels.update(labels or {})
        self._seq = 0
        self._started: set[str] = set()
        self._held: list[dict[str, Any]] = []
        self._opened: dict[str, Any] = {}
        self._answered: set[str] = set()
        self._live_queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def run(self) -> FollowOutcome:
        """Follow until the run ends (its status) or pauses for someone not at this terminal."""
        live_task = asyncio.create_task(self._pump_live()) if self.live else None
        try:
            return await self._follow()
        finally:
            if live_task is not None:
                live_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await live_task
            self.renderer.flush()

    async def _pump_live(self) -> None:
        assert self.live is not None
        try:
            async for event in self.live(self.run_id):
                self._live_queue.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the live view is optional; durable events go on
            logger.info("live channel unavailable for %s: %s", self.run_id, exc)

    async def _follow(self) -> FollowOutcome:
        started = time.monotonic()
        hinted = False
        while True:
            state = await self._poll()
            if state is None:
                if not hinted and time.monotonic() - started > NO_WORKER_HINT_AFTER_S:
                    hinted = True
                    self.console.print(
                        Text(
                            f"  waiting for a worker on task queue {self.runs.task_queue!r}; "
                            "start one with `openflow worker`",
                            style="yellow",
                        ),
                        soft_wrap=True,
                    )
                await asyncio.sleep(self.poll_interval)
                continue
            status = state.status
            if status in TERMINAL_STATUSES:
                await self._drain_events()
                return FollowOutcome(status=status)
            pauses = [p for p in find_pauses(state, self._opened) if p.key not in self._answered]
            if pauses:
                if not self.interactive:
                    return FollowOutcome(status=status, pauses=pauses)
                for pause in pauses:
                    answered = await self._ask(pause)
                    if answered is None:
                        return FollowOutcome(status=status, pauses=pauses)
                    if answered:
                        self._answered.add(pause.key)
                continue
            await asyncio.sleep(self.poll_interval)

    async def _poll(self) -> WorkflowRunState | None:
        """Render what happened since the last poll; the state, or None when it cannot answer.

        The state is read before the events, so every pause it shows has its opening event
        rendered and tracked by the time the pause is keyed.
        """
        try:
            state = await asyncio.wait_for(self.runs.state(self.run_id), QUERY_TIMEOUT_S)
            await self._drain_events()
        except (WorkflowQueryFailedError, RPCError, TimeoutError) as exc:
            # The first workflow task may not have run yet (no worker yet, or a slow start);
            # a closed execution still answers, so only a live run lands here.
            logger.debug("run %s cannot answer yet: %s", self.run_id, exc)
            self._drain_live()
            return None
        self._drain_live()
        return state

    async def _drain_events(self) -> None:
        events = await self.runs.events(self.run_id, after=self._seq)
        self._render(events)

    def _drain_live(self) -> None:
        """Show live events; those of a node whose start is not shown yet wait for it."""
        while not self._live_queue.empty():
            event = self._live_queue.get_nowait()
            if str(event.get("node_id") or "") in self._started:
                self.renderer.live(event)
            else:
                self._held.append(event)

    def _release_held(self, node_id: str) -> None:
        held, self._held = self._held, []
        for event in held:
            if str(event.get("node_id") or "") == node_id:
                self.renderer.live(event)
            else:
                self._held.append(event)

    def _render(self, events: Iterable[RunEvent]) -> None:
        for event in events:
            if event.seq <= self._seq:
                continue
            self._seq = event.seq
            self._track(event)
            self._drain_live()
            self.renderer.event(event)
            if isinstance(event, NodeStarted):
                self._started.add(event.node_id)
                self._release_held(event.node_id)

    def _track(self, event: RunEvent) -> None:
        if isinstance(event, NodeAwaitingInput):
            self._opened[f"input:{event.node_id}"] = event.seq
            self._opened[f"question:{event.node_id}"] = event.context
        elif isinstance(event, NodeErrored | NodeInterrupted):
            self._opened[f"retry:{event.node_id}"] = event.seq

    async def _ask(self, pause: Pause) -> bool | None:
        """Ask about one pause and act on it: True when done, False to ask again, None to leave."""
        self.renderer.flush()
        if pause.kind == "input":
            text = await self.prompt(f"  answer for {pause.label}> ")
            if text is None:
                return None
            if not text.strip():
                self.console.print("  (an empty answer is not sent; type your answer)")
                return False
            action = c.Action(kind="input", node_id=pause.node_id, text=text)
        elif pause.kind == "approval":
            if self.auto_approve:
                self.console.print(f"  {pause.approval_id}: approved automatically", style="green")
                answer: str | None = "y"
            else:
                answer = await self._choice(
                    f"  allow {pause.approval_id}? [y/n] ", {"y", "yes", "n", "no"}
                )
            if answer is None:
                return None
            allow = answer.startswith("y")
            reason = None
            if not allow:
                reason = (await self.prompt("  reason (optional)> ") or "").strip() or None
            action = c.Action(
                kind="approval", approval_id=pause.approval_id, allow=allow, reason=reason
            )
        elif budget_pause(pause):
            self.console.print(Text(f"  {pause.detail}", style="yellow"), soft_wrap=True)
            budget = await _ask_budget(self, pause)
            if budget is None:
                return None
            action = budget
        else:
            answer = await self._choice(
                f"  {pause.label}: [r]etry, [s]top the run, or [l]eave it paused and exit? ",
                {"r", "s", "l"},
            )
            if answer is None or answer == "l":
                return None
            if answer == "s":
                await self.runs.stop(self.run_id)
                return True
            message = (await self.prompt("  message for the retry (optional)> ") or "").strip()
            action = c.Action(kind="retry", node_id=pause.node_id, message=message or None)
        try:
            await self.runs.act(self.run_id, action)
        except ActionRejected as exc:
            self.console.print(Text(f"  rejected: {exc}", style="red"), soft_wrap=True)
            return False
        return True

    async def _choice(self, message: str, allowed: set[str]) -> str | None:
        while True:
            answer = await self.prompt(message)
            if answer is None:
                return None
            answer = answer.strip().lower()
            if answer in allowed:
                return answer


def file_live_source(home: Path) -> LiveSource:
    """The live channel of runs: files under `home` (same machine as the worker), or the
    cluster database when OPENFLOW_DATABASE_URL is set (any machine)."""
    from openflow.backends import open_backends

    channel = open_backends(home).live

    def subscribe(run_id: str) -> AsyncIterator[dict[str, Any]]:
        return channel.subscribe(run_id, after=0)

    return subscribe


__all__ = [
    "FollowOutcome",
    "Follower",
    "Pause",
    "Renderer",
    "answer_hint",
    "call_summary",
    "describe_pause",
    "file_live_source",
    "find_pauses",
    "shell_quote",
    "terminal_prompt",
]
