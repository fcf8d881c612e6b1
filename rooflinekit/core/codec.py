"""One JSON encoder and decoder for the report dataclasses, and the JSON Schema they imply.

Everything here reads the dataclasses' own fields and type hints, so the types, the JSON and the
schema cannot drift apart: add a field to a dataclass and all three follow.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, Union

from rooflinekit.core.request import Deployment

# -- encode ---------------------------------------------------------------------------------------


#: Values that are their own JSON (exact types: subclasses take the general path).
_PLAIN = frozenset({str, int, bool, type(None)})


def encode(obj: Any) -> Any:
    """A JSON-ready value: dataclasses become dicts (fields marked omit_none left out when None),
    tuples lists, and non-finite floats null (JSON has no NaN)."""
    cls = type(obj)
    if cls in _PLAIN:
        return obj
    if cls is float:
        return obj if math.isfinite(obj) else None
    encoder = _dataclass_encoder(cls)
    if encoder is not None:
        return encoder(obj)
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


@cache
def _dataclass_encoder(cls: type) -> Callable[[Any], dict] | None:
    """`encode` of one dataclass type's instances, or None for any other type.

    Written out field by field, as dataclasses writes its __init__ (a report holds 10^4 op rows):
    scalar fields are copied without a call each, others go through `encode`.
    """
    if not dataclasses.is_dataclass(cls):
        return None
    lines = ["def encode_fields(obj):", "    out = {}"]
    for f in dataclasses.fields(cls):
        store = f"out[{f.name!r}]"
        lines += [
            f"    value = obj.{f.name}",
            "    kind = type(value)",
            "    if kind in PLAIN:",
            f"        {'if value is not None: ' if f.metadata.get('omit_none') else ''}{store} = value",
            "    elif kind is float:",
            f"        {store} = value if isfinite(value) else None",
            "    else:",
            f"        {store} = encode(value)",
        ]
    lines.append("    return out")
    namespace = {"PLAIN": _PLAIN, "isfinite": math.isfinite, "encode": encode}
    exec("\n".join(lines), namespace)  # code from the dataclass's own field names only
    return namespace["encode_fields"]


def _key(key: Any) -> str:
    """An object key as json writes it (true, null, 1.5: keys are strings)."""
    return key if type(key) is str else json.dumps(key)


def dumps(value: Any, *, allow_nan: bool = True) -> str:
    """JSON text of an encoded value, laid out for reading and for line tools: an object one key per
    line, an array of objects or arrays one item per line (each item on its one line), anything
    else on one line. A report's thousands of op rows go through json's C encoder, an item at a
    time: json.dumps with indent is pure Python, and took a tenth of a profile's time."""
    item = json.JSONEncoder(separators=(", ", ": "), allow_nan=allow_nan).encode

    def write(value: Any, indent: str) -> str:
        inner = indent + "  "
        if type(value) is dict and value:
            rows = [f"{inner}{item(_key(k))}: {write(v, inner)}" for k, v in value.items()]
            return "{\n" + ",\n".join(rows) + "\n" + indent + "}"
        if type(value) is list and any(type(v) in (dict, list) for v in value):
            return "[\n" + ",\n".join(inner + item(v) for v in value) + "\n" + indent + "]"
        return item(value)

    return write(value, "") + "\n"


def flatten(data: dict, prefix: str = "") -> dict:
    """Nested dicts as one level of dotted keys (for tables and data frames)."""
    out = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


# -- decode ---------------------------------------------------------------------------------------


