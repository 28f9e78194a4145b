"""A run's record as its queries read it: this execution's events, the state projection folded
from them lazily (steps record events, queries project them), and what a continued or resumed
execution takes along."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import TypeAdapter

    from openflow import contracts as c
    from openflow.engine.events import RunEvent
    from openflow.engine.projection import WorkflowRunState, apply_event, initial_state, trim_state

_EVENT: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
#: While its events are this small (as JSON), a continued execution carries them along.
CARRY_EVENTS_BYTES = 256 * 1024


class Journal:
    """The events of one execution, and the projection they fold into."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self.first_seq = 1
        self.previous_run_id: str | None = None
        self._state: WorkflowRunState | None = None
        #: What the state starts from until a query first needs it: the carried state's JSON,
        #: or the run's input (most runs are never queried while a worker holds them).
        self._seed: dict[str, Any] | c.RunInput | None = None
        self._projected = 0

    def begin(self, inp: c.RunInput) -> None:
        """Start from what the execution before carried (events, state), or from nothing."""
        self.events = [_EVENT.validate_python(data) for data in inp.events]
        self.first_seq = self.events[0].seq if self.events else inp.first_seq
        self.previous_run_id = inp.previous_run_id
        self._state = None
        if inp.state is not None:
            # The carried state already reflects the carried events.
            self._seed = inp.state
            self._projected = len(self.events)
            return
        self._seed = inp
        self._projected = 0

    def _initial(self) -> WorkflowRunState:
        seed = self._seed
        assert seed is not None
        self._seed = None
        if isinstance(seed, dict):
            return WorkflowRunState.model_validate(seed)
        plan_mode = seed.workflow.settings.plan_mode
        return initial_state(
            seed.workflow.id,
            seed.run_id,
            [n.id for n in seed.workflow.nodes],
            plan_mode.evidence_source_node_id if plan_mode else None,
        )

    def projection(self) -> WorkflowRunState:
        """The state projection, with every event recorded so far folded in."""
        if self._state is None:
            self._state = self._initial()
        while self._projected < len(self.events):
            self._state = apply_event(self._state, self.events[self._projected])
            self._projected += 1
        return self._state

    def after(self, seq: int) -> list[dict[str, Any]]:
        """The `events` query's answer: the events after `seq`, as JSON."""
        return [e.model_dump(mode="json") for e in self.events if e.seq > seq]

    def origin(self) -> c.EventsOrigin:
        """Where this execution's events start, and the execution that holds the earlier ones."""
        return c.EventsOrigin(first_seq=self.first_seq, previous_run_id=self.previous_run_id)

    def carried_events(self) -> list[dict[str, Any]]:
        """The events a continued or resumed execution takes along, while they are small.

        Then a plain `events` query still answers from seq 1; past `CARRY_EVENTS_BYTES` they
        stay with this execution, and `events_origin` leads readers back to them.
        """
        if self.previous_run_id is not None and self.first_seq > 1:
            return []
        dumped = [e.model_dump(mode="json") for e in self.events]
        size = sum(len(json.dumps(e, separators=(",", ":"))) for e in dumped)
        return dumped if size <= CARRY_EVENTS_BYTES else []

    def carried_state(self) -> dict[str, Any]:
        """The projection a continued or resumed execution starts from (its lists trimmed)."""
        return trim_state(self.projection()).model_dump(mode="json", by_alias=True)


__all__ = ["CARRY_EVENTS_BYTES", "Journal"]
