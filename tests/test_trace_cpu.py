"""A trace recorded here on CPU (torch.profiler, shapes, stacks and modules) of the example GQA
model's prefill, analysed by `rooflinekit trace`, against `profile --device cpu` of the same model and
workload (the same formula registry counts both).

What is provable and asserted: every matrix product's FLOPs (aten::mm in the trace, aten.mm in the
capture) summed by op; the attention FLOPs (the trace's CPU flash-attention op, counted by the
registry through the same fused record the capture makes); the total; and each module row's FLOPs
(two levels below the model, named by the model's attribute paths) equal to profile's module rows.
Not asserted: bytes and the elementwise ops. The trace counts each recorded op as called (aten::mul
of a broadcast rope table, the cast chains of RMSNorm) while the capture counts the decomposed ops
it saw and dedupes storages within one call; those have no FLOPs and their bytes differ by design."""

from __future__ import annotations

import sys
from collections import defaultdict

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from rooflinekit.analyses.profile import run_profile as rooflinekit_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import build, load_source
from rooflinekit.trace.analyse import analyse
from rooflinekit.trace.cpu import CPU_TIMING
from rooflinekit.trace.render import render
from rooflinekit.trace.rollup import NO_HIERARCHY
from tests.conftest import EXAMPLES

OPTIONS = {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16, "hidden": 64, "intermediate": 128,
           "vocab": 100}
WORKLOAD = Workload("prefill", 2, 16, "fp32", "cpu", tuple(sorted(OPTIONS.items())))
#: torch's Python tracer (with_stack=True, which records the nn.Module events the module roll-up
#: reads) crashes the process on torch 2.6 under Python 3.13; there the trace is recorded without
#: stacks and the report must say that it has no module hierarchy.
STACKS = not (sys.version_info >= (3, 13) and tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 7))


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(profile's report, the trace report named by the model) of one model and workload."""
    source = load_source(str(EXAMPLES / "llama_gqa.py"), OPTIONS)
    counted = rooflinekit_profile(source, WORKLOAD, Deployment("H800")).report
    built = build(source, WORKLOAD)
    path = tmp_path_factory.mktemp("cpu") / "trace.json"
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=STACKS,
                                  with_modules=True) as prof:
        built.model(**built.inputs)
    prof.export_chrome_trace(str(path))
    return counted, analyse(str(path), "H800", model=built.model), path


def _flops_by(rows) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in rows:
        out[r.name] += r.rates.flops
    return out


def test_a_cpu_trace_is_analysed_and_says_so(both):
    _, report, _ = both
    (rank,) = report.ranks
    assert rank.timing == "cpu"
    assert CPU_TIMING in render(report, "table")
    assert (NO_HIERARCHY not in rank.notes) if STACKS else (NO_HIERARCHY in rank.notes and not rank.modules)
    assert [r.name for r in rank.phases] == ["forward"]


#: Both attention products (Q K^T and P V) over every query-key pair, both layers: B 2, 4 heads,
#: 16 tokens, head size 16 (what a math-path SDPA's two bmm run, the masked pairs too).
EVERY_PAIR = 2 * (2 * 2 * 4 * 16 * 16 * 16) * 2


def _math_path(report) -> bool:
    """Whether torch's CPU SDPA ran its math decomposition (bmm, softmax: torch releases before the
    CPU flash kernel took this call) rather than one fused kernel."""
    return any(r.name == "aten::bmm" for r in report.ranks[0].ops)


def test_matmul_and_attention_flops_equal_profiles(both):
    counted, report, _ = both
    ours = _flops_by(report.ranks[0].ops)
    theirs: dict[str, float] = defaultdict(float)
    for op in counted.ops:
        theirs[op.name] += op.flops
    assert ours["aten::mm"] == theirs["aten.mm"] > 0
    sdpa = theirs["F.scaled_dot_product_attention"]
    if _math_path(report):  # what ran: every pair's products, where profile's fused record counts the causal ones
        assert ours["aten::bmm"] == EVERY_PAIR > sdpa > 0
        assert sum(ours.values()) == counted.totals.flops - sdpa + EVERY_PAIR
        return
    attention = sum(v for k, v in ours.items() if "scaled_dot_product" in k)
    assert attention == sdpa > 0
    assert sum(ours.values()) == counted.totals.flops


def test_module_flops_equal_profiles_module_rows(both):
    counted, report, _ = both
    if not STACKS:  # no nn.Module events recorded (STACKS): the report says so (test above), no rows
        assert report.ranks[0].modules == []
        return
    ours = _flops_by(report.ranks[0].modules)
    theirs = {m.name: m.flops for m in counted.modules}
    shared = set(ours) & set(theirs)
    assert {"layers.0.self_attn", "layers.1.mlp", "lm_head"} <= shared
    math = _math_path(report)
    for name in shared:
        if math and name.endswith("self_attn"):  # the attention products as the math path ran them
            sdpa = sum(op.flops for op in counted.ops if op.module.startswith(name) and "scaled_dot" in op.name)
            assert ours[name] == theirs[name] - sdpa + EVERY_PAIR / 2, name
        else:
            assert ours[name] == theirs[name], name
    if not math:
        assert sum(ours.values()) == sum(theirs.values())


def test_without_the_model_modules_keep_their_recorded_names(both):
    _, _, path = both
    if not STACKS:
        assert analyse(str(path), "H800").ranks[0].modules == []
        return
    names = {r.name for r in analyse(str(path), "H800").ranks[0].modules}
    assert "DecoderLayer_0.GQAAttention_0" in names and "Linear_14" in names
