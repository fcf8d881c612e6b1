"""Sweeps and the critical batch, checked against closed forms derived from the example models' code."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from rooflinekit.analyses.critical_batch import critical_batch, probe_batches, search_critical
from rooflinekit.analyses.profile import run_profile
from rooflinekit.analyses.sweep import Profiler, SweepOptions, point_row, run_sweep
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.sweep_report import SweepHeader, SweepReport
from rooflinekit.stages.fitting import AffineFit
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, MODELS

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"
MOE = MODELS / "moe_touched.py"
H800_RIDGE = 989.4e12 / 3.35e12  # dense bf16 peak / HBM bandwidth (hardware_db/nvidia/h800_sxm5.toml)
H20_RIDGE = 148e12 / 4.0e12
S = 32768


def sweep(path, batches, contexts, hardware="H800", device="meta", max_batch=4096, **options):
    source = load_source(str(path), options)
    base = Workload("decode", batches[0], contexts[0], device=device, options=tuple(sorted(options.items())))
    return run_sweep(source, base, Deployment(hardware), batches, contexts, options=SweepOptions(max_batch=max_batch))


def brute_force(intensity, ridge, limit=100_000):
    return next((b for b in range(1, limit) if intensity(b) >= ridge), None)


# -- the arithmetic, on closed-form probes ----------------------------------------------------


def test_affine_fit_recovers_the_line_and_solves_the_crossing():
    f0, f, w, k = 3.0e9, 4.0e9, 2.0e9, 1.0e7  # saturation f/k = 400 > ridge
    def probe(b):
        return f0 + b * f, w + b * k
    cb = critical_batch(probe, 4096, H800_RIDGE, [1, 4, 16, 48])
    assert cb.method == "affine fit" and cb.residual == pytest.approx(0, abs=1e-12)
    assert cb.fit["flops_per_seq"] == pytest.approx(f) and cb.fit["bytes_per_seq"] == pytest.approx(k)
    assert cb.fit["flops0"] == pytest.approx(f0) and cb.fit["bytes0"] == pytest.approx(w)
    assert cb.saturation_intensity == pytest.approx(f / k)
    expected = brute_force(lambda b: (f0 + b * f) / (w + b * k), H800_RIDGE)
    assert cb.critical_batch == expected == math.ceil((H800_RIDGE * w - f0) / (f - H800_RIDGE * k))
    assert cb.checked[str(expected)] >= H800_RIDGE > cb.checked[str(expected - 1)]


def test_affine_fit_says_never_below_the_ridge():
    def probe(b):
        return b * 1.0e9, 1.0e9 + b * 1.0e8  # saturates at 10
    cb = critical_batch(probe, 4096, H800_RIDGE, [1, 4])
    assert cb.critical_batch is None and cb.saturation_intensity == pytest.approx(10.0)
    assert cb.summary.startswith("never: saturates at 10 FLOP/B, ridge 295")


def test_probe_batches_always_has_three():
    assert probe_batches([16]) == [1, 2, 16]
    assert probe_batches([4, 1, 4]) == [1, 2, 4]
    assert probe_batches([1, 4, 16, 48]) == [1, 4, 16, 48]


def test_affine_fit_misses_on_curved_bytes():
    fit = AffineFit.through(1, (1.0, 1.0), 4, (4.0, 2.0))
    assert fit.miss(2, (2.0, 1.0)) == pytest.approx(1 / 3)


def test_search_finds_the_smallest_batch_when_bytes_are_not_affine():
    experts, top_k, expert_bytes, f, k = 64, 2, 1.0e6, 2.0e6, 1.0e4

    def touched(b):
        return min(experts, math.ceil(experts * (1 - (1 - top_k / experts) ** b)))

    def probe(b):
        return b * f, touched(b) * expert_bytes + b * k

    cb = critical_batch(probe, 16, H20_RIDGE, [1, 4, 16, 48])
    assert cb.method == "search" and cb.residual > 0.01
    expected = brute_force(lambda b: probe(b)[0] / probe(b)[1], H20_RIDGE)
    assert cb.critical_batch == expected
    crit, marginal, seen = search_critical(probe, H20_RIDGE)
    assert crit == expected and marginal == pytest.approx(f / k)  # all experts touched by then
    assert len(seen) < 30  # doubling + bisection, not a scan


# -- the examples -------------------------------------------------------------------------------


def test_gqa_attention_flat_step_rises_and_saturates_below_the_ridge():
    h, h_kv, d, hidden, inter, vocab = 32, 8, 128, 4096, 14336, 32000  # llama_gqa.py defaults
    result = sweep(GQA, [1, 4, 16, 48], [S], layers=1)
    rows = result.points
    # attention: 4*B*H*S*d FLOPs over K+V (2*B*S*H_kv*d*2 bytes) plus q and out (2*B*H*d*2): H*S/(H_kv*S+H)
    closed = h * S / (h_kv * S + h)
    for r in rows:
        assert r.attention.intensity_min == pytest.approx(closed, rel=1e-6)
    got = [r.attention.intensity_min for r in rows]
    assert max(got) / min(got) < 1.01
    assert closed == pytest.approx(4.0, rel=1e-3)
    steps = [r.intensity for r in rows]
    assert steps == sorted(steps) and steps[-1] > steps[0]
    # per sequence: 2 FLOPs per weight of every linear + attention; bytes: the K/V it reads
    linear = hidden * (h * d + 2 * h_kv * d) + h * d * hidden + 3 * hidden * inter + hidden * vocab
    f = 2 * linear + 4 * h * S * d
    k = 2 * S * h_kv * d * 2  # activations per token (O(hidden+inter+vocab)) are < 1% of this
    cb = result.critical_batch[0]
    assert cb.method == "affine fit" and cb.residual < 1e-3
    assert cb.fit["flops_per_seq"] == pytest.approx(f, rel=2e-3)
    assert cb.saturation_intensity == pytest.approx(f / k, rel=0.015)
    assert cb.saturation_intensity < H800_RIDGE
    assert cb.critical_batch is None and cb.summary.startswith("never: saturates at")
    assert all(r.intensity < cb.saturation_intensity for r in rows)


def _mla_closed(heads, context, hidden=7168, q_rank=1536, r=512, rope=64, nope=128, v=128, inter=18432,
                vocab=129280):
    """Per-sequence FLOPs and S-proportional bytes of one absorbed MLA layer + MLP + head (decode)."""
    linear = (hidden * q_rank + q_rank * heads * (nope + rope) + hidden * (r + rope) + heads * v * hidden
              + 3 * hidden * inter + hidden * vocab + heads * nope * r + heads * v * r)  # last two: W_UK, W_UV
    f = 2 * linear + 2 * heads * context * (r + rope) + 2 * heads * context * r
    # latent read by QK and PV (2*r*2 B), rope key (rope*2 B); the [H, S] scores: QK and rope-QK write
    # bf16 (2+2), add (4 read + 2 write), scale (2+2), fp32 upcast (2+4), softmax (4+4), downcast (4+2),
    # PV reads the probabilities (2): 36 bytes per head per position
    k = context * (2 * r * 2 + rope * 2) + 36 * heads * context
    return f, k


def _mla_at_attention_minimum(heads, context, hidden=7168, q_rank=1536, r=512, rope=64, nope=128, v=128,
                              inter=18432, vocab=129280):
    """One absorbed MLA layer + MLP + head (decode, bf16) with the attention layer's own ops (all but its
    projections: rotaries, cache writes, scores, softmax, PV) replaced by the architecture minimum.

    Returns (FLOPs per sequence, bytes read once per step, bytes per sequence), each op counted from
    examples/deepseek_mla.py: a linear [in -> out] reads its weight once and 2*in, writes 2*out per
    sequence; RMSNorm(n) per sequence: .float() 2n+4n, pow 4n+4n, mean 4n+4, +eps 4+4, rsqrt 4+4,
    mul 4n+4+4n, .to(bf16) 4n+2n, *weight 2n+2n = 36n+24 (its weight once).
    """
    f, _ = _mla_closed(heads, context, hidden, q_rank, r, rope, nope, v, inter, vocab)
    params = (hidden * q_rank + q_rank + q_rank * heads * (nope + rope) + hidden * (r + rope) + r
              + r * heads * (nope + v) + heads * v * hidden + 3 * hidden + 3 * hidden * inter + hidden * vocab)
    # the rotary tables at the root, once per step: arange 4, positions x inv_freq 132+128, cat 128+256,
    # cos and sin 256+256 each, their casts to bf16 256+128 each
    tables = 4 + 260 + 384 + 2 * 512 + 2 * 384
    once = 2 * params + tables  # the embedding's rows are per sequence, below

    def norm(n):
        return 36 * n + 24

    def linear(n_in, n_out):
        return 2 * (n_in + n_out)

    per_seq = (
        4 * hidden + 8                                              # embedding: row read + id + row write
        + 3 * norm(hidden) + norm(q_rank) + norm(r)                 # attn_norm, ffn_norm, norm; q_norm, kv_norm
        + linear(hidden, q_rank) + linear(q_rank, heads * (nope + rope)) + linear(hidden, r + rope)
        + linear(heads * v, hidden) + 2 * linear(hidden, inter) + linear(inter, hidden) + linear(hidden, vocab)
        + 2 * heads * (nope + r) + 2 * heads * (r + v)              # W_UK into the query, W_UV on the output
        + 2 * 6 * hidden + 4 * inter + 6 * inter                    # two residual adds; silu; gate * up
        + context * (r + rope) * 2 + heads * (r + rope + r) * 2     # attention minimum: cache once, q, output
    )
    return f, once, per_seq


def test_mla_absorbed_128_heads():
    heads, r, rope = 128, 512, 64
    result = sweep(MLA, [1, 4, 16, 48], [S], heads=heads, layers=1)
    # attention: 2*H*S*(576+512) FLOPs over the latent cache (576*2 B per position) plus q (H*576*2)
    # and out (H*512*2): 241.8 = 128*1088/576 as S grows
    closed = 2 * heads * S * (r + rope + r) / (S * (r + rope) * 2 + heads * (r + rope + r) * 2)
    for row in result.points:
        assert row.attention.intensity_min == pytest.approx(closed, rel=1e-6)
        assert row.attention.cache_bytes_per_token_per_layer == (r + rope) * 2
    assert heads * (r + rope + r) / (r + rope) == pytest.approx(241.8, abs=0.05)
    assert closed == pytest.approx(241.8, rel=0.01)
    f, k = _mla_closed(heads, S)
    cb = result.critical_batch[0]
    assert cb.fit["flops_per_seq"] == pytest.approx(f, rel=1e-3)
    assert cb.saturation_intensity == pytest.approx(f / k, rel=0.02)  # as executed: ~54, not 242
    assert cb.critical_batch is None  # the scores' passes through HBM keep it far below the ridge
    # with attention at its architecture minimum (a fused kernel), the step does cross the ridge
    f, once, per_seq = _mla_at_attention_minimum(heads, S)
    ideal = result.critical_batch_attention_minimum[0]
    assert ideal.fit["flops_per_seq"] == pytest.approx(f, rel=1e-12) and ideal.fit["flops0"] == 0
    assert ideal.fit["bytes0"] == pytest.approx(once, rel=1e-12)
    assert ideal.fit["bytes_per_seq"] == pytest.approx(per_seq, rel=1e-12)
    assert ideal.saturation_intensity == pytest.approx(f / per_seq) and f / per_seq > H800_RIDGE

    def closed_intensity(b):
        return b * f / (once + b * per_seq)

    b = math.ceil(H800_RIDGE * once / (f - H800_RIDGE * per_seq))
    assert closed_intensity(b) >= H800_RIDGE > closed_intensity(b - 1)
    assert ideal.critical_batch == b and ideal.profiled  # the solved batch was profiled, not extrapolated
    assert set(ideal.checked) == {str(b - 1), str(b)}
    for batch, got in ideal.checked.items():
        assert got == pytest.approx(closed_intensity(int(batch)), rel=1e-12)
    assert "extrapolated" not in ideal.summary and f"profiled at B={b - 1},{b}" in ideal.summary


def test_mla_absorbed_16_heads():
    heads, r, rope = 16, 512, 64
    result = sweep(MLA, [1, 4, 48], [S], heads=heads, layers=1)
    closed = 2 * heads * S * (r + rope + r) / (S * (r + rope) * 2 + heads * (r + rope + r) * 2)
    assert result.points[0].attention.intensity_min == pytest.approx(closed, rel=1e-6)
    assert closed == pytest.approx(30.2, abs=0.1)
    assert result.critical_batch[0].critical_batch is None
    # at a longer context the S-proportional terms dominate what the layer moves per sequence
    long = 131072
    f, k = _mla_closed(heads, long)
    cb = sweep(MLA, [1, 4, 48], [long], heads=heads, layers=1).critical_batch[0]
    assert cb.saturation_intensity == pytest.approx(f / k, rel=0.02)


def test_moe_bytes_are_not_affine_so_the_batch_is_searched():
    from tests.models.moe_touched import experts_touched

    hidden = inter = 512
    experts, top_k = 64, 2
    result = sweep(MOE, [1, 4, 16, 48], [16], hardware="H20")
    for row in result.points:
        # weights read: the experts touched, up and down projections, bf16
        assert row.weight_bytes == experts_touched(row.batch, experts, top_k) * 2 * hidden * inter * 2
        assert row.flops == 2 * row.batch * top_k * 2 * hidden * inter
    cb = result.critical_batch[0]
    assert cb.method == "search" and cb.residual > 0.01 and "MoE" in cb.fallback and "MoE" in cb.summary
    source = load_source(str(MOE), {})

    def intensity(b):
        return run_profile(source, Workload("decode", b, 16), Deployment("H20")).report.totals.intensity

    assert intensity(cb.critical_batch) >= H20_RIDGE > intensity(cb.critical_batch - 1)
    assert result.critical_batch_attention_minimum == []  # no attention: nothing to put at its minimum


def test_model_is_built_once():
    source = load_source(str(GQA), {"layers": 1})
    calls = []
    original = source.build_model

    def counting(**options):
        calls.append(options)
        return original(**options)

    source.build_model = counting
    base = Workload("decode", 1, 64, options=(("layers", 1),))
    prof = Profiler(source, base, Deployment("H800"))
    for b in (1, 2, 3):
        for s in (64, 128):
            prof.row(b, s)
    assert len(calls) == 1 and prof.profiles == 6  # one build, six captures with their own inputs


def test_point_row_byte_split_closed_form():
    h, heads, kv_heads, d, inter, vocab = 4096, 32, 8, 128, 14336, 32000  # llama_gqa.py defaults
    batch, context = 2, 128
    rep = run_profile(load_source(str(GQA), {"layers": 1}),
                  Workload("decode", batch, context, options=(("layers", 1),)), Deployment("H800")).report
    row = point_row(rep)
    params = (h * heads * d + 2 * h * kv_heads * d + heads * d * h  # q, k, v, o
              + 3 * h * inter                                       # gate, up, down
              + 3 * h                                                # two RMSNorms in the layer, the final one
              + h * vocab)                                           # lm_head
    # bf16 weights read once, the embedding's rows once per sequence, and the rotary inv_freq buffer
    # (head_dim/2 fp32)
    assert row.weight_bytes == 2 * params + batch * h * 2 + (d // 2) * 4
    # K and V of every cached position read once: 2 * B * S * H_kv * d * 2 B
    assert row.kv_bytes_min == 2 * batch * context * kv_heads * d * 2
    assert row.weight_share == pytest.approx(row.weight_bytes / rep.totals.bytes)


# -- a model whose intensity bends: the fit's batch must be profiled ---------------------------

BEND = """
import torch
from torch import nn


