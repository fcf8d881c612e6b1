"""Reading saved reports back: load and check a profile or sweep JSON report, the figures that
`sweep`, `plot` and `compare` all derive from a profile report, and the comma-list option parser.

A report is checked before any command uses it: a file that is not a rooflinekit report, a report
of another schema major version, or one that lacks a field the commands read is answered with one
line naming what is wrong (UserError), never a KeyError.
"""

from __future__ import annotations

import json
import math
import re
import sys
from numbers import Real
from pathlib import Path

from rooflinekit.core.codec import DecodeError, upgrade_profile
from rooflinekit.core.errors import ReportFileError
from rooflinekit.core.plan import PLAN_SCHEMA_VERSION
from rooflinekit.core.report import Report
from rooflinekit.core.schemas import report_schema
from rooflinekit.core.version import READABLE_SCHEMAS
from rooflinekit.outputs.plan_io import plan_from_dict, plan_schema
from rooflinekit.stages.hardware import check_value

#: The schema major versions this rooflinekit reads ("1" of "1.0"): the current one and the last.
SCHEMA_MAJORS = tuple(dict.fromkeys(v.split(".")[0] for v in READABLE_SCHEMAS))

#: JSON types of the generated JSON Schema (rooflinekit.core.schemas.report_schema) -> the check of a value.
_JSON_TYPES_OK = {
    "number": lambda v: isinstance(v, Real) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


#: Every kind of report rooflinekit writes (the `kind` of its JSON).
REPORT_KINDS = ("profile", "sweep", "advise", "plan", "compare")


def report_kind(data: object) -> str | None:
    """'profile', 'sweep', 'advise', 'plan' or 'compare', or None when `data` does not look like a
    rooflinekit report at all.

    A report says its kind (`"kind": "profile"`, ...) beside its `schema_version`; a comparison
    (`compare -f json`) has no schema version, and is known by its rows and its two sides; a profile
    report written before `kind` existed is recognised by `schema_version` with `totals` and
    `modules`. This only names the kind: `check_report` says whether the fields the commands read
    are there.
    """
    if not isinstance(data, dict):
        return None
    kind = data.get("kind")
    if kind == "compare" and isinstance(data.get("rows"), list) and "a" in data and "b" in data:
        return kind
    if "schema_version" not in data:
        return None
    if kind in REPORT_KINDS:
        return kind
    if kind is None and "totals" in data and "modules" in data:
        return "profile"
    return None


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def _type_ok(value: object, node: dict) -> bool:
    """Whether `value` has a type that `node` (one node of the generated JSON Schema) allows."""
    if "anyOf" in node:
        return any(_type_ok(value, n) for n in node["anyOf"])
    if "$ref" in node:
        return isinstance(value, dict)
    kinds = node.get("type")
    if kinds is None:
        return True
    return any(_JSON_TYPES_OK[k](value) for k in ([kinds] if isinstance(kinds, str) else kinds))


def _object_node(node: dict, value: object, defs: dict) -> dict | None:
    """The object schema `node` refers to for `value` (through $ref, or the anyOf branch of one)."""
    for n in node.get("anyOf", [node]):
        if "$ref" in n and isinstance(value, dict):
            return defs[n["$ref"].rsplit("/", 1)[1]]
    return None


def _what(node: dict) -> str:
    """' (an object)' or ' (a list)' after a field that must be one, else ''."""
    nodes = node.get("anyOf", [node])
    if any("$ref" in n or n.get("type") == "object" for n in nodes):
        return " (an object)"
    return " (a list)" if any(n.get("type") == "array" for n in nodes) else ""


def schema_problems(data: dict, node: dict, defs: dict, where: str = "") -> list[str]:
    """Fields of `data` that object schema `node` requires and it lacks, or that have a type the
    schema does not allow; objects and lists of objects under it are checked the same way (a
    list's first bad element only)."""
    problems: list[str] = []
    required = set(node.get("required", ()))
    for key, prop in node.get("properties", {}).items():
        name = f"{where}.{key}" if where else key
        if key not in data:
            if key in required:
                problems.append(name + _what(prop))
            continue
        value = data[key]
        if not _type_ok(value, prop):
            problems.append(name + _what(prop))
            continue
        inner = _object_node(prop, value, defs)
        if inner is not None:
            problems += schema_problems(value, inner, defs, name)
        elif isinstance(value, list) and "$ref" in prop.get("items", {}):
            item = defs[prop["items"]["$ref"].rsplit("/", 1)[1]]
            for i, element in enumerate(value):
                bad = ([f"{name}[{i}] (an object)"] if not isinstance(element, dict)
                       else schema_problems(element, item, defs, f"{name}[{i}]"))
                if bad:
                    problems += bad
                    break  # the first bad element says enough
    return problems


#: Sections the commands read that a report's dataclass gives a default (so its schema does not
#: require them): a report without them is not usable, although it decodes.
READ_SECTIONS = {"profile": ("attention_totals", "modules", "attention"), "sweep": ("points",),
                 "advise": ("levers",)}


def check_report(data: dict, kind: str) -> list[str]:
    """The problems of a `kind` report: wrong schema major version, missing or mistyped fields
    against the JSON Schema generated from the report dataclasses (a 1.x profile upgraded first)."""
    version = data.get("schema_version")
    majors = (PLAN_SCHEMA_VERSION.split(".")[0],) if kind == "plan" else SCHEMA_MAJORS
    if not isinstance(version, str) or version.split(".")[0] not in majors:
        readable = " and ".join(f"{m}.x" for m in majors)
        return [f"schema_version {version!r} (this rooflinekit reads schema {readable})"]
    schema = plan_schema() if kind == "plan" else report_schema(kind)
    node = dict(schema, required=[*schema["required"], *READ_SECTIONS.get(kind, ())])
    return schema_problems(upgrade_profile(data) if kind == "profile" else data, node, schema["$defs"])


#: Numbers a report holds under these keys (or in an object under such a key: `peaks.bf16`) are
#: counts, sizes, rates, times or ratios of them: never negative.
_NON_NEGATIVE = re.compile(
    r"flops|bytes|bandwidth|intensity|ridge|peak|time|_s$|share|amplification|mfu|hfu|mbu|per_s"
    r"|^(batch|batches|context|contexts|q_len|tokens|count|calls|ops|layers|recognised|parameters|modules|"
    r"depth|heads|num_heads|num_kv_heads|head_dim|v_head_dim|window|chunk|repeats|warmup|gpus|tp|ep)$")
#: Signed by nature, although their names match the pattern above.
_SIGNED = {"unattributed_s", "headroom_bytes"}  # headroom: negative when the step does not fit
#: What the user or a plugin put there (model options, an architecture's own fields): not checked for sign.
_FREE = {"options", "extra"}
#: No count, size or time in a report comes near this: larger is a corrupt or hand-edited file
#: (and would overflow to inf in the products plot and compare take).
MAX_MAGNITUDE = 1e30
#: Deeper than this is no rooflinekit report (its own nesting is a handful of levels).
MAX_DEPTH = 64


def _field(path: list) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _shown(value: Real) -> str:
    """A number in a message: `:g`, or the digits of an integer too large for a float (a JSON
    integer can be any length; 1 followed by 400 zeros is no float)."""
    if isinstance(value, int) and abs(value) > 1e300:
        return f"an integer of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
    return f"{value:g}"


def check_values(data: object, limit: int = 3) -> list[str]:
    """Numbers that no report can hold, each as 'field: what' (at most `limit`): non-finite (NaN,
    Infinity, or a number too large for a float, as 1e400), negative counts, sizes and times,
    magnitudes past MAX_MAGNITUDE, hardware ceilings outside the plausible bounds of the hardware
    database, and nesting past MAX_DEPTH. Walks without recursion."""
    problems: list[str] = []
    stack: list[tuple[object, list, bool]] = [(data, [], False)]
    while stack and len(problems) < limit:
        value, path, free = stack.pop()
        if len(path) > MAX_DEPTH:
            problems.append(f"{_field(path[:4])}...: nested too deeply (over {MAX_DEPTH} levels)")
            break
        if isinstance(value, dict):
            items = [(v, path + [str(k)], free or k in _FREE) for k, v in value.items()]
            stack.extend(reversed(items))
            continue
        if isinstance(value, list):
            stack.extend(reversed([(v, path + [i], free) for i, v in enumerate(value)]))
            continue
        if isinstance(value, bool) or not isinstance(value, Real):
            continue
        where = _field(path)
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{where}: not a finite number ({value})")
            continue
        keys = [p for p in path if isinstance(p, str)][-2:]
        if value < 0 and not free and keys and keys[-1] not in _SIGNED and any(_NON_NEGATIVE.search(k) for k in keys):
            problems.append(f"{where}: negative ({_shown(value)})")
        elif abs(value) > MAX_MAGNITUDE:
            problems.append(f"{where}: implausibly large ({_shown(value)})")
    return problems


def _check_hardware(data: dict) -> list[str]:
    """The hardware section's ceilings within the hardware database's plausible bounds, its ridge
    above zero."""
    hw = data.get("hardware")
    if not isinstance(hw, dict):
        return []
    problems = []
    for key, bound in (("peak_flops", "peak_flops"), ("bandwidth", "memory_bandwidth")):
        if isinstance(hw.get(key), Real) and not isinstance(hw.get(key), bool):
            why = check_value(bound, hw[key])
            if why:
                problems.append(f"hardware.{key}: {why}")
    if not (isinstance(hw.get("ridge"), Real) and hw["ridge"] > 0):
        problems.append("hardware.ridge: not a positive number")
    return problems


def load_report(path: str, kinds: tuple[str, ...] = ("profile", "sweep"), takes: str | None = None) -> Report | dict:
    """Read a rooflinekit JSON report from `path`: a profile report as a `Report` (schema 1.x
    upgraded), any other kind (`kinds`: those the command takes) as its dict; ReportFileError if it
    is not a usable one. `takes` says what the command takes ("compare takes two profile reports"),
    in the line that answers a report of another kind."""

    file = Path(path)
    if not file.exists():
        raise ReportFileError(f"report not found: {path}")
    if file.is_dir():
        raise ReportFileError(f"{path} is a folder: give a report .json file")
    try:
        data = json.loads(file.read_text())
    except UnicodeDecodeError:
        raise ReportFileError(f"{path} is not a rooflinekit report: not a JSON text file") from None
    except json.JSONDecodeError as exc:
        raise ReportFileError(f"{path} is not a rooflinekit report: invalid JSON at line {exc.lineno}") from None
    except RecursionError:
        raise ReportFileError(f"{path} is not a rooflinekit report: JSON nested too deeply") from None
    except ValueError:  # an integer of more digits than Python converts (4300): no report holds one
        raise ReportFileError(f"{path} is not a rooflinekit report: it holds an integer past the limit "
                              f"({sys.get_int_max_str_digits()} digits) of Python's integer conversion") from None
    except OSError as exc:
        raise ReportFileError(f"cannot read report {path}: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise ReportFileError(f"{path} is not a rooflinekit report: the top level is a JSON "
                              f"{_JSON_TYPES.get(type(data), type(data).__name__)}, not an object")
    kind = report_kind(data)
    if kind is None:
        raise ReportFileError(f"{path} is not a rooflinekit report (write one with `rooflinekit profile -f json`)")
    if kind not in kinds:
        if takes:
            raise ReportFileError(f"{takes}; got {_a(kind)} report: {path}")
        raise ReportFileError(f"{path} is {_a(kind)} report; this command takes {_a(' or '.join(kinds))} report")
    values = check_values(data)  # before the field check: its messages say which number and why
    if values:
        raise ReportFileError(f"{path} is not a usable rooflinekit {kind} report: " + "; ".join(values))
    problems = check_report(data, kind)
    if problems:
        raise ReportFileError(f"{path} is not a usable rooflinekit {kind} report: missing or invalid "
                              + "; ".join(problems))
    problems = _check_hardware(data) if kind not in ("plan", "compare") else []  # a plan names its hardware
    if problems:
        raise ReportFileError(f"{path} is not a usable rooflinekit {kind} report: " + "; ".join(problems))
    if kind == "plan":
        _check_plan(path, data)
    if kind != "profile":
        return data
    try:
        return Report.from_dict(data)
    except (DecodeError, TypeError, ValueError) as exc:
        raise ReportFileError(f"{path} is not a usable rooflinekit profile report: {exc}") from None


def _check_plan(path: str, data: dict) -> None:
    """A plan read back: its dataclasses decode, and its indices (`pareto`, `best_index`,
    `closest`) name configurations it holds."""
    try:
        plan = plan_from_dict(data)
    except (DecodeError, TypeError, ValueError) as exc:
        raise ReportFileError(f"{path} is not a usable rooflinekit plan report: {exc}") from None
    n = len(plan.configs)
    named = [("pareto", i) for i in plan.pareto] + [("best_index", plan.best), ("closest", plan.closest)]
    bad = [f"{field} {i}" for field, i in named if i is not None and not 0 <= i < n]
    if bad:
        raise ReportFileError(f"{path} is not a usable rooflinekit plan report: {', '.join(bad[:3])} "
                              f"not an index into configs ({n} configurations)")


def attention_figures(report: Report) -> dict:
    """All recognised attention layers of a profile report together: FLOPs, bytes (architecture
    minimum and as executed), KV bytes, cache bytes per token (in all and per layer), intensities."""
    at = report.attention_totals
    recognised = [a for a in report.attention if a.recognised]
    bytes_min = sum(a.bytes_min or 0.0 for a in recognised)
    bytes_exec = sum(a.bytes_executed for a in recognised)
    flops_exec = sum(a.flops_executed for a in recognised)
    layers = at.recognised  # len(recognised), also where rows stand for several layers (a fitted sweep's)
    per_token = at.cache_bytes_per_token
    return {
        "layers": at.layers,
        "recognised": at.recognised,
        "flops_model": at.flops_model,
        "flops_executed": flops_exec,
        "bytes_min": bytes_min,
        "bytes_executed": bytes_exec,
        "kv_bytes_min": at.kv_bytes_min,
        "kv_bytes_executed": at.kv_bytes_executed,
        "cache_bytes_per_token": per_token,
        "cache_bytes_per_token_per_layer": per_token / layers if layers and per_token is not None else None,
        "intensity_min": at.intensity_min,
        "intensity_executed": flops_exec / bytes_exec if bytes_exec else None,
    }
