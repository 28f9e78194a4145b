"""A test host for the pure engine: a scripted model, a fake tool port, people and a clock.

Like OpenFlow's MockAiStack and headless runner (spec 14.1): each node's model calls take the
node's scripted turns in call order (an exhausted script fails with "scripted model exhausted"),
tool batches answer from a table, scripted people answer pauses, and virtual time jumps to the
next timer when nothing else is running. `Driver.run` goes to completion or to a pause nobody
scripted an answer for and returns everything a test wants to look at.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openflow.engine import advance as engine
from openflow.engine.events import RunEvent
from openflow.engine.policy import (
    HARNESS_ASK_QUESTION,
    HARNESS_REQUEST_INPUT,
    HARNESS_SUBMIT,
    SEAL_TOOL,
)
from openflow.engine.request import ModelReply, ProviderFailure, RawToolCall
from openflow.engine.spec import Workflow
from openflow.engine.state import (
    ApprovalDecided,
    CallModel,
    CancelWork,
    Fact,
    HandoffStored,
    InputGiven,
    Intent,
    ModelFailed,
    ModelReplied,
    Plan,
    ReadReceipt,
    ReceiptRead,
    RetryRequested,
    RunSnapshot,
    RunTools,
    SleepUntil,
    TimerFired,
    ToolResultSummary,
    ToolsFinished,
    WriteHandoff,
)
from openflow.engine.transcript import TranscriptItem

TOOL_NAMES = ("apply_patch", "bash", "edit", "find", "ls", "read", "search", "write")
EXHAUSTED = "scripted model exhausted"
SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}

Turn = ModelReply | ProviderFailure
ToolAnswer = Callable[[RunTools], Fact]


# --- scripted turns (MockAiStack's vocabulary) ------------------------------------------


def call(name: str, args: dict[str, Any] | None = None, id: str = "") -> RawToolCall:
    """One tool call as a wire gives it; an empty id is filled in uniquely when played."""
    arguments = {} if args is None else args
    return RawToolCall(id=id, name=name, arguments=arguments, arguments_raw=json.dumps(arguments))


def tools(*calls: RawToolCall, say: str = "") -> ModelReply:
    return ModelReply(wire="scripted", model="test-model", text=say, tool_calls=calls)


def submit(output: Any, message: str = "") -> ModelReply:
    return tools(call(HARNESS_SUBMIT, {"output": output, "assistant_message": message}))


def ok_summary(summary: str = "ok", message: str = "") -> ModelReply:
    return submit({"summary": summary}, message)


def submit_raw(raw: str) -> ModelReply:
    bad = RawToolCall(id="", name=HARNESS_SUBMIT, arguments=None, arguments_raw=raw)
    return ModelReply(wire="scripted", model="test-model", tool_calls=(bad,))


def message(text: str, wire: str = "scripted") -> ModelReply:
    return ModelReply(wire=wire, model="test-model", text=text)  # type: ignore[arg-type]


def ask(text: str) -> ModelReply:
    return tools(call(HARNESS_REQUEST_INPUT, {"assistant_message": text}))


def question(args: dict[str, Any]) -> ModelReply:
    return tools(call(HARNESS_ASK_QUESTION, args))


def tool_read(path: str = "README.md", id: str = "") -> ModelReply:
    return tools(call("read", {"path": path}, id))


def tool_bash(command: str = "make test", id: str = "") -> ModelReply:
    return tools(call("bash", {"command": command}, id))


def tool_write(path: str = "notes.txt", content: str | None = "x", id: str = "") -> ModelReply:
    args: dict[str, Any] = {"path": path}
    if content is not None:
        args["content"] = content
    return tools(call("write", args, id))


def seal(id: str = "") -> ModelReply:
    return tools(call(SEAL_TOOL, {"markdown": "# Plan"}, id))


def mixed() -> ModelReply:
    return tools(call(HARNESS_SUBMIT, {"output": {"summary": "x"}}), call("write", {"path": "a"}))


def transient(text: str = "rate limited", retry_after_ms: int | None = None) -> ProviderFailure:
    return ProviderFailure(kind="transient", message=text, retry_after_ms=retry_after_ms)


def permanent(text: str = "bad key") -> ProviderFailure:
    return ProviderFailure(kind="permanent", message=text)


def failed(text: str = "model refused") -> ProviderFailure:
    return ProviderFailure(kind="failed", message=text)


def empty() -> ProviderFailure:
    return ProviderFailure(
        kind="failed", message="provider returned neither tool calls nor recoverable output"
    )


def truncated(*tool_names: str) -> ProviderFailure:
    return ProviderFailure(
        kind="truncated", message="max_tokens reached", partial_tool_names=tool_names
    )


def interrupted() -> ProviderFailure:
    return ProviderFailure(kind="interrupted", message="cancelled")


# --- workflows (spec 14.1 fixtures) -----------------------------------------------------


def agent_node(node_id: str, label: str | None = None, **agent: Any) -> dict[str, Any]:
    """OpenFlow's `agent_node`: test-model, json handoff, `{summary}` schema, autonomous."""
    config: dict[str, Any] = {
        "system_prompt": f"You are {node_id}.",
        "task_prompt": f"Do {node_id}.",
        "model": "test-model",
        "output_schema": SUMMARY_SCHEMA,
        "handoff": {"format": "json"},
    }
    config.update(agent)
    return {
        "id": node_id,
        "label": label or node_id.title(),
        "kind": "agent",
        "position": {"x": 0, "y": 0},
        "agent": config,
    }