class Bend(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x, passes):
        y = self.proj(x)
        for _ in range(passes):
            y = y * 2.0
        return y


def build_model(*, hidden=2048, bend=64, passes=1):
    return Bend(hidden)


def make_inputs(batch, context, phase, *, hidden=2048, bend=64, passes=1):
    return (torch.zeros(batch, hidden), passes if batch > bend else 0)
"""


@pytest.fixture
def bend_model(tmp_path):
    """One bf16 linear [h -> h]; above batch 64, `passes` extra elementwise passes over its output.

    Per step: FLOPs 2*B*h^2; bytes 2*h^2 (weight) + 4*B*h (input, output) + 4*p*B*h (each pass reads
    and writes the output), p = 0 up to B=64. So I(B) = B*h / (h + 2*(1+p)*B): a fit on batches up to
    64 sees p = 0 and puts the ridge R at B = R*h/(h - 2R), but from B=65 on it is R*h/(h - 2(1+p)R).
    """
    path = tmp_path / "bend.py"
    path.write_text(BEND)
    return path


def _bend_crossing(h, passes, ridge):
    """Smallest B with B*h / (h + 2*(1+p)*B) >= ridge, or None when h/(2*(1+p)) <= ridge."""
    slope = h - 2 * (1 + passes) * ridge
    return None if slope <= 0 else math.ceil(ridge * h / slope)


def _bend_intensity(path, batch, **options):
    workload = Workload("decode", batch, 1, options=tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options), workload, Deployment("H800")).report.totals.intensity


def test_critical_batch_is_profiled_where_the_fit_bends(bend_model):
    h = 2048
    fitted = _bend_crossing(h, 0, H800_RIDGE)  # 416: what the fit on B <= 64 predicts
    real = _bend_crossing(h, 1, H800_RIDGE)    # 698
    assert (fitted, real) == (416, 698)
    result = sweep(bend_model, [1, 4, 16, 48], [1])
    cb = result.critical_batch[0]
    assert cb.fit["critical"] == fitted and cb.residual == pytest.approx(0, abs=1e-12)
    assert cb.method == "search" and cb.critical_batch == real and cb.profiled
    assert "below the ridge" in cb.fallback and "B*=416" in cb.summary
    # re-profiled here: the reported batch reaches the ridge, the one below does not
    assert _bend_intensity(bend_model, real) >= H800_RIDGE > _bend_intensity(bend_model, real - 1)
    assert result.profiles < 40  # doubling + bisection, not a walk one batch at a time
    assert cb.saturation_intensity == pytest.approx(h / 4, rel=1e-3)  # marginal: h/(2*(1+p))


def test_critical_batch_never_above_max_batch(bend_model):
    # the bend lowers the saturation to h/8 = 256 < ridge: no batch qualifies
    result = sweep(bend_model, [1, 4, 16, 48], [1], passes=3)
    cb = result.critical_batch[0]
    assert cb.critical_batch is None and max(map(int, cb.checked)) == 4096
    assert cb.summary.startswith("never up to max_batch 4096: intensity ")
    assert cb.checked["4096"] == pytest.approx(_bend_intensity(bend_model, 4096, passes=3), rel=1e-12)
    assert cb.checked["4096"] == pytest.approx(4096 * 2048 / (2048 + 8 * 4096), rel=1e-12)
    # a cap below the real crossing (698): nothing above it is profiled or reported
    capped = sweep(bend_model, [1, 4, 16, 48], [1], max_batch=600).critical_batch[0]
    assert capped.critical_batch is None and max(map(int, capped.checked)) <= 600
    assert capped.summary.startswith("never up to max_batch 600")
    # a cap below the fit's own crossing (416): profiled at the cap, which is below the ridge
    low = sweep(bend_model, [1, 4, 16, 48], [1], max_batch=300, passes=0).critical_batch[0]
    assert low.method == "affine fit" and low.critical_batch is None and set(low.checked) == {"300"}
    assert low.checked["300"] == pytest.approx(300 * 2048 / (2048 + 600), rel=1e-12)
    assert low.summary.startswith("never up to max_batch 300") and "B=416" in low.summary


def test_sweep_max_batch_option(invoke, tmp_path, bend_model):
    out = tmp_path / "s.json"
    result = invoke("sweep", bend_model, "-b", "1,4,16,48", "-s", "1", "-H", "H800", "--max-batch", "600",
                    "-f", "json", "-o", out)
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    cb = data["critical_batch"][0]
    assert cb["critical_batch"] is None and cb["max_batch"] == 600
    assert max(int(b) for b in cb["checked"]) <= 600
    assert cb["summary"].startswith("never up to max_batch 600")
    assert any("up to max_batch 600" in n for n in data["notes"])
    result = invoke("sweep", bend_model, "-b", "1,4,16,48", "-s", "1", "--max-batch", "0")
    assert result.exit_code == 2 and "--max-batch" in result.stderr


def test_uncounted_bytes_share_per_point(bend_model):
    h, batch = 2048, 100  # above the bend: the output's scaling pass has no FLOP formula
    prof = Profiler(load_source(str(bend_model), {}), Workload("decode", batch, 1), Deployment("H800"))
    row = prof.row(batch, 1)
    total = 2 * h * h + 4 * batch * h + 4 * batch * h
    assert row.uncounted_bytes == 4 * batch * h
    assert row.uncounted_bytes_share == pytest.approx(4 * batch * h / total, rel=1e-12)


def test_real_device_sweep_is_counted_not_timed_and_not_searched(bend_model, monkeypatch):
    import rooflinekit.analyses.measure

    def no_timing(*args, **kwargs):
        raise AssertionError("a sweep point was timed")

    monkeypatch.setattr(rooflinekit.analyses.measure, "measure", no_timing)
    h, batches = 256, [1, 4, 16]
    result = sweep(bend_model, batches, [1], hardware="H20", device="cpu", hidden=h)
    assert result.profiles == len(batches)  # nothing profiled beyond the sweep's own points
    cb = result.critical_batch[0]
    # I(B) = B*h/(h + 2B) reaches the H20 ridge (37) at B = ceil(37*256 / (256 - 74)) = 53
    assert cb.critical_batch == _bend_crossing(h, 0, H20_RIDGE) == 53
    assert not cb.profiled and cb.checked == {}
    assert cb.summary.endswith("extrapolated, not profiled]")
    assert any(n.startswith("device cpu: the critical batch") and "extrapolated" in n for n in result.to_dict()["notes"])


def test_notes_and_warnings_of_every_point_are_kept(monkeypatch):
    import rooflinekit.analyses.profile
    import rooflinekit.analyses.sweep

    real = rooflinekit.analyses.profile.run_profile

    def noted(source, workload, *args, **kwargs):
        out = real(source, workload, *args, **kwargs)
        out.report = dataclasses.replace(
            out.report, notes=[*out.report.notes, f"note of B={workload.batch}", "shared note"],
            warnings=[*out.report.warnings, f"warning of B={workload.batch}"])
        return out

    monkeypatch.setattr(rooflinekit.analyses.sweep, "run_profile", noted)
    data = sweep(GQA, [1, 2], [64], layers=1, hidden=256, heads=8, kv_heads=2, head_dim=32, intermediate=512,
                 vocab=1000).to_dict()
    notes, warnings = data["notes"], data["warnings"]
    assert len(set(notes)) == len(notes) and len(set(warnings)) == len(warnings)  # each once
    assert notes.index("note of B=1") < notes.index("shared note") < notes.index("note of B=2")
    assert warnings.index("warning of B=1") < warnings.index("warning of B=2")


# -- the command ------------------------------------------------------------------------------


def test_sweep_command_json(invoke, tmp_path):
    out = tmp_path / "s.json"
    result = invoke("sweep", GQA, "-O", "layers=1", "--batch", "1,4,16", "--context", "64,128", "-f", "json",
                    "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "sweep" not in result.stderr.replace(str(out), "")  # no progress bar when stderr is not a TTY
    data = json.loads(out.read_text())
    assert data["kind"] == "sweep" and not data["interrupted"]
    assert [(p["batch"], p["context"]) for p in data["points"]] == [(b, s) for s in (64, 128) for b in (1, 4, 16)]
    for p in data["points"]:
        assert {"flops", "bytes", "intensity", "bound", "predicted_step_s", "tokens_per_s", "mfu_bound",
                "weight_bytes", "kv_bytes_executed", "other_bytes"} <= set(p)
        assert {"intensity_min", "intensity_executed"} <= set(p["attention"])
    assert [c["context"] for c in data["critical_batch"]] == [64, 128]
    for c in data["critical_batch"]:
        assert {"context", "critical_batch", "saturation_intensity", "ridge", "method"} <= set(c)
        assert c["ridge"] == pytest.approx(H800_RIDGE, rel=1e-6)
    assert any("affine" in n for n in data["notes"])


@pytest.mark.parametrize("fmt,expected", [("table", "Critical batch"), ("markdown", "| B "), ("csv", "batch,context")])
def test_sweep_command_formats(invoke, fmt, expected):
    result = invoke("sweep", GQA, "-O", "layers=1", "-b", "1,2", "-s", "64", "-f", fmt)
    assert result.exit_code == 0, result.stderr
    assert expected in result.stdout
    if fmt == "csv":
        assert len(result.stdout.strip().splitlines()) == 3


def test_interrupted_sweep_keeps_points_done(invoke, tmp_path, monkeypatch):
    real = Profiler.row
    seen = []

    def row(self, batch, context):
        if len(seen) == 2:
            raise KeyboardInterrupt
        seen.append(batch)
        return real(self, batch, context)

    monkeypatch.setattr(Profiler, "row", row)
    out = tmp_path / "s.json"
    result = invoke("sweep", GQA, "-O", "layers=1", "-b", "1,2,3,4", "-s", "64", "-f", "json", "-o", out)
    assert result.exit_code == 130
    assert "interrupted after 2 of 4 points" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()  # the points done go beside -o FILE: FILE.partial.EXT
    data = json.loads(out.with_name("s.partial.json").read_text())
    assert data["interrupted"] and len(data["points"]) == 2 and data["critical_batch"] == []
    assert any(n.startswith("interrupted: 2 of 4 points done") for n in data["notes"])


@pytest.mark.parametrize("args,needle", [(["-b", "1,x"], "not a valid integer"), (["-s", "0"], "at least 1")])
def test_sweep_bad_lists(invoke, args, needle):
    result = invoke("sweep", GQA, *args)
    assert result.exit_code == 2 and needle in result.stderr


@pytest.mark.slow
def test_study_script_runs(tmp_path):
    from tests import warm_python
    from tests.conftest import ROOT

    done = warm_python.run([ROOT / "docs" / "study_gqa_vs_mla.py", "--quick", "--out", tmp_path],
                           capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "study_gqa_vs_mla.md").read_text()
    assert (tmp_path / "study_gqa_vs_mla.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    claims = [line for line in page.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert len(claims) == 16
    assert "| 5 | MLA caches" in page and "| 1152 B | correct |" in page


def test_a_sweep_is_one_frozen_report_with_a_typed_header():
    source = load_source(str(GQA), {"layers": 1})
    base = Workload("decode", 1, 64, options=(("layers", 1),))
    result = run_sweep(source, base, Deployment("H800"), [1, 2], [64], options=SweepOptions(critical=False))
    assert isinstance(result, SweepReport)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.interrupted = True
    header = result.header
    assert isinstance(header, SweepHeader) and header.hardware is result.hardware and header.model is result.model
    assert header.hardware.name.startswith("H800") and header.hardware.ridge == pytest.approx(H800_RIDGE, rel=1e-3)
    data = result.to_dict()
    assert SweepReport.from_dict(json.loads(json.dumps(data))).to_dict() == data
