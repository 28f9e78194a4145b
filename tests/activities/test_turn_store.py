"""What a model turn reads from and writes to the run store (files and PostgreSQL), and what
history carries of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openflow import contracts as c
from openflow.activities import tools_runner
from openflow.activities.run_files import CATALOG_KEY
from openflow.activities.store import KeyNotFound
from openflow.engine.request import AgentRequest, ModelReply, UsageReport
from openflow.engine.state import StoredItemRef, TranscriptDelta
from openflow.engine.transcript import AssistantItem, ToolResult, ToolResultItem, UserItem
from openflow.worker import Activities, make_activities


@pytest.fixture(params=["file", "postgres"])
def acts(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Activities:
    """A worker's activities whose run store is files under its home, or PostgreSQL."""
    if request.param == "postgres":
        monkeypatch.setenv("OPENFLOW_DATABASE_URL", request.getfixturevalue("pg_url"))
    else:
        monkeypatch.delenv("OPENFLOW_DATABASE_URL", raising=False)
    return make_activities(tmp_path, provider_factory=None)


HEADER = AgentRequest(workflow_id="wf", node_id="busy", node_label="Busy", model="m")


def _turn(delta: TranscriptDelta, call: str = "model:busy-3") -> c.ModelTurnInput:
    return c.ModelTurnInput(
        run_id="run-1",
        call_id=call,
        node_id="busy",
        turn_index=1,
        header_digest="0123456789abcdef",
        header=HEADER,
        delta=delta,
        provider_id="scripted",
    )


def _store_list(acts: object, key: str, items: list[object]) -> None:
    data = json.dumps([item.model_dump(mode="json") for item in items]).encode()  # type: ignore[attr-defined]
    acts.files.store.put_bytes("run-1", key, data)  # type: ignore[attr-defined]


def test_a_packed_reference_appends_every_item_it_names(acts: Activities) -> None:
    reply = [AssistantItem(content="looking"), UserItem(content="unused")]
    result = ToolResultItem(result=ToolResult(tool_call_id="c1", tool_name="ls", content="a.txt"))
    _store_list(acts, "replies/busy/r.json", [reply[0], result])
    delta = TranscriptDelta(
        base_len=0,
        items=(
            UserItem(content="go"),
            StoredItemRef(store_key="replies/busy/r.json", index=0, count=2),
        ),
    )
    _, transcript, _, persisted = acts.model_turn.prepare(_turn(delta))
    assert persisted == 3
    assert transcript == [UserItem(content="go"), reply[0], result]
    # The next turn reuses what it parsed; a later line that changed is parsed again.
    again = TranscriptDelta(base_len=2, items=(UserItem(content="instead"),))
    _, transcript, _, persisted = acts.model_turn.prepare(_turn(again, "model:busy-4"))
    assert persisted == 3
    assert transcript == [UserItem(content="go"), reply[0], UserItem(content="instead")]


def test_a_reference_past_the_stored_list_reports_it_missing(acts: Activities) -> None:
    _store_list(acts, "replies/busy/r.json", [AssistantItem(content="only one")])
    delta = TranscriptDelta(
        base_len=0, items=(StoredItemRef(store_key="replies/busy/r.json", index=0, count=2),)
    )
    with pytest.raises(KeyNotFound):
        acts.model_turn.prepare(_turn(delta))
    acts.files.store.put_bytes("run-1", "replies/busy/torn.json", b'[{"kind":')
    torn = TranscriptDelta(
        base_len=0, items=(StoredItemRef(store_key="replies/busy/torn.json", index=0),)
    )
    with pytest.raises(KeyNotFound):
        acts.model_turn.prepare(_turn(torn))


