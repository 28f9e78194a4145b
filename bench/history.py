"""What a run's history holds: its bytes by event type, by activity input and result, by field.

    python -m bench.history [--runs N] [--batch M]

runs `bench.scale.dag()` (a root and two parallel children, scripted) and bare Temporal's
same-shaped workflow on one embedded server, then prints each one's history bytes by event
type, the payload bytes of each activity type's inputs and results, and those payloads by
top-level field. `breakdown(history)` is what tests measure a real history with.

With `--batch M`, each side also runs M at once (as `bench.scale`'s throughput batch does)
and the quiet runs and the batch's are set side by side, per run: bytes, workflow tasks,
events, and the bytes of each event type.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

#: Event attributes whose payloads are an activity's input or result, and what they are.
_ACTIVITY = {
    "activity_task_scheduled_event_attributes": "input",
    "activity_task_completed_event_attributes": "result",
}


@dataclass
class Breakdown:
    """One history's bytes: whole events by type, and payloads by where they travel."""

    total: int = 0
    events: Counter[str] = field(default_factory=Counter)
    #: Payload bytes by `<activity type> input|result`, `start input`, `signal <name>`, ...
    payloads: Counter[str] = field(default_factory=Counter)
    #: Payload bytes by `<where> .<top-level field>` (a JSON object's fields).
    fields: Counter[str] = field(default_factory=Counter)
    #: Each activity input and result as it travelled: (where, event id, bytes, JSON value);
    #: a model turn's input with its call's id when that travelled as its activity id.
    items: list[tuple[str, int, int, Any]] = field(default_factory=list)
    #: ACTIVITY_TASK_SCHEDULED bytes by part (`input data` the payloads' data alone).
    scheduled: Counter[str] = field(default_factory=Counter)

    def of(self, where: str) -> list[tuple[int, int, Any]]:
        """The payloads travelling at `where` (e.g. `model_turn input`): (event id, bytes, value)."""
        return [(eid, size, value) for w, eid, size, value in self.items if w == where]


def _payloads(message: Message) -> Iterator[Payload]:
    """Every Payload inside a protobuf message, however deep."""
    for desc, value in message.ListFields():
        if desc.message_type is None:
            continue
        if desc.message_type.full_name == "temporal.api.common.v1.Payload":
            yield from ([value] if isinstance(value, Message) else value)
            continue
        if desc.message_type.GetOptions().map_entry:
            for entry in value.values():
                if isinstance(entry, Payload):
                    yield entry
                elif isinstance(entry, Message):
                    yield from _payloads(entry)
            continue
        for item in [value] if isinstance(value, Message) else value:
            yield from _payloads(item)


def _where(event: Any, attr: str, scheduled: dict[int, str]) -> str:
    inner = getattr(event, attr)
    if attr == "activity_task_scheduled_event_attributes":
        return f"{inner.activity_type.name} input"
    if attr == "activity_task_completed_event_attributes":
        return f"{scheduled.get(inner.scheduled_event_id, '?')} result"
    if attr == "workflow_execution_signaled_event_attributes":
        return f"signal {inner.signal_name}"
    names = {
        "workflow_execution_started_event_attributes": "start input",
        "workflow_execution_completed_event_attributes": "run result",
        "workflow_execution_continued_as_new_event_attributes": "continue-as-new input",
        "upsert_workflow_search_attributes_event_attributes": "search attributes",
        "workflow_properties_modified_event_attributes": "memo",
        "marker_recorded_event_attributes": "marker",
    }
    return names.get(attr, attr.removesuffix("_event_attributes"))


LOCAL_ACTIVITY_MARKER = "core_local_activity"


def _local_activity(event: Any) -> str | None:
    """The activity type a local activity's marker records, else None."""
    if not event.HasField("marker_recorded_event_attributes"):
        return None
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != LOCAL_ACTIVITY_MARKER or "data" not in marker.details:
        return None
    try:
        data = json.loads(marker.details["data"].payloads[0].data)
    except (IndexError, ValueError):
        return None
    return str(data.get("activity_type", "?")) if isinstance(data, dict) else None


