"""The `aic` efficiency file: fractions per kernel class (with shape curves) from AIConfigurator's
measured kernels, in the layout of the committed table, written once under the user's cache folder
per AIConfigurator version, system and hardware entry."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from rooflinekit.plugin import PUBLISHED_EFFICIENCY, UserError
from rooflinekit_plugins.aic import fractions as fr
from rooflinekit_plugins.aic.measure import BACKEND, aic_version, database, systems_with_data
from rooflinekit_plugins.aic.systems import OWN, system_for

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (AIConfigurator needs 3.11)
    import tomli as tomllib

#: Bumped when what is derived changes: the cached files of older derivations are not reused.
DERIVATION = 4


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rooflinekit" / "aic"


def source_file(hw) -> Path:
    """The efficiency file for hardware entry `hw`, derived and written where not yet cached."""
    if getattr(hw, "calibrated", False):
        raise UserError(f"--efficiency aic: '{hw.name}' is a calibrated entry, whose measured ceilings are taken as "
                        "achievable; the aic fractions are of datasheet peaks (use the datasheet entry)")
    system = system_for(hw.name, tuple(hw.aliases))
    have = systems_with_data()
    if system is None or system.name not in have:
        mapped = sorted({k for k, v in OWN.items() if v in have})
        raise UserError(f"--efficiency aic: AIConfigurator {aic_version()} has no measured kernels for '{hw.name}' "
                        f"(its systems: {', '.join(have)}; entries mapped to them: {', '.join(mapped)}, and H800 "
                        "to h100_sxm); use --efficiency published")
    peaks = {d: float(hw.peak_flops[d]) for d in fr.FORMATS if d in hw.peak_flops}
    entry = fr.Entry(peaks, float(hw.memory_bandwidth), system.note)
    db = database(system.name)
    key = json.dumps([DERIVATION, hw.name, peaks, entry.bandwidth, system.note], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    slug = "".join(c if c.isalnum() else "-" for c in hw.name.lower())
    path = cache_dir() / f"aic-{aic_version()}-{system.name}-{BACKEND}-{db.version}-{slug}-{digest}.toml"
    if not path.is_file():
        _write_atomically(path, render(derive(db, entry), hw.name, db.label, system.note, system.name))
    return path


def variant(hw, *, routing: str | None = None, fp8: str | None = None) -> Path:
    """The aic file of `hw` with other [kernel_times] settings: the MoE tables' `routing` and the
    database format rooflinekit's fp8 is asked in (`fp8_block` for block-scaled checkpoints such as
    DeepSeek-V3's), written beside the cached file once per setting."""
    path = source_file(hw)
    text = path.read_text()
    if routing:
        text = text.replace('routing = "balanced"', f"routing = {_s(routing)}")
    if fp8:
        text = text.replace('formats = { fp8 = "fp8" }', f"formats = {{ fp8 = {_s(fp8)} }}")
    out = path.with_name(f"{path.stem}-{routing or 'balanced'}-{fp8 or 'fp8'}.toml")
    if not out.is_file() or out.read_text() != text:
        _write_atomically(out, text)
    return out


def _need(point: fr.Point | None, what: str, label: str) -> fr.Point:
    if point is None:
        raise UserError(f"--efficiency aic: the {label} has no measured {what}; use --efficiency published")
    return point


def _curve(key: str, at: tuple[int, ...], lists: dict[str, list[fr.Point | None]]) -> dict:
    """A shape curve: the default-format list and each other format's where measured at every point."""
    kept = {name: points for name, points in lists.items() if all(p is not None for p in points)}
    sources = [" | ".join(f"{name}: {points[i].source}" for name, points in kept.items()) for i in range(len(at))]
    return {"key": key, "at": list(at), **{n: [p.value for p in ps] for n, ps in kept.items()}, "sources": sources}