class DecodeError(ValueError):
    """A JSON value that does not fit the report types; the message names the field."""


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _convert(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:
        return value
    if _is_union(tp):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where)
            except DecodeError as exc:
                errors.append(str(exc))
        raise DecodeError(errors[0] if errors else f"{where}: unexpected null")
    origin = typing.get_origin(tp)
    if origin is list:
        if not isinstance(value, list):
            raise DecodeError(f"{where}: expected a list")
        (item,) = typing.get_args(tp) or (Any,)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise DecodeError(f"{where}: expected an object")
        _, item = typing.get_args(tp) or (str, Any)
        return {k: _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return decode(tp, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DecodeError(f"{where}: expected a number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DecodeError(f"{where}: expected an integer")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise DecodeError(f"{where}: expected true or false")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise DecodeError(f"{where}: expected a string")
        return value
    return value


def decode(cls: type, data: Any, where: str = "") -> Any:
    """An instance of dataclass `cls` from its JSON form (unknown keys ignored, missing keys take
    their defaults); DecodeError names the first field that does not fit."""
    if not isinstance(data, dict):
        raise DecodeError(f"{where or cls.__name__}: expected an object")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        name = f"{where}.{f.name}" if where else f.name
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DecodeError(f"{name}: missing")
    return cls(**kwargs)


# -- older schemas --------------------------------------------------------------------------------

#: Measured fields that schema 1.x wrote flat into op and module rows (2.0 nests them in `measured`).
_FLAT_MEASURED = ("time_s", "achieved_flops", "achieved_bandwidth", "mfu", "hfu", "mbu", "time_vs_bound",
                  "cpu_time_s")


def upgrade_profile(data: dict) -> dict:
    """A schema 1.x profile report in the 2.0 shape (a copy; 2.x reports are returned as they are).

    1.x differences: no `kind`; measured fields flat in op and module rows; MLA sizes in an `mla`
    object of the attention row instead of `extra`; no `op_indices` on attention rows.
    """
    if not isinstance(data, dict) or not str(data.get("schema_version", "")).startswith("1."):
        return data
    out = dict(data, kind="profile")
    for section in ("ops", "modules"):
        rows = []
        for row in out.get(section) or []:
            if not isinstance(row, dict):
                rows.append(row)
                continue
            row = dict(row)
            flat = {k: row.pop(k) for k in _FLAT_MEASURED if k in row}
            if any(v is not None for v in flat.values()):
                row["measured"] = flat
            rows.append(row)
        out[section] = rows
    rows = []
    for row in out.get("attention") or []:
        if isinstance(row, dict) and "mla" in row:
            row = dict(row)
            row["extra"] = dict(row.pop("mla") or {})
        rows.append(row)
    out["attention"] = rows
    return out


#: Schema 2.0 kept the format settings in the workload section (any Deployment field found there
#: moves), and these in its options.
_DEPLOYMENT_OPTIONS = {"_tp": "tp", "_ep": "ep", "_memory_fraction": "memory_fraction"}


def upgrade_deployment(data: dict) -> dict:
    """A schema 1.x or 2.x report (profile, sweep or advise) with its deployment settings moved out
    of the workload into `deployment`, as schema 3.0 has them (a copy; 3.x reports are returned as
    they are). Underscore-prefixed options (`_tp`, `_ep`, `_memory_fraction`) leave the options."""
    version = str(data.get("schema_version", "")) if isinstance(data, dict) else ""
    if not version or version.split(".")[0] not in ("1", "2") or not isinstance(data.get("workload"), dict):
        return data
    workload = dict(data["workload"])
    deployment = {k: workload.pop(k) for k in [f.name for f in dataclasses.fields(Deployment)] if k in workload}
    options = workload.get("options")
    if isinstance(options, dict):
        deployment.update({name: options[key] for key, name in _DEPLOYMENT_OPTIONS.items() if key in options})
        workload["options"] = {k: v for k, v in options.items() if not str(k).startswith("_")}
    parallel = data.get("parallel")
    if isinstance(parallel, dict):  # a planned-parallel profile says its degrees there too
        deployment.setdefault("tp", parallel.get("tp", 1))
        deployment.setdefault("ep", parallel.get("ep", 1))
    return dict(data, workload=workload, deployment=deployment)


# -- JSON Schema ----------------------------------------------------------------------------------


def _schema_of(tp: Any, defs: dict) -> dict:
    if tp is Any:
        return {}
    if _is_union(tp):
        args = typing.get_args(tp)
        parts = [_schema_of(a, defs) for a in args if a is not type(None)]
        if type(None) in args:
            parts.append({"type": "null"})
        return parts[0] if len(parts) == 1 else {"anyOf": parts}
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return {"type": "array", "items": _schema_of(item, defs)}
    if origin is dict:
        _, item = typing.get_args(tp) or (str, Any)
        return {"type": "object", "additionalProperties": _schema_of(item, defs)}
    if dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder: recursive types refer to themselves
            defs[name] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    simple = {float: {"type": ["number", "null"]}, int: {"type": "integer"}, bool: {"type": "boolean"},
              str: {"type": "string"}}
    return dict(simple.get(tp, {}))


def _object_schema(cls: type, defs: dict) -> dict:
    hints = _hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):
        props[f.name] = _schema_of(hints[f.name], defs)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    doc = (cls.__doc__ or "").strip().split("\n")[0]
    out = {"type": "object", "properties": props, "required": required}
    if doc and not doc.startswith(f"{cls.__name__}("):
        out["description"] = doc
    return out


def json_schema(cls: type, title: str, version: str) -> dict:
    """The JSON Schema (draft 2020-12) of dataclass `cls` and everything under it.

    Floats allow null: JSON has no NaN or infinity, and the encoder writes those as null.
    """
    defs: dict = {}
    root = _object_schema(cls, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://rooflinekit.invalid/schema/{title}-{version}.schema.json",
        "title": f"rooflinekit {title} report, schema {version}",
        **root,
        "$defs": dict(sorted(defs.items())),
    }