def local_result(event: Any) -> Payload | None:
    """The result payload of a local activity's marker (None when it failed)."""
    details = event.marker_recorded_event_attributes.details
    if "result" not in details or not details["result"].payloads:
        return None
    return details["result"].payloads[0]


#: The parts of a scheduled activity's event that `_scheduled_parts` names.
_PARTS = {
    "header": "header",
    "retry_policy": "retry policy",
    "task_queue": "task queue",
    "activity_type": "activity type",
    "start_to_close_timeout": "timeouts",
    "heartbeat_timeout": "timeouts",
    "schedule_to_close_timeout": "timeouts",
    "schedule_to_start_timeout": "timeouts",
}


def _scheduled_parts(event: Any, size: int, into: Counter[str]) -> None:
    """A scheduled activity's bytes by part: its input's data, the input's framing (encoding
    metadata), its summary (user metadata), header, retry policy, timeouts, task queue."""
    attrs = event.activity_task_scheduled_event_attributes
    data = sum(len(p.data) for p in attrs.input.payloads)
    parts = Counter({"input data": data, "input framing": attrs.input.ByteSize() - data})
    parts["summary"] = event.user_metadata.ByteSize()
    for name, part in _PARTS.items():
        parts[part] += getattr(attrs, name).ByteSize()
    into.update(parts)
    into["event, ids and the rest"] += size - sum(parts.values())
    into["events"] += 1


def _with_call_id(event: Any, where: str, value: Any) -> Any:
    """A model turn's input with its call's id, which its activity id carries when the input
    leaves it out (`turn-activity-ids`)."""
    if where != "model_turn input" or not isinstance(value, dict) or "call_id" in value:
        return value
    from openflow.contracts import activity_call_id

    activity_id = event.activity_task_scheduled_event_attributes.activity_id
    return {"call_id": activity_call_id(activity_id), **value}


