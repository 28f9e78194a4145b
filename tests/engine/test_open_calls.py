"""Which calls are open and get closed: the same whatever the transcript's length or history.

A step works out a transcript's open calls from the previous list as it appends; these tests
hold it to what a scan of the transcript says, across branching steps, continue-as-new
dropping older items (`transcript_offset` > 0) and interrupts.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openflow.engine import advance as engine
from openflow.engine.compact import compact
from openflow.engine.conversation import Seat, answered, append, close_open
from openflow.engine.request import ModelReply, RawToolCall
from openflow.engine.state import (
    CallModel,
    InterruptRequested,
    ModelReplied,
    Plan,
    RunSnapshot,
    RunTools,
    StoredItemRef,
    ToolResultSummary,
    ToolsFinished,
)
from openflow.engine.step import Step
from openflow.engine.transcript import (
    ToolCall,
    ToolCallItem,
    ToolResult,
    ToolResultItem,
    TranscriptItem,
    UserItem,
)
from tests.engine.driver import agent_node, workflow

YOLO = {"tools": {"approvalMode": "yolo"}}
WF = workflow([agent_node("busy", **YOLO)])
SEAT = Seat("busy")


def _scan_open(transcript: list[TranscriptItem]) -> list[str]:
    """The ids of the calls no result answers, in order, each once: what a full scan says."""
    done = {i.result.tool_call_id for i in transcript if isinstance(i, ToolResultItem)}
    ids = [i.call.id for i in transcript if isinstance(i, ToolCallItem) and i.call.id not in done]
    return list(dict.fromkeys(ids))


def _transcript(snapshot: RunSnapshot) -> list[TranscriptItem]:
    return list(snapshot.nodes["busy"].conversation.transcript)


def _answered_by_scan(snapshot: RunSnapshot) -> set[str]:
    return {i.result.tool_call_id for i in _transcript(snapshot) if isinstance(i, ToolResultItem)}


# --- any order of calls and results --------------------------------------------------------

_IDS = st.sampled_from(["a", "b", "c", "d"])
_ITEMS = st.one_of(
    _IDS.map(lambda i: ToolCallItem(call=ToolCall(id=i, name="bash"))),
    _IDS.map(
        lambda i: ToolResultItem(result=ToolResult(tool_call_id=i, tool_name="bash", content="ok"))
    ),
    st.just(UserItem(content="note")),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.booleans(), st.lists(_ITEMS, max_size=4)), max_size=12
    ),
    st.one_of(st.none(), st.lists(_IDS, max_size=3)),
)
def test_open_calls_are_what_a_scan_of_the_transcript_says(
    steps: list[tuple[int, bool, list[TranscriptItem]]], only: list[str] | None
) -> None:
    """Steps append to the latest snapshot or branch from an older one (a step replayed, a
    plan discarded), some after a look at what is answered; repeated ids and results before
    their calls included."""
    snapshots = [engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["bash"]).snapshot]
    for back, look, items in steps:
        start = snapshots[max(0, len(snapshots) - 1 - back)]
        if look:
            assert answered(start.nodes["busy"].conversation) == _answered_by_scan(start)
        step = Step(start, 0)
        for item in items:
            append(step, SEAT, item)
        snapshots.append(step.s)
    for snapshot in (
        snapshots[-1],
        RunSnapshot.model_validate_json(snapshots[-1].model_dump_json()),
    ):
        before = _transcript(snapshot)
        done = _answered_by_scan(snapshot)
        assert answered(snapshot.nodes["busy"].conversation) == done
        step = Step(snapshot, 0)
        asked = None if only is None else [ToolCall(id=i, name="bash") for i in only]
        close_open(step, SEAT, "closed", asked)
        added = _transcript(step.s)[len(before) :]
        expected = (
            _scan_open(before)
            if only is None
            else list(dict.fromkeys(i for i in only if i not in done))
        )
        assert [i.result.tool_call_id for i in added if isinstance(i, ToolResultItem)] == expected
        assert all(isinstance(i, ToolResultItem) and i.result.is_error for i in added)
        assert _scan_open(_transcript(step.s)) == [
            i for i in _scan_open(before) if only is not None and i not in only
        ]


# --- continue-as-new ----------------------------------------------------------------------


def _delta_len(intent: CallModel) -> int:
    return sum(i.count if isinstance(i, StoredItemRef) else 1 for i in intent.delta.items)


def _reply(plan: Plan, i: int, *calls: RawToolCall) -> Plan:
    """The model asks for `calls` (one bash call by default); the turn writes its reply to
    the transcript, as a worker's does."""
    intent = next(x for x in plan.intents if isinstance(x, CallModel))
    asked = calls or (RawToolCall(id=f"c{i}", name="bash", arguments={"command": f"make {i}"}),)
    reply = ModelReply(wire="scripted", text=f"round {i}", tool_calls=asked)
    fact = ModelReplied(
        call_id=intent.call_id,
        node_id="busy",
        reply=reply,
        persisted_len=intent.delta.base_len + _delta_len(intent),
        in_transcript=True,
    )
    return engine.advance(plan.snapshot, [fact], i)