def test_history_leaves_out_zero_usage_and_a_total_that_is_the_sum() -> None:
    reply = ModelReply(
        wire="scripted",
        text="hi",
        usage=UsageReport(prompt_tokens=10, completion_tokens=5, total_tokens=15, cost_usd=0.0),
    )
    wire = json.loads(reply.model_dump_json())
    assert wire["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.0}
    back = ModelReply.model_validate(wire)
    assert back == reply and back.usage is not None and back.usage.total_tokens == 15
    odd = UsageReport(prompt_tokens=10, completion_tokens=5, total_tokens=40, cached_input_tokens=3)
    dumped = json.loads(ModelReply(wire="scripted", usage=odd).model_dump_json())["usage"]
    assert dumped == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 40,
        "cached_input_tokens": 3,
    }
    # Events keep the whole shape.
    assert set(odd.model_dump()) >= {"cache_creation_input_tokens", "cost_usd"}


def test_store_keys_history_leaves_out_are_the_ones_activities_use() -> None:
    assert c.batch_key("batch-4") == "batches/batch-4.json"
    result = c.ToolBatchResult(results=[c.ToolResultWire(content="x")], store_index=2)
    assert json.loads(result.model_dump_json()) == {"results": [{"content": "x"}], "store_index": 2}


def test_a_reference_to_the_transcript_is_read_before_the_turn_rewrites_it(
    acts: Activities,
) -> None:
    written = [AssistantItem(content="a"), AssistantItem(content="b"), AssistantItem(content="c")]
    delta = TranscriptDelta(base_len=0, items=tuple(written))
    acts.model_turn.prepare(_turn(delta))
    # The engine keeps line 0, drops line 1 and moves line 2 after nothing else: one rewrite.
    moved = TranscriptDelta(
        base_len=1,
        items=(StoredItemRef(store_key="", index=2), UserItem(content="then this")),
    )
    _, transcript, _, persisted = acts.model_turn.prepare(_turn(moved, "model:busy-4"))
    assert transcript == [written[0], written[2], UserItem(content="then this")]
    assert persisted == 3
    past = TranscriptDelta(base_len=3, items=(StoredItemRef(store_key="", index=7),))
    with pytest.raises(KeyNotFound):
        acts.model_turn.prepare(_turn(past, "model:busy-5"))


@pytest.mark.parametrize(
    ("call_id", "node"),
    [
        ("model:busy-7", "busy"),
        ("model:plan-and-ship-12", "plan-and-ship"),
        ("model:a:b-3", "a:b"),
        ("repair:busy-4", ""),
        ("model:busy", ""),
        ("model:busy-x", ""),
    ],
)
def test_a_model_call_id_names_its_conversation(call_id: str, node: str) -> None:
    assert c.call_node(call_id) == node


@pytest.mark.parametrize(
    ("call_id", "activity_id"),
    [
        ("model:busy-7", "busy-7"),
        ("model:__post_run_review-4", "__post_run_review-4"),
        ("model:a:b-3", "a:b-3"),
        ("repair:busy-4", None),
        ("model:7", None),
    ],
)
def test_a_model_turns_activity_id_names_its_call(call_id: str, activity_id: str | None) -> None:
    """Never a number (Temporal numbers the other activities), and the call's id again."""
    assert c.turn_activity_id(call_id) == activity_id
    if activity_id is not None:
        assert c.activity_call_id(activity_id) == call_id