def derive(db, entry: fr.Entry) -> dict:
    """Every class's fractions (values with sources) and curves from the database."""
    label = db.label
    small_bw = {d: fr.gemm(db, entry, fr.SMALL_AT, d, "bandwidth") for d in fr.FORMATS}
    small_c = {d: fr.gemm(db, entry, fr.SMALL_ROWS[-1], d, "compute") for d in fr.FORMATS}
    large_c = {d: fr.gemm(db, entry, fr.LARGE_AT, d, "compute") for d in fr.FORMATS}
    prefill = {d: fr.prefill(db, entry, fr.PREFILL_AT, d) for d in fr.FORMATS}
    decode = _need(fr.decode(db, entry), "decode attention", label)
    for what, point in (("decode GEMMs", small_bw["bf16"]), ("GEMMs", small_c["bf16"]),
                        ("prefill GEMMs", large_c["bf16"]), ("prefill attention", prefill["bf16"])):
        _need(point, f"bf16 {what}", label)
    streaming = "a GEMM past small_gemm_max_rows that is still below the ridge streams its weights as a decode GEMM does: "
    classes = {
        "gemm_small": {**_values("compute", small_c), **_values("bandwidth", small_bw),
                       "curve": _curve("rows", fr.SMALL_ROWS, {
                           "bandwidth": [fr.gemm(db, entry, m, "bf16", "bandwidth") for m in fr.SMALL_ROWS],
                           "bandwidth_fp8": [fr.gemm(db, entry, m, "fp8", "bandwidth") for m in fr.SMALL_ROWS]})},
        "gemm_large": {**_values("compute", large_c),
                       **_values("bandwidth", {d: _as(p, streaming + "classes.gemm_small's figure, ")
                                               for d, p in small_bw.items()}),
                       "curve": _curve("rows", fr.LARGE_ROWS, {
                           "compute": [fr.gemm(db, entry, m, "bf16", "compute") for m in fr.LARGE_ROWS],
                           "compute_fp8": [fr.gemm(db, entry, m, "fp8", "compute") for m in fr.LARGE_ROWS]})},
        "attention_decode": {"compute": _as(prefill["bf16"], "not binding for decode attention (far below the "
                                            "ridge); classes.attention_prefill's figure, "),
                             "bandwidth": decode},
        "attention_prefill": {**_values("compute", prefill),
                              "bandwidth": _as(decode, "not binding for prefill attention (compute-bound); "
                                               "classes.attention_decode's figure, "),
                              "curve": _curve("query_len", fr.PREFILL_LENGTHS, {
                                  "compute": [fr.prefill(db, entry, n, "bf16") for n in fr.PREFILL_LENGTHS],
                                  "compute_fp8": [fr.prefill(db, entry, n, "fp8") for n in fr.PREFILL_LENGTHS]})},
    }
    published = tomllib.loads(Path(PUBLISHED_EFFICIENCY).read_text())
    unmeasured = f"{label} has no measured kernels of this kind; the published table's figure: "
    element = published["classes"]["elementwise"]
    classes["elementwise"] = {k: fr.Point(element[k], unmeasured + element["sources"][k])
                              for k in ("compute", "bandwidth")}
    launch = {k: fr.Point(published["launch"][k], f"{label} measures kernels, not launches apart; the published "
                          f"table's figure: {published['launch']['sources'][k]}") for k in ("decode_s", "prefill_s", "host_prefill_s")}
    return {"classes": classes, "launch": launch, "small_gemm_max_rows": published["small_gemm_max_rows"],
            "experts": fr.experts_curve(db, entry)}


def _values(term: str, by_dtype: dict[str, fr.Point | None]) -> dict[str, fr.Point]:
    """`term` (bf16, the default format) and `term_fp8` where measured."""
    out = {term: by_dtype["bf16"]}
    if by_dtype.get("fp8") is not None:
        out[f"{term}_fp8"] = by_dtype["fp8"]
    return out


def _as(point: fr.Point | None, why: str) -> fr.Point | None:
    return None if point is None else fr.Point(point.value, why + point.source)


def _s(text: str) -> str:
    return json.dumps(text)  # a TOML basic string: JSON's escapes are TOML's


def render(derived: dict, hw_name: str, label: str, note: str, system: str = "") -> str:
    """The efficiency file's text."""
    lines = [f"# Achievable fractions for {hw_name}, derived by rooflinekit's aic source from the {label}:",
             "# time at the entry's datasheet peak (or bandwidth) / AIConfigurator's measured time, at the",
             "# shapes each source states. Collectives are not in this file: the hardware entry's links price them.",
             *([f"# {note}."] if note else []), "", "version = 1",
             f"small_gemm_max_rows = {derived['small_gemm_max_rows']}"]
    for name, values in derived["classes"].items():
        lines += ["", f"[classes.{name}]"]
        points = {k: v for k, v in values.items() if k != "curve"}
        lines += [f"{k} = {p.value!r}" for k, p in points.items()]
        lines += ["", f"[classes.{name}.sources]"] + [f"{k} = {_s(p.source)}" for k, p in points.items()]
        curve = values.get("curve")
        if curve:
            lines += ["", f"[classes.{name}.curve]", f"key = {_s(curve['key'])}", f"at = {curve['at']!r}"]
            lines += [f"{k} = {v!r}" for k, v in curve.items() if k not in ("key", "at", "sources")]
            lines += ["sources = ["] + [f"    {_s(s)}," for s in curve["sources"]] + ["]"]
    experts = derived.get("experts")
    if experts:
        lines += ["", "[experts.curve]", f"key = {_s(experts['key'])}", f"at = {experts['at']!r}",
                  f"bandwidth = {experts['bandwidth']!r}", "sources = ["]
        lines += [f"    {_s(s)}," for s in experts["sources"]] + ["]"]
    lines += ["", "[launch]"] + [f"{k} = {p.value!r}" for k, p in derived["launch"].items()]
    lines += ["", "[launch.sources]"] + [f"{k} = {_s(p.source)}" for k, p in derived["launch"].items()]
    if system:
        lines += ["", "# Each GEMM, GQA-family attention, MoE layer and all-reduce priced at its own shape from the",
                  "# database (rooflinekit.stages.kernel_times); the fractions above price the rest. routing: the",
                  "# MoE tables' token distribution (balanced, as rooflinekit's expected distinct experts assume;",
                  "# AIConfigurator's estimates default to power_law_1.2); formats: rooflinekit's fp8 as the",
                  "# database's fp8 (per-tensor) or fp8_block (DeepSeek's 128 x 128 block scales).",
                  "[kernel_times]", 'source = "aic"', f"system = {_s(system)}", 'routing = "balanced"',
                  'fmha = "bfloat16"', 'formats = { fp8 = "fp8" }']
    return "\n".join(lines) + "\n"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as fh:
            fh.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
