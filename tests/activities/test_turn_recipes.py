"""A model turn whose input is a recipe: it prepares, for the provider, exactly what it prepares
for the same call carrying its input whole; a store that lacks or changed what the recipe
names, or a worker that knows nothing of recipes, reports it missing instead."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from openflow import contracts as c
from openflow.activities.store import KeyNotFound
from openflow.engine.headers import by_reference, header_set, part_digest
from openflow.engine.recipes import RECIPE_MARK, input_recipe
from openflow.engine.review import REVIEW_NODE
from openflow.worker import Activities, make_activities
from tests.engine.test_recipes import StoringDriver, _first_calls, _run


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


def _stored(acts: Activities, handoffs: bool = True) -> tuple[StoringDriver, dict[str, Any]]:
    """A finished run whose parts (and handoff files) are in the worker's run store."""
    driver, parts = _run()
    store = acts.files.store
    run_id = driver.snapshot.run_id
    store.put_bytes(run_id, c.HEADER_PARTS_KEY, json.dumps(parts).encode())
    for key, data in driver.files.items() if handoffs else ():
        store.put_bytes(run_id, key, data)
    return driver, parts


def _calls(driver: StoringDriver, parts: dict[str, Any], node_id: str) -> tuple[Any, Any]:
    """The node's first call with its input whole, and as the workflow sends it by reference."""
    header = _first_calls(driver)[node_id]
    digest = hashlib.sha256(header.model_dump_json().encode()).hexdigest()[:16]
    slim, refs = by_reference(header, set(parts))
    assert refs is not None
    sent, recipe = input_recipe(driver.snapshot, slim.input, parts)
    assert recipe is not None
    common: dict[str, Any] = {
        "run_id": driver.snapshot.run_id,
        "call_id": f"model:{node_id}-1",
        "node_id": node_id,
        "header_digest": digest,
        "provider_id": "scripted",
        "purpose": "review" if node_id == REVIEW_NODE else "node",
    }
    whole = c.ModelTurnInput(header=header, **common)
    by_ref = c.ModelTurnInput(
        header_set=part_digest(header_set(slim, refs)) + RECIPE_MARK,
        header_input=sent,
        header_recipe=recipe,
        **common,
    )
    return whole, by_ref


@pytest.mark.parametrize("node_id", ["left", REVIEW_NODE])
def test_a_recipe_prepares_what_the_whole_input_prepares(acts: Activities, node_id: str) -> None:
    driver, parts = _stored(acts)
    whole, by_ref = _calls(driver, parts, node_id)
    request, transcript, tools, _ = acts.model_turn.prepare(by_ref)
    expected, expected_transcript, expected_tools, _ = acts.model_turn.prepare(whole)
    assert request.model_dump_json() == expected.model_dump_json()
    assert transcript == expected_transcript and tools == expected_tools
    text = json.dumps(request.input)
    assert "Three wells run dry" in text


def test_a_changed_handoff_file_is_reported_missing(acts: Activities) -> None:
    driver, parts = _stored(acts)
    _, by_ref = _calls(driver, parts, "left")
    key = "handoffs/survey/HANDOFF.json"
    changed = driver.files[key].replace(b"August", b"October")
    acts.files.store.put_bytes(driver.snapshot.run_id, key, changed)
    with pytest.raises(KeyNotFound):
        acts.model_turn.prepare(by_ref)


@pytest.mark.parametrize("node_id", ["left", REVIEW_NODE])
def test_a_store_without_the_handoff_file_reports_it_missing(
    acts: Activities, node_id: str
) -> None:
    driver, parts = _stored(acts, handoffs=False)
    _, by_ref = _calls(driver, parts, node_id)
    with pytest.raises(KeyNotFound):
        acts.model_turn.prepare(by_ref)


def test_a_worker_that_knows_nothing_of_recipes_finds_no_header_set(acts: Activities) -> None:
    driver, parts = _stored(acts)
    _, by_ref = _calls(driver, parts, "left")
    # What such a worker reads of the input: everything but the recipe.
    older = c.ModelTurnInput.model_validate(
        {k: v for k, v in by_ref.model_dump(mode="json").items() if k != "header_recipe"}
    )
    with pytest.raises(KeyNotFound):
        acts.model_turn.prepare(older)


def test_a_handoff_the_worker_kept_that_the_store_no_longer_holds_is_read_again(
    acts: Activities,
) -> None:
    # The worker kept what it wrote, and the run's store holds another (a run restored from a
    # checkpoint, a rewrite by another worker): the call's input is made from the store's.
    driver, parts = _stored(acts)
    whole, by_ref = _calls(driver, parts, "left")
    key = "handoffs/survey/HANDOFF.json"
    changed = driver.files[key].replace(b"August", b"October")
    acts.files.keep_written(driver.snapshot.run_id, key, changed)
    request, *_ = acts.model_turn.prepare(by_ref)
    assert request.model_dump_json() == acts.model_turn.prepare(whole)[0].model_dump_json()
    assert "October" not in json.dumps(request.input)
