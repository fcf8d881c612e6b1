"""Multi-token decode (`--q-len N`): N new tokens per sequence attend the context and, causally,
each other. Closed forms computed here: new token i (0-based) of N attends the context - N + i + 1
positions up to itself, so a sequence scores N*C - N*(N-1)/2 query-key pairs per head."""

from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES, TINY_LLAMA

from rooflinekit.analyses.profile import run_profile
from rooflinekit.analyses.sweep import SweepOptions, run_sweep
from rooflinekit.core.keys import pairs_attended, positions_attended
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source

GQA_FILE = EXAMPLES / "llama_gqa.py"
MLA_FILE = EXAMPLES / "deepseek_mla.py"
BF16 = 2


def pairs(n: int, context: int) -> int:
    """Pairs scored by one sequence and head: new token i sees context - n + i + 1 positions."""
    return sum(context - (n - 1 - i) for i in range(n))


def run(path, batch, context, q_len, **options):
    w = Workload("decode", batch, context, options=tuple(sorted(options.items())), decode_q_len=q_len)
    return run_profile(load_source(str(path), options), w, Deployment("H800"))


def test_pairs_attended_counts_the_bottom_right_triangle():
    for context in (1, 5, 17, 40):
        for q_len in range(1, context + 1):
            for window in (0, 3, 16):
                for chunk in (0, 6):
                    first = context - q_len
                    seen = [[k for k in range(p + 1) if (not window or k > p - window)
                             and (not chunk or k // chunk == p // chunk)] for p in range(first, context)]
                    assert pairs_attended(q_len, context, True, window, chunk) == sum(map(len, seen))
                    assert positions_attended(q_len, context, window, chunk) == len(set().union(*seen))
    assert pairs_attended(4, 4096, True) == 4 * 4096 - 6 == pairs(4, 4096)


@pytest.mark.parametrize("q_len", [1, 2, 4])
def test_gqa_model_file_attention_flops_and_bytes(q_len):
    opts = TINY_LLAMA | {"layers": 2}
    b, s = 3, 128
    h, kv_heads, d, hidden = opts["heads"], opts["kv_heads"], opts["head_dim"], opts["hidden"]
    p = run(GQA_FILE, b, s, q_len, **opts)
    r = p.report
    assert r.workload.q_len == q_len and r.workload.tokens == b * q_len
    # the inputs carry q_len tokens per sequence: the embedding gathers b * q_len rows
    emb = [o for o in r.ops if o.name == "aten.embedding"]
    assert emb[0].bytes_written == b * q_len * hidden * BF16
    for row in r.attention:
        assert row.flops_model == 2 * b * h * pairs(q_len, s) * (d + d)
        # executed: the fused call with a dense mask scores every (query, key) pair
        assert row.flops_executed == 2 * b * h * q_len * s * (d + d)
        kv_min = b * s * kv_heads * (d + d) * BF16
        assert row.kv_bytes_min == kv_min
        assert row.bytes_min == kv_min + b * q_len * h * (d + d) * BF16
        assert row.intensity_min == pytest.approx(row.flops_model / row.bytes_min)
    assert r.totals.tokens_per_s == pytest.approx(b * q_len / r.totals.predicted_step_s)
    if q_len > 1:
        assert any(f"{q_len} new tokens per sequence" in n and str(pairs(q_len, s)) in n for n in r.notes)


def test_attention_intensity_grows_with_q_len_not_batch():
    opts = TINY_LLAMA | {"layers": 1}
    s = 256
    one = {b: run(GQA_FILE, b, s, 1, **opts).report.attention[0].intensity_min for b in (1, 8)}
    four = {b: run(GQA_FILE, b, s, 4, **opts).report.attention[0].intensity_min for b in (1, 8)}
    assert one[1] == pytest.approx(one[8]) and four[1] == pytest.approx(four[8])
    h, kv_heads, d = opts["heads"], opts["kv_heads"], opts["head_dim"]
    expect = (2 * h * pairs(4, s) * 2 * d) / ((s * kv_heads * 2 * d + 4 * h * 2 * d) * BF16)
    assert four[1] == pytest.approx(expect)
    assert four[1] > 3.5 * one[1]


@pytest.mark.parametrize("mode", ["absorbed", "naive"])
def test_mla_model_file_attention_flops(mode):
    b, s, q_len, heads = 2, 256, 4, 16
    r, rope, nope, v = 512, 64, 128, 128
    rep = run(MLA_FILE, b, s, q_len, layers=1, heads=heads, mode=mode).report
    row = rep.attention[0]
    per_pair = (r + rope) + r if mode == "absorbed" else (nope + rope) + v
    assert row.flops_model == 2 * b * heads * pairs(q_len, s) * per_pair
    assert row.kv_bytes_min == b * s * (r + rope) * BF16


@pytest.mark.hf
def test_transformers_config_decode_q_len_4():
    c = json.loads((EXAMPLES / "configs" / "llama-3.1-8b.json").read_text())
    b, s, n = 2, 512, 4
    h, d, kv_heads = c["num_attention_heads"], c["hidden_size"] // c["num_attention_heads"], c["num_key_value_heads"]
    rep = run(EXAMPLES / "configs" / "llama-3.1-8b.json", b, s, n, layers=2).report
    assert rep.workload.tokens == b * n
    for row in rep.attention:
        assert row.flops_model == 2 * b * h * pairs(n, s) * 2 * d
        assert row.kv_bytes_min == b * s * kv_heads * 2 * d * BF16
    # logits of every new token (a verify step checks each): lm_head over b * n rows
    head = [o for o in rep.ops if o.module == "lm_head" and o.flops]
    assert head[0].flops == 2 * b * n * c["hidden_size"] * c["vocab_size"]


def test_sweep_points_and_critical_batch_follow_q_len():
    opts = {"layers": 1}  # llama_gqa.py's 8B-like dimensions, one layer
    s = 256
    crit = {}
    for q_len in (1, 4):
        base = Workload("decode", 1, s, options=tuple(sorted(opts.items())), decode_q_len=q_len)
        result = run_sweep(load_source(str(GQA_FILE), opts), base, Deployment("H800"), [1, 8], [s],
                           options=SweepOptions(max_batch=4096)).to_dict()
        assert result["workload"]["q_len"] == q_len
        # every point equals a direct profile at that q_len (a second method: a capture, not the fit)
        for point in result["points"]:
            direct = run(GQA_FILE, point["batch"], point["context"], q_len, **opts).report.totals
            assert point["flops"] == pytest.approx(direct.flops, rel=1e-9)
            assert point["bytes"] == pytest.approx(direct.bytes, rel=1e-9)
        b = crit[q_len] = result["critical_batch"][0]["critical_batch"]
        ridge = result["hardware"]["ridge"]
        at = run(GQA_FILE, b, s, q_len, **opts).report.totals
        below = run(GQA_FILE, b - 1, s, q_len, **opts).report.totals
        assert at.flops / at.bytes >= ridge > below.flops / below.bytes
    # N tokens per sequence reach the ridge at fewer sequences: N times the weight FLOPs per sequence,
    # and attention's own intensity grows with N too
    assert crit[4] < crit[1] / 3