def workflow(
    nodes: Sequence[dict[str, Any]],
    edges: Iterable[tuple[str, str]] = (),
    **settings: Any,
) -> Workflow:
    return Workflow.model_validate(
        {
            "id": "wf-test",
            "name": "Test",
            "nodes": list(nodes),
            "edges": [{"id": f"{a}->{b}", "from": a, "to": b} for a, b in edges],
            "settings": settings,
        }
    )


def single_agent_workflow(**agent: Any) -> Workflow:
    return workflow([agent_node("first", **agent)])


def linear_workflow(**settings: Any) -> Workflow:
    ids = ["step-a", "step-b", "step-c"]
    edges = [("step-a", "step-b"), ("step-b", "step-c")]
    return workflow([agent_node(n) for n in ids], edges, **settings)


def branch_join_workflow(**settings: Any) -> Workflow:
    ids = ["idea", "plan", "risk", "join"]
    edges = [("idea", "plan"), ("idea", "risk"), ("plan", "join"), ("risk", "join")]
    return workflow([agent_node(n) for n in ids], edges, **settings)


# --- the fakes --------------------------------------------------------------------------


@dataclass
class ModelCall:
    """One model call the engine asked for, with the node's transcript as the activity sees it."""

    intent: CallModel
    transcript: list[TranscriptItem]

    @property
    def node_id(self) -> str:
        return self.intent.request.node_id


class FakeModel:
    """Plays each node's scripted turns in call order, keyed by the request's node id."""

    def __init__(self, script: dict[str, Sequence[Turn]] | None = None) -> None:
        self.turns = {node: deque(turns) for node, turns in (script or {}).items()}
        self.calls: list[ModelCall] = []
        #: The post-run review's call (spec 12), kept apart: like OpenFlow's MockAiStack, it
        #: takes turns scripted for `__post_run_review` and otherwise fails, which only sets
        #: the report's `suggestions_error`.
        self.reviews: list[ModelCall] = []
        self._ids = itertools.count(1)

    def play(self, intent: CallModel, snapshot: RunSnapshot) -> Fact:
        node_id = intent.request.node_id
        ns = snapshot.nodes.get(intent.node_id)
        transcript = (
            list(ns.conversation.transcript) if ns is not None and intent.purpose == "node" else []
        )
        calls = self.reviews if intent.purpose == "review" else self.calls
        calls.append(ModelCall(intent, transcript))
        queue = self.turns.get(node_id)
        turn: Turn = queue.popleft() if queue else ProviderFailure(kind="failed", message=EXHAUSTED)
        if isinstance(turn, ProviderFailure):
            return ModelFailed(call_id=intent.call_id, node_id=intent.node_id, failure=turn)
        numbered = tuple(
            c if c.id else c.model_copy(update={"id": f"call-{node_id}-{next(self._ids)}"})
            for c in turn.tool_calls
        )
        reply = turn.model_copy(update={"tool_calls": numbered, "model": intent.request.model})
        return ModelReplied(call_id=intent.call_id, node_id=intent.node_id, reply=reply)

    def add(self, node_id: str, *turns: Turn) -> None:
        """Script more turns for a node."""
        self.turns.setdefault(node_id, deque()).extend(turns)

    def requests(self, node_id: str) -> list[ModelCall]:
        return [c for c in self.calls if c.node_id == node_id]