def breakdown(history: WorkflowHistory) -> Breakdown:
    """Measure a history: each event's bytes, and each payload by where it travels."""
    out = Breakdown()
    scheduled: dict[int, str] = {}
    for event in history.events:
        size = len(event.SerializeToString())
        out.total += size
        out.events[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")] += size
        attr = event.WhichOneof("attributes")
        if attr is None:
            continue
        if attr == "activity_task_scheduled_event_attributes":
            scheduled[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
            _scheduled_parts(event, size, out.scheduled)
        where = _where(event, attr, scheduled)
        local = _local_activity(event)
        result = local_result(event) if local is not None else None
        for payload in _payloads(getattr(event, attr)):
            n = len(payload.data)
            try:
                value = json.loads(payload.data) if payload.data else None
            except ValueError:
                value = None
            if local is not None:
                # A local activity's marker: its result, and what the SDK records of the call.
                where = f"{local} result" if payload == result else "local marker"
            out.payloads[where] += n
            if isinstance(value, dict):
                for key, item in value.items():
                    out.fields[f"{where} .{key}"] += len(
                        json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode()
                    )
            if attr in _ACTIVITY or where == f"{local} result":
                out.items.append((where, event.event_id, n, _with_call_id(event, where, value)))
    return out


def render(title: str, b: Breakdown, runs: int = 1, top: int = 40) -> str:
    """A breakdown as text, per run (`runs` histories summed into `b`)."""
    lines = [f"{title}: {b.total / runs:,.0f} bytes a run"]
    lines.append("  events by type:")
    for name, n in b.events.most_common():
        lines.append(f"    {n / runs:9,.0f}  {name}")
    lines.append("  payloads by where they travel:")
    for name, n in b.payloads.most_common():
        lines.append(f"    {n / runs:9,.0f}  {name}")
    events = b.scheduled.get("events", 0)
    if events:
        lines.append("  each ACTIVITY_TASK_SCHEDULED by part (bytes, mean):")
        for name, n in b.scheduled.most_common():
            if name != "events":
                lines.append(f"    {n / events:9,.0f}  {name}")
    lines.append("  payload fields (largest first):")
    for name, n in b.fields.most_common(top):
        lines.append(f"    {n / runs:9,.0f}  {name}")
    return "\n".join(lines)


def merge(parts: list[Breakdown]) -> Breakdown:
    out = Breakdown()
    for p in parts:
        out.total += p.total
        out.events.update(p.events)
        out.payloads.update(p.payloads)
        out.fields.update(p.fields)
        out.items += p.items
        out.scheduled.update(p.scheduled)
    return out


@dataclass
class Runs:
    """Several runs' histories: their breakdown summed, and each one's bytes and tasks."""

    summed: Breakdown
    sizes: list[int]
    #: Workflow tasks completed, a run.
    tasks: list[int]
    events: list[int]

    @classmethod
    def of(cls, histories: list[WorkflowHistory]) -> Runs:
        parts = [breakdown(h) for h in histories]
        completed = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        return cls(
            summed=merge(parts),
            sizes=[p.total for p in parts],
            tasks=[sum(1 for e in h.events if e.event_type == completed) for h in histories],
            events=[len(h.events) for h in histories],
        )

    def per_run(self) -> float:
        return self.summed.total / max(len(self.sizes), 1)


def _mean(values: list[int]) -> float:
    return sum(values) / max(len(values), 1)


def render_batch(side: str, quiet: Runs, batch: Runs) -> str:
    """One side's quiet runs and loaded batch, per run, side by side."""
    sizes = sorted(batch.sizes)
    lines = [
        f"{side}: quiet ({len(quiet.sizes)} runs) against a batch of {len(batch.sizes)}, a run",
        f"    {quiet.per_run():9,.0f} {batch.per_run():9,.0f}  bytes "
        f"(batch min {sizes[0]:,}, median {sizes[len(sizes) // 2]:,}, max {sizes[-1]:,})",
        f"    {_mean(quiet.tasks):9.2f} {_mean(batch.tasks):9.2f}  workflow tasks",
        f"    {_mean(quiet.events):9.2f} {_mean(batch.events):9.2f}  events",
    ]
    names = sorted(
        set(quiet.summed.events) | set(batch.summed.events),
        key=lambda n: -batch.summed.events.get(n, 0),
    )
    for name in names:
        q = quiet.summed.events.get(name, 0) / max(len(quiet.sizes), 1)
        b = batch.summed.events.get(name, 0) / max(len(batch.sizes), 1)
        lines.append(f"    {q:9,.0f} {b:9,.0f}  {name} ({b - q:+,.0f})")
    return "\n".join(lines)


async def main_async(runs: int, batch: int = 0) -> None:
    from bench.scale import DAG_LAYERS, BareDag, embedded_bench, start_bare, start_ours, wait_all
    from bench.scale import dag as scale_dag
    from openflow.testing import write_scripted_settings

    async with embedded_bench("openflow-history-", before=None) as bench:
        client, home = bench.client, bench.home
        found: dict[str, Runs] = {}
        batches: dict[str, Runs] = {}
        for side in ("bare", "ours"):
            queue = f"history-{side}-{uuid.uuid4().hex[:8]}"
            async with bench.worker(side, queue):
                for n, into in ((runs, found), (batch, batches)):
                    if not n:
                        continue
                    if side == "ours":
                        write_scripted_settings(home, {}, exhausted="echo")
                        ids = await start_ours(client, queue, scale_dag(), n)
                    else:
                        ids = await start_bare(client, queue, BareDag.run, DAG_LAYERS, n)
                    await wait_all(client, ids)
                    into[side] = Runs.of(
                        [await client.get_workflow_handle(i).fetch_history() for i in ids]
                    )
        for side, b in found.items():
            print(render(side, b.summed, runs))
            print()
        ratio = found["ours"].per_run() / max(found["bare"].per_run(), 1)
        print(f"history bytes a run: ours {ratio:.2f}x bare's")
        if batches:
            print()
            for side, b in batches.items():
                print(render_batch(side, found[side], b))
                print()
            ratio = batches["ours"].per_run() / max(batches["bare"].per_run(), 1)
            print(f"history bytes a run in a batch of {batch}: ours {ratio:.2f}x bare's")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a run's history bytes, by where they travel")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--batch", type=int, default=0, help="also run this many at once, as bench.scale does"
    )
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.runs, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Breakdown", "Runs", "breakdown", "merge", "render", "render_batch"]