async def test_reads_that_cannot_run_at_once_are_left_to_their_own_batch(
    acts: Activities, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openflow.engine.request import RawToolCall

    request = HEADER.model_copy(update={"tool_names": ("ls", "read", "write")})
    reply = ModelReply(
        wire="scripted", tool_calls=(RawToolCall(id="c1", name="ls", arguments={"path": "."}),)
    )

    async def broken(deps: object, batch: c.ToolBatchInput) -> object:
        raise RuntimeError("the tool host is broken")

    monkeypatch.setattr(tools_runner, "run_tools", broken)
    # A failure here must not lose the reply (and call the model again): the engine plans
    # the batch as usual and its activity retries it.
    assert await acts.model_turn.eager_reads(
        _turn(TranscriptDelta(base_len=0)), request, reply
    ) == (None, [])
    # A write among the calls, or reads the node must ask for, never run early.
    mixed = reply.model_copy(
        update={
            "tool_calls": (
                *reply.tool_calls,
                RawToolCall(id="c2", name="write", arguments={"path": "x", "content": "y"}),
            )
        }
    )
    monkeypatch.setattr(tools_runner, "run_tools", None)
    assert await acts.model_turn.eager_reads(
        _turn(TranscriptDelta(base_len=0)), request, mixed
    ) == (None, [])
    asked = _turn(TranscriptDelta(base_len=0)).model_copy(update={"eager": False})
    assert await acts.model_turn.eager_reads(asked, request, reply) == (None, [])


def test_the_review_reads_each_conversation_from_the_store(acts: Activities) -> None:
    from openflow.engine import advance as engine
    from openflow.engine.review import REVIEW_NODE, review_request
    from tests.engine.driver import single_agent_workflow

    snapshot = engine.start(single_agent_workflow(), "run-1", 0, entrypoint_text="go").snapshot
    said = AssistantItem(content="I looked at everything twice.")
    acts.files.store.append_lines("run-1", c.transcript_key("first"), [said.model_dump_json()], 0)
    header = review_request(snapshot, "first")
    inp = c.ModelTurnInput(
        run_id="run-1",
        call_id=f"model:{REVIEW_NODE}-9",
        node_id=REVIEW_NODE,
        turn_index=0,
        header_digest="fedcba9876543210",
        header=header,
        delta=TranscriptDelta(base_len=0),
        provider_id="scripted",
    )
    request, _, _, _ = acts.model_turn.prepare(inp)
    assert request.input is not None and request.input["evidenceTruncated"] is False
    text = request.input["runEvidence"]
    assert isinstance(text, str) and "I looked at everything twice." in text
    assert json.loads(text)["nodes"][0]["transcript"] == [said.model_dump(mode="json")]


def test_a_transcript_another_worker_wrote_to_is_read_again(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENFLOW_DATABASE_URL", pg_url)
    mine = make_activities(tmp_path / "a", provider_factory=None)
    other = make_activities(tmp_path / "b", provider_factory=None)
    first = TranscriptDelta(base_len=0, items=(UserItem(content="go"),))
    _, transcript, _, _ = mine.model_turn.prepare(_turn(first))
    assert transcript == [UserItem(content="go")]
    # The next turn ran on the other worker, which also kept its reply.
    later = TranscriptDelta(base_len=1, items=(AssistantItem(content="from b"),))
    other.model_turn.prepare(_turn(later, "model:busy-4"))
    again = TranscriptDelta(base_len=2, items=(UserItem(content="back on a"),))
    _, transcript, _, persisted = mine.model_turn.prepare(_turn(again, "model:busy-5"))
    assert persisted == 3
    assert transcript == [
        UserItem(content="go"),
        AssistantItem(content="from b"),
        UserItem(content="back on a"),
    ]


def test_the_review_is_chosen_by_its_purpose_and_older_calls_by_their_node() -> None:
    from openflow.activities.model_turn import turn_purpose
    from openflow.engine.review import REVIEW_NODE

    def wire(inp: c.ModelTurnInput) -> c.ModelTurnInput:
        return c.ModelTurnInput.model_validate_json(inp.model_dump_json())

    node = _turn(TranscriptDelta(base_len=0)).model_copy(update={"purpose": "node"})
    # A node's turn carries no purpose in history, as before the field.
    assert "purpose" not in json.loads(node.model_dump_json())
    assert turn_purpose(wire(node)) == "node"
    review = c.ModelTurnInput(**{**node.model_dump(), "purpose": "review"})
    assert json.loads(review.model_dump_json())["purpose"] == "review"
    assert turn_purpose(wire(review)) == "review"
    # A review recorded before `purpose` is known by its node, named or implied by its call id.
    recorded = {k: v for k, v in node.model_dump().items() if k != "purpose"}
    named = c.ModelTurnInput(**{**recorded, "node_id": REVIEW_NODE})
    implied = c.ModelTurnInput(**{**recorded, "node_id": "", "call_id": f"model:{REVIEW_NODE}-9"})
    assert turn_purpose(wire(named)) == turn_purpose(wire(implied)) == "review"


def test_a_header_by_reference_is_put_back_from_the_stored_parts(acts: Activities) -> None:
    from openflow.engine.headers import by_reference, part_digest

    prompt = "Follow the house rules. " * 50
    whole = HEADER.model_copy(update={"system_messages": (prompt, "short")})
    parts = {part_digest(prompt): prompt}
    slim, refs = by_reference(whole, set(parts))
    assert refs is not None and slim.system_messages == ("short",)
    turn = _turn(TranscriptDelta(base_len=0)).model_copy(
        update={"header": None, "header_rest": slim, "header_refs": refs}
    )
    with pytest.raises(KeyNotFound):  # the start's parts are not in the store
        acts.model_turn.prepare(turn)
    acts.files.store.put_bytes("run-1", c.HEADER_PARTS_KEY, json.dumps(parts).encode())
    request, _, _, _ = acts.model_turn.prepare(turn)
    assert request.system_messages == (prompt, "short")
    # A part the stored ones lack is reported missing too.
    other = by_reference(whole, {part_digest("short"), *parts})[1]
    assert other is not None
    with pytest.raises(KeyNotFound):
        acts.model_turn.prepare(turn.model_copy(update={"header_refs": other}))


def test_runs_that_stored_the_same_catalog_share_its_specs(tmp_path: Path) -> None:
    """A worker holding many runs of one workflow keeps one copy of their catalog."""
    acts = make_activities(tmp_path, provider_factory=None)
    catalog = json.dumps(
        [{"name": "read", "description": "Read a file.", "parameters": {}}]
    ).encode()
    for run_id in ("run-a", "run-b"):
        acts.files.store.put_bytes(run_id, CATALOG_KEY, catalog)
    a = acts.model_turn.offered("run-a", ("read",))
    b = acts.model_turn.offered("run-b", ("read",))
    assert [s.name for s in a] == ["read"] and a[0] is b[0]
    assert acts.files.json_file("run-a", CATALOG_KEY) is acts.files.json_file("run-b", CATALOG_KEY)
    # A run whose catalog differs gets its own.
    other = json.dumps(
        [{"name": "read", "description": "Read a file, briefly.", "parameters": {}}]
    ).encode()
    acts.files.store.put_bytes("run-c", CATALOG_KEY, other)
    (c_spec,) = acts.model_turn.offered("run-c", ("read",))
    assert c_spec.description == "Read a file, briefly."


async def test_a_turn_stores_what_it_sent_with_its_reply_and_a_failed_call_still_stores_it(
    acts: Activities,
) -> None:
    script = {"busy": [{"message": "on it"}, {"error": "transient"}]}
    profiles = {"scripted": {"kind": "scripted", "script": script}}
    acts.files.store.put_bytes("run-1", "profiles.json", json.dumps(profiles).encode())
    key = c.transcript_key("busy")
    first = _turn(TranscriptDelta(base_len=0, items=(UserItem(content="go"),)))
    result = await acts.model_turn.model_turn(first.model_copy(update={"turn_index": 0}))
    assert result.failure is None
    lines = [json.loads(line) for line in acts.files.store.read_lines("run-1", key)]
    assert [line.get("content") for line in lines] == ["go", "on it"]
    # The next call fails: what it sent is stored all the same, and the result says so.
    again = _turn(TranscriptDelta(base_len=2, items=(UserItem(content="and then?"),)))
    failed = await acts.model_turn.model_turn(again.model_copy(update={"call_id": "model:busy-4"}))
    assert failed.failure is not None and failed.failure.kind == "transient"
    assert failed.persisted_len == 3
    lines = [json.loads(line) for line in acts.files.store.read_lines("run-1", key)]
    assert [line.get("content") for line in lines] == ["go", "on it", "and then?"]
    _, transcript, _, persisted = acts.model_turn.prepare(
        _turn(TranscriptDelta(base_len=3), "model:busy-5")
    )
    assert persisted == 3
    assert transcript == [
        UserItem(content="go"),
        AssistantItem(content="on it"),
        UserItem(content="and then?"),
    ]
