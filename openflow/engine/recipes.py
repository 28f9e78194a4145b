"""A call's input made of what the run store holds, sent as a recipe of references.

A node's first call carries its input (`AgentRequest.input`): its upstream nodes' outputs and
handoff manifests, or, for the post-run review, the run's evidence. Most of that is in the run
store already: the handoff file each submitting turn stored, and the parts the run's start
foretold (`headers.expected_parts`), among them the review's evidence as a clean run of the
workflow leaves it (`foretold`). Such a call's input travels as a recipe (`InputRecipe`): a
foretold part and what differs from it, or the input itself with null where the references
go, and references to handoff files; the model turn makes the very same input again
(`resolve`) before it calls the provider.

The recipe is no proof: the activity checks the header it made against the call's digest and
answers `refs_missing` when the store did not give back the same header (a file lost, or
another store), and the run sends its inputs whole from then on.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_validator,
)

from openflow.engine.handoff import handoff_key, handoff_manifest
from openflow.engine.state import RunSnapshot
from openflow.engine.wire import OmitDefaults

#: A value whose JSON is shorter than this (in bytes) costs less inline than its reference.
MIN_REF_BYTES = 80

#: The mark on `ModelTurnInput.header_set` of a call whose input is a recipe: a worker that
#: knows nothing of recipes finds no such set, reports it missing and gets the header whole.
RECIPE_MARK = "~"

Path = tuple[str | int, ...]


class InputRef(OmitDefaults, BaseModel):
    """A value of the input that a node's handoff file gives, at `at` (where the recipe's
    input holds null): the node's upstream entry (`node_id`, `output` and `handoff`, from a
    JSON handoff), its `output` (a JSON handoff's), or its handoff's `manifest`."""

    model_config = ConfigDict(frozen=True)

    at: tuple[str | int, ...]
    node: str
    take: Literal["entry", "output", "manifest"] = "entry"
    format: Literal["json", "markdown"] = "json"

    @property
    def key(self) -> str:
        """Where the handoff file is in the run store."""
        return handoff_key(self.node, self.format)


class InputRecipe(OmitDefaults, BaseModel):
    """How a call's input is made: from the stored part `base` (or, when empty, the input the
    call carries), with `patch` applied (`apply`), then each reference's value put in, then
    the output of each evidence node `outputs` names, from its JSON handoff file (a node's
    name costs less than its reference, or than a small output itself)."""

    model_config = ConfigDict(frozen=True)

    base: str = ""
    patch: dict[str, Any] | None = None
    #: In JSON, an upstream entry's reference that is the recipe's `i`-th leaves out its
    #: place when it is `("upstream", i)` (recipes recorded before always name it).
    refs: tuple[InputRef, ...] = ()
    outputs: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _places(cls, data: Any) -> Any:
        refs = data.get("refs") if isinstance(data, dict) else None
        if not isinstance(refs, list | tuple) or all(
            not isinstance(ref, dict) or "at" in ref for ref in refs
        ):
            return data
        placed = [
            {**ref, "at": ("upstream", i)} if isinstance(ref, dict) and "at" not in ref else ref
            for i, ref in enumerate(refs)
        ]
        return {**data, "refs": placed}

    @field_serializer("refs", mode="wrap")
    def _refs(self, refs: tuple[InputRef, ...], handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(refs)
        if not isinstance(data, list):
            return data
        for i, (ref, dumped) in enumerate(zip(refs, data, strict=True)):
            if ref.take == "entry" and ref.at == ("upstream", i) and isinstance(dumped, dict):
                dumped.pop("at", None)
        return data


# --- what differs from a foretold input ------------------------------------------------


def _text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def diff(base: Any, value: Any) -> Any:
    """What turns `base` into `value` (None when they are the same JSON): an object whose
    keys are those of `base` that differ (a list's by index), each holding what turns it into
    the value's, or a one-item list holding the value itself. Objects are entered only when
    their keys are the same, in the same order, and lists when their lengths are."""
    if isinstance(base, dict) and isinstance(value, dict) and list(base) == list(value):
        patch = {k: d for k in base if (d := diff(base[k], value[k])) is not None}
        return patch or None
    if isinstance(base, list) and isinstance(value, list) and len(base) == len(value):
        pairs = enumerate(zip(base, value, strict=True))
        patch = {str(i): d for i, (b, v) in pairs if (d := diff(b, v)) is not None}
        return patch or None
    kind = type(base)
    if kind is type(value) and kind in _PLAIN:
        # Two strings, integers, booleans or nulls have the same JSON when they are equal.
        return None if base == value else [value]
    return None if _text(base) == _text(value) else [value]


#: The JSON values whose JSON is the same exactly when they are equal (and of one type).
_PLAIN = frozenset({str, int, bool, type(None)})


def apply(base: Any, patch: Any) -> Any:
    """`base` with `patch` (`diff`'s) applied; a `ValueError` when it does not fit."""
    if patch is None:
        return base
    if isinstance(patch, list):
        if len(patch) != 1:
            raise ValueError("a patch's value is a list of one")
        return patch[0]
    if not isinstance(patch, dict):
        raise ValueError("a patch is an object or a list of one")
    if isinstance(base, dict):
        if not set(patch) <= set(base):
            raise ValueError("a patch names a key its base lacks")
        return {k: apply(v, patch[k]) if k in patch else v for k, v in base.items()}
    if isinstance(base, list):
        if not set(patch) <= {str(i) for i in range(len(base))}:
            raise ValueError("a patch names an index its base lacks")
        return [apply(v, patch.get(str(i))) for i, v in enumerate(base)]
    raise ValueError("a patch enters a value that is neither an object nor a list")


# --- the post-run review's evidence, foretold ------------------------------------------

#: An evidence node's fields as a clean run leaves them (`review.run_evidence`).
_CLEAN_NODE: dict[str, Any] = {
    "modelAttempt": 1,
    "retries": 0,
    "repairs": 0,
    "transcriptItems": 0,
    "output": None,
    "failed": None,
}


def foretold(header_input: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The review's input as every clean run of its workflow would carry it: what the run did
    (each node's attempts, output, failure; the metrics; the entrypoint) at a clean run's
    values. The same for the run's start (`headers.expected_parts` stores it) and its end;
    None for any other input."""
    evidence = (header_input or {}).get("runEvidence")
    if not isinstance(evidence, dict) or not isinstance(evidence.get("nodes"), list):
        return None
    nodes = [
        {k: _CLEAN_NODE.get(k, v) for k, v in node.items()} if isinstance(node, dict) else node
        for node in evidence["nodes"]
    ]
    clean = dict(evidence)
    clean["nodes"] = nodes
    if "entrypoint" in clean:
        clean["entrypoint"] = ""
    if isinstance(clean.get("metrics"), dict):
        # The same zeros at the start as at the end (a start's cost is 0, an end's 0.0).
        clean["metrics"] = {k: 0.0 if k == "estimatedCostUsd" else 0 for k in clean["metrics"]}
    if "failedNodes" in clean:
        clean["failedNodes"] = []
    return {**header_input, "runEvidence": clean} if header_input is not None else None


# --- making a recipe --------------------------------------------------------------------


def _upstream_ref(at: Path, entry: Any) -> InputRef | None:
    """The reference to an upstream entry, or to its manifest, that its handoff file gives."""
    if not isinstance(entry, dict) or not isinstance(entry.get("handoff"), dict):
        return None
    node, manifest = entry.get("node_id"), entry["handoff"]
    if not isinstance(node, str):
        return None
    fmt = manifest.get("format")
    if fmt not in ("json", "markdown") or manifest.get("uri") != f"run://{handoff_key(node, fmt)}":
        return None
    if fmt == "json" and list(entry) == ["node_id", "output", "handoff"]:
        return InputRef(at=at, node=node)
    return InputRef(at=(*at, "handoff"), node=node, take="manifest", format=fmt)


def _stored_output(snapshot: RunSnapshot, node: Any) -> bool:
    """Whether an evidence node's output is what its JSON handoff file holds."""
    if not isinstance(node, dict) or not isinstance(node.get("id"), str):
        return False
    ns = snapshot.nodes.get(node["id"])
    if ns is None or not ns.has_output or (ns.handoff or {}).get("format") != "json":
        return False
    return bool(node.get("output") == ns.output)


def _output_ref(at: Path, snapshot: RunSnapshot, node: Any) -> InputRef | None:
    """The reference to an evidence node's output, when its JSON handoff gives it and it is
    worth one."""
    if not _stored_output(snapshot, node) or len(_text(node.get("output"))) < MIN_REF_BYTES:
        return None
    return InputRef(at=(*at, "output"), node=node["id"], take="output")


def _evidence_nodes(header_input: Mapping[str, Any]) -> list[Any]:
    evidence = header_input.get("runEvidence")
    nodes = evidence.get("nodes") if isinstance(evidence, dict) else None
    return nodes if isinstance(nodes, list) else []


def _refs(snapshot: RunSnapshot, header_input: Mapping[str, Any]) -> list[InputRef]:
    refs: list[InputRef] = []
    upstream = header_input.get("upstream")
    for i, entry in enumerate(upstream if isinstance(upstream, list) else []):
        ref = _upstream_ref(("upstream", i), entry)
        if ref is not None:
            refs.append(ref)
    for i, node in enumerate(_evidence_nodes(header_input)):
        ref = _output_ref(("runEvidence", "nodes", i), snapshot, node)
        if ref is not None:
            refs.append(ref)
    return refs


def _named_outputs(
    snapshot: RunSnapshot, header_input: Mapping[str, Any], refs: list[InputRef]
) -> list[tuple[int, str]]:
    """The evidence nodes (place, id) whose output their JSON handoff file holds and no
    reference gives: each named once (a name that is not one node's is not named)."""
    nodes = _evidence_nodes(header_input)
    taken = {ref.at for ref in refs}
    ids = [node.get("id") if isinstance(node, dict) else None for node in nodes]
    return [
        (i, node["id"])
        for i, node in enumerate(nodes)
        if ("runEvidence", "nodes", i, "output") not in taken
        and _stored_output(snapshot, node)
        and ids.count(node["id"]) == 1
    ]


def _put(value: Any, at: Path, item: Any) -> Any:
    """`value` with `item` at `at`; a `ValueError` (or `KeyError`, `IndexError`, `TypeError`)
    when `at` is not in it."""
    if not at:
        return item
    head, rest = at[0], at[1:]
    if isinstance(value, dict) and isinstance(head, str):
        if head not in value:
            raise KeyError(head)
        return {k: _put(v, rest, item) if k == head else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(head, int) and 0 <= head < len(value):
        return [_put(v, rest, item) if i == head else v for i, v in enumerate(value)]
    raise ValueError(f"the input has no {head!r} where a reference points")


def input_recipe(
    snapshot: RunSnapshot, header_input: dict[str, Any] | None, parts: Collection[str]
) -> tuple[dict[str, Any] | None, InputRecipe | None]:
    """What a call carries for `header_input`: the input (null where references go, None
    when a stored part stands for it) and its recipe; the input itself and None when the
    store holds nothing of it worth a reference."""
    if not header_input or not parts:
        return header_input, None
    refs = _refs(snapshot, header_input)
    template: dict[str, Any] = header_input
    for ref in refs:
        template = _put(template, ref.at, None)
    base = foretold(template)
    digest = _digest(base) if base is not None else ""
    if base is not None and digest in parts:
        named = _named_outputs(snapshot, header_input, refs)
        for i, _ in named:
            template = _put(template, ("runEvidence", "nodes", i, "output"), None)
        recipe = InputRecipe(
            base=digest,
            patch=diff(base, template),
            refs=tuple(refs),
            outputs=tuple(node for _, node in named),
        )
        return None, recipe
    if not refs:
        return header_input, None
    return template, InputRecipe(refs=tuple(refs))


def _digest(value: Any) -> str:
    # The digest `headers.part_digest` names a part by (imported late: headers imports this).
    from openflow.engine.headers import part_digest

    return part_digest(value)


# --- making the input again -------------------------------------------------------------


def resolve(
    header_input: dict[str, Any] | None,
    recipe: InputRecipe,
    parts: Mapping[str, Any],
    files: Mapping[str, bytes],
) -> dict[str, Any] | None:
    """The input a recipe makes, from the stored parts and the handoff files it names (by
    key, `InputRef.key`); a `KeyError`, `ValueError` or `TypeError` when they do not fit."""
    value: Any = header_input
    if recipe.base:
        value = apply(parts[recipe.base], recipe.patch)
    for ref in recipe.refs:
        data = files[ref.key]
        manifest = handoff_manifest(ref.node, ref.format, data)
        item: Any = manifest
        if ref.take == "output":
            item = json.loads(data)
        elif ref.take == "entry":
            item = {"node_id": ref.node, "output": json.loads(data), "handoff": manifest}
        value = _put(value, ref.at, item)
    if recipe.outputs:
        nodes = _evidence_nodes(value) if isinstance(value, dict) else []
        places = {node.get("id"): i for i, node in enumerate(nodes) if isinstance(node, dict)}
        for node_id in recipe.outputs:
            at = ("runEvidence", "nodes", places[node_id], "output")
            value = _put(value, at, json.loads(files[handoff_key(node_id, "json")]))
    if value is not None and not isinstance(value, dict):
        raise TypeError("a recipe makes an object")
    return value


def recipe_keys(recipe: InputRecipe) -> list[str]:
    """The handoff files a recipe reads, each once, in order."""
    keys = [ref.key for ref in recipe.refs]
    keys += [handoff_key(node_id, "json") for node_id in recipe.outputs]
    return list(dict.fromkeys(keys))


__all__ = [
    "MIN_REF_BYTES",
    "RECIPE_MARK",
    "InputRecipe",
    "InputRef",
    "apply",
    "diff",
    "foretold",
    "input_recipe",
    "recipe_keys",
    "resolve",
]
