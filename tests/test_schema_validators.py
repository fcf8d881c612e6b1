"""The two validators behind the schema check every test's reports go through (tests/conftest.py):
fastjsonschema's compiled validator decides, jsonschema's names the error. They must give the same
verdict, so each is held to the other on real reports of every kind and on every one-field damage
to them: a value of another JSON type, a key taken away, an object where a list belongs.
"""

from __future__ import annotations

import copy
import json

import fastjsonschema
import pytest
from conftest import EXAMPLES, TINY_LLAMA, schema_validators

from rooflinekit.core.report import ADVISE_SCHEMA_FILE, SCHEMA_FILE, SWEEP_SCHEMA_FILE

GQA = EXAMPLES / "llama_gqa.py"
TINY = [x for k, v in TINY_LLAMA.items() for x in ("-O", f"{k}={v}")]


def _trimmed(value):
    """The document with every list cut to its first item (each damage is then cheap to judge)."""
    if isinstance(value, dict):
        return {k: _trimmed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trimmed(v) for v in value[:1]]
    return value


def _paths(value, path=()):
    """Every place in the document: its path, and the value there."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


def _other_type(value):
    """A value of another JSON type than `value`'s."""
    if isinstance(value, str):
        return 12345
    if isinstance(value, (dict, list)):
        return "not a container"
    return "not a number"  # numbers, booleans and null


def _damaged(document):
    """(what, document) for every one-field damage."""
    for path, value in _paths(document):
        if not path:
            continue
        damages = [("type", _other_type(value)), ("dropped", None)]
        if isinstance(value, list):
            damages.append(("object for list", {"0": value}))
        for what, new in damages:
            copied = copy.deepcopy(document)
            parent = copied
            for key in path[:-1]:
                parent = parent[key]
            if what == "dropped":
                del parent[path[-1]]
            else:
                parent[path[-1]] = new
            yield f"{what} at {'/'.join(map(str, path))}", copied


def _fast_accepts(fast, document) -> bool:
    try:
        fast(document)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


@pytest.fixture(scope="module")
def documents(tmp_path_factory, invoke):
    """A profile (decode, TP 2), a sweep and an advise report of a one-layer Llama, as their JSON."""
    folder = tmp_path_factory.mktemp("docs")
    runs = {SCHEMA_FILE: ("profile", GQA, *TINY, "--tp", "2", "-b", "2", "-s", "256"),
            SWEEP_SCHEMA_FILE: ("sweep", GQA, *TINY, "-b", "1,8", "-s", "128,512"),
            ADVISE_SCHEMA_FILE: ("advise", GQA, *TINY, "-b", "2", "-s", "256")}
    out = {}
    for schema, args in runs.items():
        path = folder / f"{schema.stem}.json"
        result = invoke(*args, "-H", "H800", "-f", "json", "-o", path)
        assert result.exit_code == 0, result.stderr
        out[schema] = json.loads(path.read_text())
    return out


@pytest.mark.parametrize("schema", [SCHEMA_FILE, SWEEP_SCHEMA_FILE, ADVISE_SCHEMA_FILE], ids=lambda p: p.stem)
def test_both_validators_give_every_damaged_report_the_same_verdict(documents, schema):
    fast, full = schema_validators(schema)
    document = _trimmed(documents[schema])
    assert _fast_accepts(fast, documents[schema]) and full.is_valid(documents[schema])  # the whole report
    judged = rejected = 0
    for what, damaged in _damaged(document):
        fast_ok, full_ok = _fast_accepts(fast, damaged), full.is_valid(damaged)
        assert fast_ok == full_ok, f"{schema.name}, {what}: fastjsonschema {fast_ok}, jsonschema {full_ok}"
        judged += 1
        rejected += not full_ok
    # the damages reach into the nested rows, and most of them are errors the schema catches
    assert judged > 200 and rejected > judged / 2, (judged, rejected)
