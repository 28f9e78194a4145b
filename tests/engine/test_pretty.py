"""Pretty JSON made natively is the very text `json.dumps(indent=2)` makes: handoff files are
named by their bytes' digest, so a handoff stored before reads the same after."""

from __future__ import annotations

import enum
import json
import math
import random
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from openflow.engine.pretty import pretty_json


def _dumps(value: Any, default: Any = None) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=default)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_any_json_value_is_written_as_json_dumps_writes_it(value: Any) -> None:
    assert pretty_json(value) == _dumps(value)


def test_every_character_is_escaped_as_json_dumps_escapes_it() -> None:
    text = "".join(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF)
    value = {text[i : i + 997]: [text[i : i + 997]] for i in range(0, len(text), 997)}
    assert pretty_json(value) == _dumps(value)


def test_floats_are_written_with_python_s_digits() -> None:
    rnd = random.Random(16)
    floats = [0.0, -0.0, 0.1, 1.0, 1e15, 1e16, 1e-4, 1e-5, 123456789.125, 2.5e-05, math.pi]
    floats += [
        struct.unpack("d", rnd.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(5000)
    ]
    floats += [rnd.uniform(-1, 1) * 10 ** rnd.randint(-6, 17) for _ in range(5000)]
    floats += [math.nan, math.inf, -math.inf]
    assert pretty_json(floats) == _dumps(floats)


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def test_what_is_not_plain_json_is_written_by_json_dumps() -> None:
    odd: list[Any] = [
        {1: "int key", None: "none key", False: "bool key", 2.5: "float key"},
        [2**63, -(2**63), 2**80],
        [Level.HIGH],
        "lone \ud800 surrogate",
        {"nested": [[[[[]]]]], "empty": {}},
    ]
    for value in odd:
        assert pretty_json(value) == _dumps(value)
    with_default = {"set": {3}, "color": Color.RED, "bytes": b"x"}
    assert pretty_json(with_default, default=str) == _dumps(with_default, default=str)
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    try:
        expected = _dumps(deep)
    except RecursionError:
        return
    assert pretty_json(deep) == expected
