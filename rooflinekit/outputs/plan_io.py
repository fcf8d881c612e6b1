"""A plan result read back from its JSON (`PlanResult.to_dict()`), and the shipped JSON Schema of
that JSON (rooflinekit/schema/plan-1.1.schema.json), derived from the dataclasses."""

from __future__ import annotations

import json
from pathlib import Path

from rooflinekit.core import codec
from rooflinekit.core.plan import PLAN_SCHEMA_VERSION, PlanResult

PLAN_SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schema" / f"plan-{PLAN_SCHEMA_VERSION}.schema.json"


def plan_from_dict(data: dict) -> PlanResult:
    """The PlanResult of `PlanResult.to_dict()`'s JSON (whose `best` is the best configuration
    itself and `best_index` its index into `configs`)."""
    fields = {k: v for k, v in data.items() if k != "best_index"}
    fields["best"] = data.get("best_index")
    return codec.decode(PlanResult, fields)


def as_plan(result: PlanResult | dict) -> PlanResult:
    """`result` as a PlanResult (a dict is read as `PlanResult.to_dict()`'s JSON)."""
    return result if isinstance(result, PlanResult) else plan_from_dict(result)


def plan_schema() -> dict:
    """The JSON Schema (draft 2020-12) of `PlanResult.to_dict()`: the dataclasses' schema with
    `best` as the best configuration (or null) and `best_index` its index."""
    schema = codec.json_schema(PlanResult, "plan", PLAN_SCHEMA_VERSION)
    props = schema["properties"]
    props["model"] = {"type": "object", "description": "the model planned: its name, path, kind and options"}
    props["best"] = {"anyOf": [{"$ref": "#/$defs/PlanConfig"}, {"type": "null"}],
                     "description": "the best configuration that meets the targets (null: none does)"}
    props["best_index"] = {"anyOf": [{"type": "integer"}, {"type": "null"}],
                           "description": "the best configuration's index into configs"}
    props["pareto"]["description"] = ("indices into configs of the Pareto front of tokens/s per GPU against "
                                      "tokens/s per user, by tokens/s per GPU descending")
    props["kind"] = {"const": "plan"}
    schema["required"] = [*schema["required"], "best_index", "schema_version", "kind"]
    schema["title"] = f"rooflinekit plan result, schema {PLAN_SCHEMA_VERSION}"
    return schema


def write_plan_schema() -> Path:
    """Regenerate the shipped plan schema file (after changing a plan dataclass)."""
    PLAN_SCHEMA_FILE.write_text(json.dumps(plan_schema(), indent=1) + "\n")
    return PLAN_SCHEMA_FILE
