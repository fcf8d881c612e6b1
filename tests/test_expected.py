"""The expected step beside the bound (rooflinekit.stages.expected), recomputed here by hand from a
report's op rows, the committed table of achievable fractions and the launch cost per kernel."""

from __future__ import annotations

import dataclasses
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.capture.records import OpRecord
from rooflinekit.stages.efficiency_table import TABLE_FILE
from rooflinekit.stages.expected import expected_step
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, MODELS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

GQA = EXAMPLES / "llama_gqa.py"
MOE = MODELS / "experts3d.py"
TINY = {"layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512, "vocab": 1000}
TABLE = tomllib.loads(TABLE_FILE.read_text())
PRODUCTS = {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm", "aten.linear", "aten.matmul"}


def report(path=GQA, phase="decode", batch=2, context=64, tp=1, ep=1, **options):
    options = options or TINY
    workload = Workload(phase, batch, context, "bf16", "meta", tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options), workload, Deployment("H800", tp=tp, ep=ep)).report


def on_curve(cls: dict, which: str, size: float | None) -> float:
    """A class's fraction at `size`, by hand: the curve's points interpolated in log(size), held
    outside, at the envelope (compute: min of f(x) and f(p) x / p for points p <= x; bandwidth: the
    lowest at or below x); the class constant without a curve or a size."""
    curve = cls.get("curve", {})
    if which not in curve or size is None:
        return cls[which]
    at, values = curve["at"], curve[which]
    if size <= at[0]:
        f = values[0]
    elif size >= at[-1]:
        f = values[-1]
    else:
        i = next(j for j in range(1, len(at)) if size < at[j])
        f = values[i - 1] + (values[i] - values[i - 1]) * math.log(size / at[i - 1]) / math.log(at[i] / at[i - 1])
    below = [(p, v) for p, v in zip(at, values, strict=True) if p <= size]
    if which == "compute":
        return min([f, *(v * size / p for p, v in below)])
    return min([f, *(v for _, v in below)])


def experts_bandwidth(per_expert: float) -> float:
    """A grouped expert GEMM's bandwidth fraction by hand: the table's [experts] curve at one expert's
    matrix bytes, its bytes growing with that size (the compute envelope)."""
    curve = TABLE["experts"]["curve"]
    return on_curve({"curve": {"at": curve["at"], "compute": curve["bandwidth"]}}, "compute", per_expert)


def by_hand(r) -> float:
    """The expected step from the report's rows alone: each op of the step one kernel, each with its
    GPU-side launch; in prefill the host issues the kernels ahead of the GPU, so the step is the
    longer of that and the host's issue time for every kernel."""
    gpu, kernels = gpu_by_hand(r)
    return max(gpu, kernels * TABLE["launch"].get(f"host_{r.workload.phase}_s", 0.0))


def gpu_by_hand(r) -> tuple[float, int]:
    """(the GPU's time: kernels, their GPU-side launches and the collectives; the kernels)."""
    classes, launch = TABLE["classes"], TABLE["launch"][f"{r.workload.phase}_s"]
    in_attention = {i for row in r.attention for i in row.op_indices}
    total, kernels = 0.0, 0
    for op in r.ops:
        if op.kind == "collective" or (op.flops == 0 and op.bytes == 0):
            continue
        size = None
        if op.name in PRODUCTS:
            first = op.shapes.split(",")[1 if op.name in ("aten.addmm", "aten.baddbmm") else 0]
            dims = [int(d) for d in first.split("x")]
            size = dims[-2] if op.name in ("aten.bmm", "aten.baddbmm") else math.prod(dims[:-1])
        if op.kind == "fused":
            size = int(op.shapes.split(",")[0].split("x")[-2])  # the query's length
            cls = classes[f"attention_{r.workload.phase}"]
        elif op.name in PRODUCTS and op.index in in_attention:
            cls = classes[f"attention_{r.workload.phase}"]
        elif op.name in PRODUCTS:
            cls = classes["gemm_small" if size <= TABLE["small_gemm_max_rows"] else "gemm_large"]
        else:
            cls = classes["elementwise"]
        peak = r.hardware.peaks[op.dtype]
        compute = cls[f"compute_{op.dtype}"] if f"compute_{op.dtype}" in cls else on_curve(cls, "compute", size)
        total += max(op.flops / (compute * peak), op.bytes / (on_curve(cls, "bandwidth", size) * r.hardware.bandwidth))
        total += launch
        kernels += 1
    return total + (getattr(r.comm, "expected_time_s", 0.0) or r.comm.time_s), kernels


# (8, 1024, TP 2): its kernels alone (188 us) are shorter than their issue (285 us), with its
# all-reduces (181 us) longer: the host is hidden only because collectives count as the GPU's time
@pytest.mark.parametrize("batch,context,tp,waits", [(1, 256, 1, True), (8, 4096, 1, False), (1, 64, 2, True),
                                                    (8, 1024, 2, False)])
def test_eager_prefill_waits_for_the_host_only_where_its_kernels_are_shorter(batch, context, tp, waits):
    """The host issues prefill's kernels ahead of the GPU (5 us each): a small step's kernels are
    shorter than their launches, so it takes the host's issue time; a large one hides the host and
    takes its kernels with a queued launch's 0.9 us each. Under TP 2 the all-reduces are GPU time
    the host runs ahead under too."""
    r = report(phase="prefill", batch=batch, context=context, tp=tp)
    gpu, kernels = gpu_by_hand(r)
    if tp > 1:
        assert r.comm.expected_time_s > 0
    if (batch, context, tp) == (8, 1024, 2):
        assert gpu - r.comm.expected_time_s < kernels * 5e-6 < gpu
    assert TABLE["launch"]["host_prefill_s"] == 5e-6 and TABLE["launch"]["prefill_s"] == 0.9e-6
    assert r.totals.expected_step_s == pytest.approx(kernels * 5e-6 if waits else gpu, rel=1e-9)
    assert (kernels * 5e-6 > gpu) == waits
    said = [c for c in r.totals.expected_conventions if c.startswith("host-bound:")]
    assert len(said) == waits and (not waits or f"issuing the {kernels} kernels" in said[0])
    rows = [op.expected_s for op in r.ops if op.kind != "collective" and op.flops + op.bytes > 0]
    assert len(rows) == kernels and sum(rows) == pytest.approx(r.totals.expected_step_s - r.comm.expected_time_s)


@pytest.mark.parametrize("phase,batch,context", [("decode", 2, 64), ("prefill", 1, 256)])
def test_expected_step_is_the_sum_over_kernels_by_hand(phase, batch, context):
    r = report(phase=phase, batch=batch, context=context)
    t = r.totals
    assert t.expected_step_s == pytest.approx(by_hand(r), rel=1e-9)
    assert t.expected_step_s >= t.predicted_step_s >= t.time_bound_s
    assert any("achievable" in c or "fraction" in c for c in t.expected_conventions)
    launch = "CUDA graph" if phase == "decode" else "eagerly"
    assert any(launch in c for c in t.expected_conventions)
    if phase == "decode":
        assert t.tokens_per_s_per_user == pytest.approx(1 / t.expected_step_s)
    else:
        assert t.tokens_per_s_per_user is None


TABLES = sorted(TABLE_FILE.parent.glob("efficiency*.toml"))


@pytest.mark.parametrize("path", TABLES, ids=[p.stem for p in TABLES])
def test_the_table_has_a_source_for_every_value_and_fractions_at_most_one(path):
    table = tomllib.loads(path.read_text())
    assert set(table["classes"]) == set(TABLE["classes"])
    for name, entry in table["classes"].items():
        values = {k: v for k, v in entry.items() if k not in ("sources", "curve")}
        curve = entry.get("curve", {})
        assert len(curve.get("sources", [])) == len(curve.get("at", [])), name  # a source per point
        assert all(s.strip() for s in curve.get("sources", [])), name
        assert all(0 < v <= 1 for k, vs in curve.items() if k not in ("key", "at", "sources") for v in vs), name
        assert set(values) <= set(entry["sources"]), name
        assert all(0 < v <= 1 for v in values.values()), name
        assert all(entry["sources"][k].strip() for k in values), name
    assert set(table["launch"]) - {"sources"} <= set(table["launch"]["sources"])
    # no class boundary makes a bigger GEMM cheaper: small and large GEMMs share compute and bandwidth
    small, large = table["classes"]["gemm_small"], table["classes"]["gemm_large"]
    assert {k: v for k, v in small.items() if k != "sources"} == {k: v for k, v in large.items() if k != "sources"}
    assert {k: v for k, v in small.get("curve", {}).items() if k != "sources"} == \
        {k: v for k, v in large.get("curve", {}).items() if k != "sources"}


@pytest.mark.parametrize("hardware, table", [("A100 SXM 80GB", "efficiency-ampere.toml"),
                                             ("V100 SXM2 16GB", "efficiency-volta.toml"),
                                             ("MI300X", "efficiency-cdna3.toml"), ("B200", "efficiency-blackwell.toml"),
                                             ("MI250 GCD", "efficiency.toml"), ("H200 SXM", "efficiency.toml")])
def test_a_part_is_priced_with_its_generations_table_by_hand(hardware, table):
    """The step recomputed by hand from the op rows and the generation's own file; a generation
    without one takes the Hopper table and the report says so."""
    global TABLE
    workload = Workload("prefill", 1, 256, "bf16", "meta", tuple(sorted(TINY.items())))
    r = run_profile(load_source(str(GQA), TINY), workload, Deployment(hardware)).report
    saved, TABLE = TABLE, tomllib.loads((TABLE_FILE.parent / table).read_text())
    try:
        assert r.totals.expected_step_s == pytest.approx(by_hand(r), rel=1e-9)
    finally:
        TABLE = saved
    words = " ".join(r.totals.expected_conventions)
    assert f"fractions from {table}" in words
    assert ("Hopper fractions are applied" in words) == (hardware == "MI250 GCD")


def test_a_calibrated_entry_is_taken_at_fraction_one():
    r = report()
    hw = dataclasses.replace(hardware_db().get("H800"), calibrated=True)
    ops = [OpRecord(o.index, o.name, o.module, o.flops, o.bytes_read, o.bytes_written, o.dtype, o.counted,
                    kind=o.kind, shapes=o.shapes) for o in r.ops]
    e = expected_step(ops, (), hw, "decode", 0.0, "none")
    launch = TABLE["launch"]["decode_s"]
    assert e.step_s == pytest.approx(r.totals.predicted_step_s + e.kernels * launch, rel=1e-9)
    assert any("calibrated" in c for c in e.conventions)


def test_tokens_per_gpu_under_tp_counts_the_group_and_under_ep_one_gpu():
    tp = report(batch=4, tp=2).totals
    assert tp.tokens_per_s_per_gpu == pytest.approx(4 / tp.expected_step_s / 2)
    ep = report(MOE, batch=4, context=8, ep=2, hidden=256).totals
    assert ep.tokens_per_s_per_gpu == pytest.approx(4 / ep.expected_step_s)


_op = st.tuples(st.sampled_from(["aten.mm", "aten.add", "aten.bmm", "F.scaled_dot_product_attention"]),
                st.integers(1, 4096), st.one_of(st.just(0.0), st.floats(1, 1e13)),
                st.one_of(st.just(0.0), st.floats(1, 1e10)))  # counts: none, or at least one FLOP / byte


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=30), phase=st.sampled_from(["decode", "prefill"]))
def test_expected_is_never_below_the_bound(ops, phase):
    hw = hardware_db().get("H800")
    records = [OpRecord(i, name, "m", flops, nbytes / 2, nbytes / 2, "bf16", True,
                        kind="fused" if name.startswith("F.") else "op", shapes=f"{rows}x64,64x64")
               for i, (name, rows, flops, nbytes) in enumerate(ops)]
    e = expected_step(records, (), hw, phase, 0.0, "none")
    flops = sum(r.flops for r in records)
    nbytes = sum(r.bytes for r in records)
    bound = max(flops / hw.peak("bf16"), nbytes / hw.memory_bandwidth)
    per_op = sum(max(r.flops / hw.peak("bf16"), r.bytes / hw.memory_bandwidth) for r in records)
    assert e.step_s >= per_op * (1 - 1e-12) >= bound * (1 - 1e-9)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_a_gemm_costs_no_less_with_more_rows_across_the_class_boundary(dtype):
    """A linear of K x N weights at M rows, M = 1 .. 4 x small_gemm_max_rows: each kernel's expected
    time never falls as M grows (a 129-row decode GEMM was 17% cheaper than a 128-row one)."""
    from rooflinekit.stages.efficiency_table import load_table
    from rooflinekit.stages.expected import classify, kernel_time

    table, hw = load_table(), hardware_db().get("H200 SXM")
    k, n, size = 8192, 8192, 1 if dtype == "fp8" else 2
    last = 0.0
    for m in range(1, 4 * table.small_gemm_max_rows + 1):
        cls = classify("aten.mm", "aten", False, False, m, "decode", table)
        t = kernel_time(2 * m * k * n, (k * n + m * k + m * n) * size, hw.peak(dtype), hw.memory_bandwidth,
                        table.classes[cls].at(m), dtype)
        assert t >= last, (m, cls, t, last)
        last = t