def default_tool_answer(batch: RunTools) -> Fact:
    """Every call succeeds; the seal tool answers like OpenFlow's with an artifact id."""
    results = []
    for c in batch.calls:
        if c.name == SEAL_TOOL:
            results.append(
                ToolResultSummary(
                    tool_call_id=c.id,
                    tool_name=c.name,
                    content="artifact:art-1\nsha256:abc\nbytes:6",
                    artifact_ids=("art-1",),
                )
            )
        else:
            results.append(
                ToolResultSummary(tool_call_id=c.id, tool_name=c.name, content=f"ok: {c.name}")
            )
    return ToolsFinished(batch_id=batch.batch_id, results=tuple(results))


@dataclass
class Trigger:
    """A fact fed once, before the next step, as soon as `when` holds."""

    when: Callable[[Driver], bool]
    fact: Fact
    fired: bool = False


@dataclass
class Driver:
    """Runs a workflow on the engine with fakes around it; see the module docstring."""

    wf: Workflow
    script: dict[str, Sequence[Turn]] = field(default_factory=dict)
    tool_answer: ToolAnswer = default_tool_answer
    inputs: dict[str, list[str]] = field(default_factory=dict)
    approvals: list[tuple[str, bool, str | None]] = field(default_factory=list)
    retries: dict[str, list[str | None]] = field(default_factory=dict)
    entrypoint: str = "hello"
    tool_names: Sequence[str] | None = TOOL_NAMES
    project_root: str | None = None
    #: What lost batches left in the run store, by batch id (absent: no receipt).
    receipts: dict[str, ToolsFinished] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.model = FakeModel(self.script)
        self.now = 0
        self.plan: Plan | None = None
        self.events: list[RunEvent] = []
        self.pending: list[Intent] = []
        self.timers: dict[str, int] = {}
        self.batches: list[RunTools] = []
        self.plans: list[Plan] = []
        self.triggers: list[Trigger] = []
        self.held: set[str] = set()

    # --- state --------------------------------------------------------------------------

    @property
    def snapshot(self) -> RunSnapshot:
        assert self.plan is not None, "start the driver first"
        return self.plan.snapshot

    def node(self, node_id: str) -> Any:
        return self.snapshot.nodes[node_id]

    def event_types(self, node_id: str | None = None) -> list[str]:
        return [
            e.type for e in self.events if node_id is None or getattr(e, "node_id", None) == node_id
        ]

    def of_type(self, type_: str) -> list[Any]:
        return [e for e in self.events if e.type == type_]

    # --- driving ------------------------------------------------------------------------

    def start(self) -> Plan:
        plan = engine.start(
            self.wf,
            "run-test",
            self.now,
            entrypoint_text=self.entrypoint,
            project_root=self.project_root,
            tool_names=self.tool_names,
        )
        self.take(plan)
        return plan

    def take(self, plan: Plan) -> None:
        self.plan = plan
        self.plans.append(plan)
        self.events.extend(plan.events)
        for intent in plan.intents:
            if isinstance(intent, CancelWork):
                ids = set(intent.ids)
                self.pending = [i for i in self.pending if _work_id(i) not in ids]
                if intent.timers is None:
                    self.timers.clear()
                for key in intent.timers or ():
                    self.timers.pop(key, None)
            elif isinstance(intent, SleepUntil):
                self.timers[intent.node_id] = intent.wake_at_ms
            else:
                self.pending.append(intent)

    def feed(self, *facts: Fact) -> Plan:
        """Advance the engine with these facts now."""
        plan = engine.advance(self.snapshot, list(facts), self.now)
        self.take(plan)
        return plan

    def resume(self, snapshot: RunSnapshot | None = None) -> Plan:
        """Resume a run from a snapshot (this run's, by default); its in-flight work is lost."""
        self.pending = []
        self.timers.clear()
        plan = engine.resume(snapshot or self.snapshot, self.now)
        self.take(plan)
        return plan

    def when(self, predicate: Callable[[Driver], bool], fact: Fact) -> None:
        self.triggers.append(Trigger(predicate, fact))

    def hold(self, work_id_prefix: str) -> None:
        """Keep matching work (by call or batch id prefix) in flight until `release`."""
        self.held.add(work_id_prefix)

    def release(self, work_id_prefix: str) -> None:
        self.held.discard(work_id_prefix)

    def step(self) -> bool:
        """Settle one piece of work, fire one timer or take one scripted action."""
        assert self.plan is not None
        for trigger in self.triggers:
            if not trigger.fired and trigger.when(self):
                trigger.fired = True
                self.feed(trigger.fact)
                return True
        if self.plan.done:
            return False
        runnable = [i for i in self.pending if not self._held(i)]
        if runnable:
            intent = runnable[0]
            self.pending.remove(intent)
            self.feed(self.settle(intent))
            return True
        if self.timers:
            node_id, wake = min(self.timers.items(), key=lambda kv: (kv[1], kv[0]))
            del self.timers[node_id]
            self.now = max(self.now, wake)
            self.feed(TimerFired(node_id=node_id))
            return True
        action = self.next_action()
        if action is not None:
            self.feed(action)
            return True
        return False

    def run(self, max_steps: int = 2000) -> Driver:
        if self.plan is None:
            self.start()
        for _ in range(max_steps):
            if not self.step():
                return self
        raise AssertionError(f"run did not settle in {max_steps} steps")

    def settle(self, intent: Intent) -> Fact:
        if isinstance(intent, CallModel):
            return self.model.play(intent, self.snapshot)
        if isinstance(intent, RunTools):
            self.batches.append(intent)
            return self.tool_answer(intent)
        if isinstance(intent, ReadReceipt):
            found = self.receipts.get(intent.batch_id)
            return ReceiptRead(batch_id=intent.batch_id, finished=found, reason="no receipt")
        if isinstance(intent, WriteHandoff):
            ext = "md" if intent.format == "markdown" else "json"
            uri = f"run://handoffs/{intent.node_id}/HANDOFF.{ext}"
            return HandoffStored(
                node_id=intent.node_id, manifest={"format": intent.format, "uri": uri}
            )
        raise AssertionError(f"unexpected intent {intent!r}")

    def next_action(self) -> Fact | None:
        awaiting = self.plan.awaiting if self.plan is not None else None
        if awaiting is None:
            return None
        for node_id in awaiting.inputs:
            queue = self.inputs.get(node_id)
            if queue:
                return InputGiven(node_id=node_id, text=queue.pop(0))
        for approval_id in awaiting.approvals:
            for i, (wanted, allow, reason) in enumerate(self.approvals):
                if wanted in ("", approval_id):
                    self.approvals.pop(i)
                    return ApprovalDecided(approval_id=approval_id, allow=allow, reason=reason)
        for node_id in awaiting.retryables:
            queue = self.retries.get(node_id)
            if queue:
                return RetryRequested(node_id=node_id, message=queue.pop(0))
        return None

    def _held(self, intent: Intent) -> bool:
        work = _work_id(intent)
        return any(work.startswith(prefix) for prefix in self.held)


def _work_id(intent: Intent) -> str:
    if isinstance(intent, CallModel):
        return intent.call_id
    if isinstance(intent, RunTools | ReadReceipt):
        return intent.batch_id
    if isinstance(intent, WriteHandoff):
        return f"handoff:{intent.node_id}"
    return ""


def run(wf: Workflow, script: dict[str, Sequence[Turn]] | None = None, **options: Any) -> Driver:
    """Drive `wf` with `script` to completion or an unanswered pause."""
    return Driver(wf, script or {}, **options).run()