def _results(plan: Plan, snapshot: RunSnapshot, i: int) -> Plan:
    batch = next(x for x in plan.intents if isinstance(x, RunTools))
    results = tuple(
        ToolResultSummary(tool_call_id=c.id, tool_name=c.name, content=f"ran {c.id}")
        for c in batch.calls
    )
    fact = ToolsFinished(batch_id=batch.batch_id, results=results, store_key=batch.batch_id)
    return engine.advance(snapshot, [fact], i)


def test_a_call_answered_after_continue_as_new_dropped_older_items_is_answered_once() -> None:
    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["bash"])
    for i in range(40):
        replied = _reply(plan, i)
        plan = _results(replied, replied.snapshot, i)
    assert answered(plan.snapshot.nodes["busy"].conversation) == _answered_by_scan(plan.snapshot)
    replied = _reply(plan, 40)  # c40's batch is in flight when the run continues as new
    full = replied.snapshot
    for keep in (5, 0):  # a few answered calls kept; only the reply not yet counted stored
        carried = RunSnapshot.model_validate_json(compact(full, keep=keep).model_dump_json())
        conv = carried.nodes["busy"].conversation
        assert conv.transcript_offset > 0 and len(conv.transcript) == max(keep, 2)
        after = _results(replied, carried, 41)
        went_on = _results(replied, full, 41)
        items = _transcript(after.snapshot)
        results = [i.result for i in items if isinstance(i, ToolResultItem)]
        assert [(r.tool_call_id, r.content) for r in results][-1] == ("c40", "ran c40")
        assert not any(r.is_error for r in results), "nothing was closed as interrupted"
        assert _scan_open(items) == []
        # The next call sends what it would have sent without continue-as-new.
        nxt = next(x for x in after.intents if isinstance(x, CallModel))
        same = next(x for x in went_on.intents if isinstance(x, CallModel))
        assert nxt.delta == same.delta and nxt.request == same.request
        assert items == _transcript(went_on.snapshot)[-len(items) :]


# --- interrupts -----------------------------------------------------------------------------


def test_an_open_call_is_closed_once_on_interrupt_after_a_long_conversation() -> None:
    plan = engine.start(WF, "run", 0, entrypoint_text="go", tool_names=["bash", "write"])
    for i in range(25):
        replied = _reply(plan, i)
        plan = _results(replied, replied.snapshot, i)
    # The last reply: a write without content (refused at once) and a bash call that runs.
    refused = RawToolCall(id="w", name="write", arguments={"path": "a.txt"})
    running = RawToolCall(id="b", name="bash", arguments={"command": "sleep 30"})
    plan = _reply(plan, 25, refused, running)
    batch = next(x for x in plan.intents if isinstance(x, RunTools))
    assert [c.id for c in batch.calls] == ["b"]
    items = _transcript(plan.snapshot)
    assert _scan_open(items) == ["b"]
    carried = RunSnapshot.model_validate_json(compact(plan.snapshot, keep=3).model_dump_json())
    for snapshot in (plan.snapshot, carried):
        before = _transcript(snapshot)
        after = engine.advance(snapshot, [InterruptRequested(node_id="busy")], 26)
        assert after.snapshot.nodes["busy"].interrupted
        added = _transcript(after.snapshot)[len(before) :]
        assert [i.result.tool_call_id for i in added if isinstance(i, ToolResultItem)] == ["b"]
        assert len(added) == 1 and "interrupted" in added[0].result.content  # type: ignore[union-attr]
        assert _scan_open(_transcript(after.snapshot)) == []
        ids = [i.result.tool_call_id for i in items + added if isinstance(i, ToolResultItem)]
        assert sorted(ids) == sorted({*ids}), "every call has exactly one result"
