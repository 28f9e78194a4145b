"""A call's input as a recipe: what the run store holds of it comes back as the same JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openflow.engine import advance as engine
from openflow.engine.handoff import HandoffFile, handoff_file
from openflow.engine.headers import by_reference, expected_parts, header_set, part_digest
from openflow.engine.recipes import (
    InputRecipe,
    InputRef,
    apply,
    diff,
    foretold,
    input_recipe,
    resolve,
)
from openflow.engine.review import REVIEW_NODE
from openflow.engine.state import HandoffStored, Intent, WriteHandoff
from tests.engine.driver import TOOL_NAMES, Driver, agent_node, ok_summary, submit, workflow

#: An output far larger than a reference to the handoff file that holds it.
FINDINGS = {"summary": "Three wells run dry by August; the fourth holds. " * 6}


def _text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass
class StoringDriver(Driver):
    """A driver whose handoffs are stored as the activity stores them (`files`, by key)."""

    files: dict[str, bytes] = field(default_factory=dict)

    def settle(self, intent: Intent) -> Any:
        if isinstance(intent, WriteHandoff):
            file = handoff_file(intent.node_id, intent.format, intent.output)
            assert isinstance(file, HandoffFile)
            self.files[file.key] = file.data
            return HandoffStored(node_id=intent.node_id, manifest=file.manifest)
        return super().settle(intent)


def _dag() -> Any:
    nodes = [agent_node("survey"), agent_node("left"), agent_node("right")]
    return workflow(nodes, [("survey", "left"), ("survey", "right")])


def _run() -> tuple[StoringDriver, dict[str, Any]]:
    """A finished run of the dag and the parts its start stored."""
    wf = _dag()
    started = engine.start(wf, "run-test", 0, entrypoint_text="hello", tool_names=TOOL_NAMES)
    parts = expected_parts(started.snapshot)
    script = {"survey": [submit(FINDINGS)], "left": [ok_summary()], "right": [ok_summary()]}
    script[REVIEW_NODE] = [submit({"suggestions": []})]
    driver = StoringDriver(wf, script)
    driver.run()
    assert driver.snapshot.status == "completed"
    return driver, parts


def _first_calls(driver: StoringDriver) -> dict[str, Any]:
    calls = [*driver.model.calls, *driver.model.reviews]
    return {c.node_id: c.intent.request.model_copy(update={"turn_index": 0}) for c in calls}


def test_a_childs_upstream_entry_and_the_reviews_evidence_come_back_the_same() -> None:
    driver, parts = _run()
    headers = _first_calls(driver)
    assert set(headers) == {"survey", "left", "right", REVIEW_NODE}
    recipes = {}
    for node_id, header in headers.items():
        slim, refs = by_reference(header, set(parts))
        assert refs is not None and part_digest(header_set(slim, refs)) in parts
        sent, recipe = input_recipe(driver.snapshot, slim.input, parts)
        if recipe is None:
            assert sent == slim.input
            continue
        recipes[node_id] = (sent, recipe)
        made = resolve(sent, recipe, parts, driver.files)
        assert _text(made) == _text(slim.input), node_id
    # The children name the survey's handoff instead of carrying its output and manifest.
    for child in ("left", "right"):
        sent, recipe = recipes[child]
        assert [r.node for r in recipe.refs] == ["survey"]
        assert "sha256" not in _text(sent) and FINDINGS["summary"] not in _text(sent)
    # The review sends what differs from the evidence its start foretold; the survey's
    # output comes from its handoff file.
    sent, recipe = recipes[REVIEW_NODE]
    assert sent is None and recipe.base in parts
    assert [(r.node, r.take) for r in recipe.refs] == [("survey", "output")]
    assert FINDINGS["summary"] not in _text(recipe.model_dump(mode="json"))
    assert "systemPrompt" not in _text(recipe.model_dump(mode="json"))
    assert len(_text(recipe.model_dump(mode="json"))) < len(_text(headers[REVIEW_NODE].input)) / 3


def test_a_store_without_the_file_or_the_part_cannot_make_the_input() -> None:
    driver, parts = _run()
    header = _first_calls(driver)["left"]
    slim, _ = by_reference(header, set(parts))
    sent, recipe = input_recipe(driver.snapshot, slim.input, parts)
    assert recipe is not None
    with pytest.raises(KeyError):
        resolve(sent, recipe, parts, {})
    # Another file under the key makes another input (the activity's digest check tells).
    other = {k: v.replace(b"August", b"October") for k, v in driver.files.items()}
    assert _text(resolve(sent, recipe, parts, other)) != _text(slim.input)
    review = _first_calls(driver)[REVIEW_NODE]
    slim, _ = by_reference(review, set(parts))
    sent, recipe = input_recipe(driver.snapshot, slim.input, parts)
    assert recipe is not None and recipe.base
    with pytest.raises(KeyError):
        resolve(sent, recipe, {}, driver.files)
    with pytest.raises(ValueError):
        resolve(sent, recipe.model_copy(update={"patch": {"nowhere": [1]}}), parts, driver.files)


def test_without_stored_parts_the_input_travels_whole() -> None:
    driver, _ = _run()
    header = _first_calls(driver)["left"]
    assert input_recipe(driver.snapshot, header.input, set()) == (header.input, None)
    assert foretold(header.input) is None


def test_the_foretold_evidence_is_the_same_at_the_start_and_the_end() -> None:
    driver, parts = _run()
    review = _first_calls(driver)[REVIEW_NODE]
    slim, _ = by_reference(review, set(parts))
    base = foretold(slim.input)
    assert base is not None and part_digest(base) in parts
    assert base["runEvidence"]["entrypoint"] == ""
    assert all(n["output"] is None for n in base["runEvidence"]["nodes"])


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(-3, 3, allow_nan=False)
    | st.sampled_from(["", "a", "b"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c", "0"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(base=JSON, value=JSON)
def test_a_patch_turns_its_base_into_the_value_to_the_byte(base: Any, value: Any) -> None:
    patch = diff(base, value)
    assert _text(apply(base, patch)) == _text(value)
    assert diff(value, value) is None


@pytest.mark.parametrize(
    ("base", "value"),
    [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1}, {"a": True}),
        ([1, 2], [1, 2, 3]),
        ({"a": None}, {"a": {"b": [1]}}),
        ({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}),
    ],
)
def test_a_patch_keeps_key_order_and_number_types(base: Any, value: Any) -> None:
    made = apply(base, diff(base, value))
    assert _text(made) == _text(value)


def test_a_recipe_leaves_out_its_defaults() -> None:
    assert InputRecipe().model_dump(mode="json") == {}


def test_an_upstream_reference_in_its_own_place_leaves_the_place_out() -> None:
    recipe = InputRecipe(
        refs=(
            InputRef(at=("upstream", 0), node="a"),
            InputRef(at=("upstream", 2), node="b"),
            InputRef(at=("upstream", 2, "handoff"), node="c", take="manifest"),
        )
    )
    data = recipe.model_dump(mode="json")
    assert data["refs"] == [
        {"node": "a"},
        {"at": ["upstream", 2], "node": "b"},
        {"at": ["upstream", 2, "handoff"], "node": "c", "take": "manifest"},
    ]
    assert InputRecipe.model_validate(data) == recipe
    assert InputRecipe.model_validate_json(recipe.model_dump_json()) == recipe
    # A recipe recorded before names every place.
    old = {"refs": [{"at": ["upstream", 0], "node": "a"}]}
    assert InputRecipe.model_validate(old).refs == recipe.refs[:1]


def test_a_markdown_handoffs_manifest_comes_from_its_file() -> None:
    handoff = {"format": "markdown", "template": "# Findings"}
    doc = agent_node("doc", handoff=handoff, output_schema={})
    wf = workflow([doc, agent_node("use")], [("doc", "use")])
    started = engine.start(wf, "run-test", 0, entrypoint_text="hello", tool_names=TOOL_NAMES)
    parts = expected_parts(started.snapshot)
    script = {"doc": [submit({"markdown": "# Findings\n\nThe wells run dry."}, "Wrote it.")]}
    script["use"] = [ok_summary()]
    driver = StoringDriver(wf, script)
    driver.run()
    header = _first_calls(driver)["use"]
    slim, _ = by_reference(header, set(parts))
    sent, recipe = input_recipe(driver.snapshot, slim.input, parts)
    assert recipe is not None
    assert [(r.take, r.format) for r in recipe.refs] == [("manifest", "markdown")]
    assert sent is not None and sent["upstream"][0]["output"] == {"summary": "Wrote it."}
    assert _text(resolve(sent, recipe, parts, driver.files)) == _text(slim.input)


def test_the_reviews_small_outputs_travel_as_their_nodes_names() -> None:
    driver, parts = _run()
    review = _first_calls(driver)[REVIEW_NODE]
    slim, _ = by_reference(review, set(parts))
    sent, recipe = input_recipe(driver.snapshot, slim.input, parts)
    assert sent is None and recipe is not None
    # The survey's large output is a reference; the children's small ones are named.
    assert recipe.outputs == ("left", "right")
    assert "nodes" not in _text(recipe.patch)
    assert _text(resolve(sent, recipe, parts, driver.files)) == _text(slim.input)
    # A store without a named node's handoff file cannot make the input.
    lost = {k: v for k, v in driver.files.items() if "left" not in k}
    with pytest.raises(KeyError):
        resolve(sent, recipe, parts, lost)
