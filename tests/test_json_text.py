"""codec.dumps, the JSON text every command writes: the value json reads back is the value written
(against json's own encoder), objects one key per line, each item of an array of objects on one line."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rooflinekit.core.codec import dumps

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                      max_leaves=30)


@given(VALUES)
def test_json_reads_back_what_json_would_write(value):
    text = dumps(value)
    assert text.endswith("\n")
    assert json.loads(text) == json.loads(json.dumps(value))


def test_layout_one_key_per_line_and_one_row_per_line():
    rows = [{"name": "aten.mm", "flops": 2.0 * 4096 * 4096, "shapes": [[8, 4096], [4096, 4096]]},
            {"name": "aten.add", "flops": 8.0, "shapes": [[8, 4096]]}]
    text = dumps({"workload": {"batch": 8, "phase": "decode"}, "ops": rows, "notes": ["a", "b"], "empty": {}})
    assert text.splitlines() == [
        "{",
        '  "workload": {',
        '    "batch": 8,',
        '    "phase": "decode"',
        "  },",
        '  "ops": [',
        '    {"name": "aten.mm", "flops": 33554432.0, "shapes": [[8, 4096], [4096, 4096]]},',
        '    {"name": "aten.add", "flops": 8.0, "shapes": [[8, 4096]]}',
        "  ],",
        '  "notes": ["a", "b"],',
        '  "empty": {}',
        "}",
    ]


def test_non_string_keys_and_non_finite_numbers_as_json_writes_them():
    for keys in ({2: "a", None: "c", 1.5: "d"}, {True: "b"}):
        assert json.loads(dumps(keys)) == json.loads(json.dumps(keys))
    assert json.loads(dumps({"x": math.inf})) == {"x": math.inf}  # json's Infinity, as json.dumps writes it
    with pytest.raises(ValueError):
        dumps({"x": math.nan}, allow_nan=False)
