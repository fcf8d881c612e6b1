"""The request in words, as every output names it: the model's options as `key=value` pairs and
the non-default deployment ("TP 2, EP 8, fp8 weights, fp8 KV"), never a Python dict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rooflinekit.core.request import DTYPE_KEYS, Deployment
from rooflinekit.stages.efficiency_table import OWN_SOURCE_WORDS


def options_words(options: Mapping[str, Any] | None) -> str:
    """The model's -O options as "layers=2, mode=absorbed" ("" when none)."""
    return ", ".join(f"{k}={v}" for k, v in (options or {}).items())


def deployment_of(value: Deployment | Mapping[str, Any] | None) -> Deployment:
    """A report's deployment, from the type or its JSON form (a missing one is the default)."""
    if isinstance(value, Deployment):
        return value
    return Deployment.from_dict(dict(value or {}))


def deployment_words(deployment: Deployment | Mapping[str, Any] | None, dtype: str | None) -> str:
    """The non-default deployment settings in words; formats equal to the activation dtype left out."""
    return deployment_of(deployment).words(DTYPE_KEYS.get(dtype or "", dtype))


def request_words(dtype: str, deployment: Deployment | Mapping[str, Any] | None, q_len: int | None = None,
                  options: Mapping[str, Any] | None = None) -> str:
    """", bf16, TP 2, int4 weights, fp8 KV, 4 new tokens/seq, options layers=2": the dtype, the
    non-default deployment, the new tokens per sequence of multi-token decode and the model's options."""
    parts = [dtype, deployment_words(deployment, dtype)]
    if q_len is not None and q_len > 1:
        parts.append(f"{q_len} new tokens/seq")
    if options:
        parts.append(f"options {options_words(options)}")
    return "".join(f", {p}" for p in parts if p)


#: The words of a step priced with the entry's own ceilings or file, without --efficiency.
ENTRY_OWN = "the hardware entry's own"


def efficiency_name(report: Any) -> str:
    """The efficiency source a report's expected step is priced with, as `--efficiency` names it:
    the one given; else the hardware entry's own (a calibrated entry's measured ceilings, or the
    efficiency file its entry names); else `published`, the committed table."""
    given = getattr(deployment_of(getattr(report, "deployment", None)), "efficiency", None)
    if given:
        return given
    hardware = getattr(report, "hardware", None)
    if getattr(hardware, "calibrated", False):
        return f"{ENTRY_OWN} (calibrated ceilings)"
    conventions = getattr(getattr(report, "totals", None), "expected_conventions", None) or []
    if any(c.startswith(OWN_SOURCE_WORDS) for c in conventions):
        return ENTRY_OWN
    return "published"
