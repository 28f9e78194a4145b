"""A run's record as its queries read it: this execution's events, the state projection folded
from them lazily (steps record events, queries project them), and what a continued or resumed
execution takes along.

A paused run may wait for months in a worker's cache, so the journal holds its events as their
JSON bytes (a fifth of what the event objects take) and decodes them only when a query or a
notice needs the projection or the events themselves; while the run waits for a person, as
one compressed block, and the projection a query built as compressed bytes too (`pack`). The
events a step records wait as objects until something reads them or a pause packs them (at
most `FRESH_EVENTS`): most runs finish without either, and never encode them.
"""

from __future__ import annotations

import json
import pickle
import zlib
from collections.abc import Iterable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import TypeAdapter

    from openflow import contracts as c
    from openflow.engine.events import RunEvent
    from openflow.engine.projection import WorkflowRunState, apply_event, initial_state, trim_state

_EVENT: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
#: At most this many events a step recorded wait as objects before they are encoded.
FRESH_EVENTS = 64
#: While its events are this small (as JSON), a continued execution carries them along.
CARRY_EVENTS_BYTES = 256 * 1024

#: What a run's state starts from before its first event: the workflow's id, the run's id,
#: the node ids, plan mode's evidence source (`initial_state`'s arguments).
_Origin = tuple[str, str, tuple[str, ...], str | None]


class Journal:
    """The events of one execution, and the projection they fold into."""

    def __init__(self) -> None:
        #: Each event as its JSON (`model_dump_json`), in the order recorded (`_events`).
        self._encoded: list[bytes] = []
        #: The events recorded after `_encoded`'s, not yet encoded: most runs end without a
        #: query or a pause ever reading them, and a few held as objects cost little.
        self._fresh: list[RunEvent] = []
        #: The events' JSON, one a line, compressed, while the run waits (`pack`).
        self._packed: bytes | None = None
        self._count = 0
        self.first_seq = 1
        self.previous_run_id: str | None = None
        self._state: WorkflowRunState | None = None
        #: The projection, pickled and compressed while the run waits (it never leaves memory).
        self._state_packed: bytes | None = None
        #: What the state starts from until a query first needs it: the carried state's JSON,
        #: or the run's origin (most runs are never queried while a worker holds them).
        self._seed: dict[str, Any] | _Origin | None = None
        self._projected = 0

    def begin(self, inp: c.RunInput) -> None:
        """Start from what the execution before carried (events, state), or from nothing."""
        events = [_EVENT.validate_python(data) for data in inp.events]
        self._encoded, self._fresh, self._packed, self._count = [], [], None, 0
        self.record(events)
        self.first_seq = events[0].seq if events else inp.first_seq
        self.previous_run_id = inp.previous_run_id
        self._state, self._state_packed = None, None
        if inp.state is not None:
            # The carried state already reflects the carried events.
            self._seed = inp.state
            self._projected = len(events)
            return
        plan_mode = inp.workflow.settings.plan_mode
        self._seed = (
            inp.workflow.id,
            inp.run_id,
            tuple(n.id for n in inp.workflow.nodes),
            plan_mode.evidence_source_node_id if plan_mode else None,
        )
        self._projected = 0

    def record(self, events: Iterable[RunEvent]) -> None:
        """Add events a step emitted. They are encoded when something reads them (a query, a
        notice, a pause) or once `FRESH_EVENTS` of them wait: most runs end before either."""
        before = len(self._fresh)
        self._fresh.extend(events)
        self._count += len(self._fresh) - before
        if len(self._fresh) >= FRESH_EVENTS:
            self._flush()

    def _flush(self) -> None:
        """Encode the fresh events after the others (a packed journal opened for them)."""
        if self._fresh:
            encoded = self._stored()
            self._packed = None
            encoded.extend(e.model_dump_json().encode() for e in self._fresh)
            self._encoded, self._fresh = encoded, []

    def _events(self) -> list[bytes]:
        """Each event's JSON (a packed journal stays packed: a query reads, a step records)."""
        self._flush()
        return self._stored()

    def _stored(self) -> list[bytes]:
        """The encoded events' JSON."""
        if self._packed is None:
            return self._encoded
        # An event's JSON has no raw line break (`model_dump_json` escapes them).
        return zlib.decompress(self._packed).split(b"\n")

    def pack(self) -> None:
        """Hold the events as one compressed block until the next step records more, and the
        projection (once a query built it) as compressed bytes until it is next needed."""
        self._flush()
        if self._packed is None and self._encoded:
            self._packed = zlib.compress(b"\n".join(self._encoded), 1)
            self._encoded = []
        if self._state is not None:
            data = pickle.dumps(self._state, protocol=pickle.HIGHEST_PROTOCOL)
            self._state_packed, self._state = zlib.compress(data, 1), None

    @property
    def events(self) -> list[RunEvent]:
        """This execution's events, decoded."""
        return [_EVENT.validate_json(data) for data in self._events()]

    def _initial(self) -> WorkflowRunState:
        seed = self._seed
        assert seed is not None
        self._seed = None
        if isinstance(seed, dict):
            return WorkflowRunState.model_validate(seed)
        return initial_state(*seed)

    def projection(self) -> WorkflowRunState:
        """The state projection, with every event recorded so far folded in."""
        if self._state is None and self._state_packed is not None:
            state = pickle.loads(zlib.decompress(self._state_packed))
            assert isinstance(state, WorkflowRunState)
            self._state, self._state_packed = state, None
        if self._state is None:
            self._state = self._initial()
        if self._projected < self._count:
            for data in self._events()[self._projected :]:
                self._state = apply_event(self._state, _EVENT.validate_json(data))
            self._projected = self._count
        return self._state

    def after(self, seq: int) -> list[dict[str, Any]]:
        """The `events` query's answer: the events after `seq`, as JSON."""
        # Seqs rise one by one from the first event's, so the events after `seq` are a tail.
        dumped = (json.loads(data) for data in reversed(self._events()))
        tail = []
        for event in dumped:
            if event["seq"] <= seq:
                break
            tail.append(event)
        tail.reverse()
        return tail

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
        dumped = [json.loads(data) for data in self._events()]
        size = sum(len(json.dumps(e, separators=(",", ":"))) for e in dumped)
        return dumped if size <= CARRY_EVENTS_BYTES else []

    def carried_state(self) -> dict[str, Any]:
        """The projection a continued or resumed execution starts from (its lists trimmed)."""
        return trim_state(self.projection()).model_dump(mode="json", by_alias=True)


__all__ = ["CARRY_EVENTS_BYTES", "Journal"]
