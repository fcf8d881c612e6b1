"""Closed forms for the figures the rest of the suite leaves unchecked (issue 15, "the suite's own
blind spots"): throughput per token and per sequence, the bytes of an SDPA mask, which side of the
ridge a step, a module and an op fall on, the model-FLOP MFU bound, MoE's expected distinct experts
and the per-GPU figures of planned tensor parallelism.

Every expected number is written out here from the model's dimensions and the H800 datasheet
figures; nothing is copied from a report. All runs are on the meta device with small dimensions
(or large ones where only the shapes matter: meta allocates nothing).
"""

from __future__ import annotations

import itertools
import math
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib
import torch
import torch.nn.functional as F
from torch import nn

import rooflinekit
from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from rooflinekit_plugins import moe
from tests.conftest import EXAMPLES, MODELS, ROOT

GQA = EXAMPLES / "llama_gqa.py"

#: the H800 SXM5 datasheet (hardware_db/nvidia/h800_sxm5.toml): dense bf16 peak, fp32 CUDA-core peak,
#: HBM bandwidth and NVLink per GPU (both directions summed), all SI
PEAK_BF16 = 989.4e12
PEAK_FP32 = 67e12
BANDWIDTH = 3.35e12
LINK_PER_DIRECTION = 400e9 / 2
RIDGE = PEAK_BF16 / BANDWIDTH  # 295.3 FLOP/B
BF16 = 2  # bytes per element


def time_bound(flops: float, nbytes: float, peak: float = PEAK_BF16) -> float:
    """The roofline's lower bound on one op's (or the step's) time: max(F / P, Q / W)."""
    return max(flops / peak, nbytes / BANDWIDTH)


def gemm_flops_bytes(m: int, k: int, n: int, itemsize: int = BF16) -> tuple[int, int]:
    """[m, k] @ [k, n]: 2mkn FLOPs; both operands read once, the product written once."""
    return 2 * m * k * n, itemsize * (m * k + k * n + m * n)


# -- in-memory models -------------------------------------------------------------------------------


class OneLinear(nn.Module):
    """One bias-free projection: the whole step is a single matrix product."""

    def __init__(self, k: int, n: int):
        super().__init__()
        self.proj = nn.Linear(k, n, bias=False)

    def forward(self, x):
        return self.proj(x)


class MaskedAttention(nn.Module):
    """SDPA with an explicit mask tensor; declares its heads so the `gqa`/`mha` plugins recognise it."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.num_heads, self.num_key_value_heads, self.head_dim = heads, kv_heads, head_dim

    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              enable_gqa=self.num_heads != self.num_key_value_heads)


class AttentionOnly(nn.Module):
    def __init__(self, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.attn = MaskedAttention(heads, kv_heads, head_dim)

    def forward(self, q, k, v, mask):
        return self.attn(q, k, v, mask)


def one_linear(k: int, n: int) -> nn.Module:
    with torch.device("meta"):
        return OneLinear(k, n).to(torch.bfloat16)


def meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def model_file(path, phase: str, batch: int, context: int, tp: int = 1, **options) -> dict:
    workload = Workload(phase, batch, context, "bf16", "meta", tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options), workload, Deployment("H800", tp=tp)).report.to_dict()


def only(rows: list[dict], **match) -> dict:
    (row,) = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return row


# -- 1. tokens/s and sequences/s ---------------------------------------------------------------------
#
# tokens_per_s = workload.tokens / predicted_step_s, with tokens = batch * q_len: batch in decode
# (q_len 1), batch * context in prefill. sequences_per_s = batch / predicted_step_s in decode and
# None in prefill. A tokens_per_s computed as batch / step agrees with the closed form in decode
# (tokens == batch), so the prefill cases below (batch 3, q_len 16 or 64) are the ones that catch
# it: the planted figure would be context times too small. (Planting it in
# rooflinekit/stages/place.py, `tokens_per_s=workload.batch / predicted`, fails
# test_prefill_tokens_per_s_counts_every_new_token_of_every_sequence and
# test_prefill_token_counts_of_a_model_file on that assertion.)


def test_decode_tokens_and_sequences_per_s_at_batch_above_one():
    batch, context, k, n = 4, 512, 256, 384
    report = rooflinekit.profile(one_linear(k, n), meta(batch, 1, k), hardware="H800", context=context).to_dict()
    w, t = report["workload"], report["totals"]
    assert (w["phase"], w["batch"], w["q_len"], w["tokens"]) == ("decode", batch, 1, batch)
    step = time_bound(*gemm_flops_bytes(batch, k, n))  # the one product: M = batch rows
    assert t["predicted_step_s"] == pytest.approx(step, rel=1e-12)
    assert t["tokens_per_s"] == pytest.approx(batch / step, rel=1e-12)
    assert t["sequences_per_s"] == pytest.approx(batch / step, rel=1e-12)


def test_prefill_tokens_per_s_counts_every_new_token_of_every_sequence():
    batch, q_len, k, n = 3, 16, 256, 512
    report = rooflinekit.profile(one_linear(k, n), meta(batch, q_len, k), hardware="H800").to_dict()
    w, t = report["workload"], report["totals"]
    assert (w["phase"], w["batch"], w["context"], w["q_len"], w["tokens"]) == (
        "prefill", batch, q_len, q_len, batch * q_len)
    step = time_bound(*gemm_flops_bytes(batch * q_len, k, n))
    assert t["predicted_step_s"] == pytest.approx(step, rel=1e-12)
    assert t["tokens_per_s"] == pytest.approx(batch * q_len / step, rel=1e-12)
    assert t["sequences_per_s"] is None  # a prefill step finishes no sequence


def test_prefill_token_counts_of_a_model_file():
    batch, context = 3, 64
    dims = {"layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512,
            "vocab": 1000}
    report = model_file(GQA, "prefill", batch, context, **dims)
    w, t = report["workload"], report["totals"]
    assert (w["q_len"], w["tokens"]) == (context, batch * context)
    # the model really ran batch * context rows: the output head's product is [B*L, hidden] @ [hidden, vocab]
    head = only(report["ops"], module="lm_head", name="aten.mm")
    assert head["flops"] == 2 * batch * context * dims["hidden"] * dims["vocab"]
    # predicted step: each op's own time bound, one after another (matrix products run at the bf16
    # peak, fp32 elementwise ops have no FLOPs and are bound by their bytes)
    peaks = {"bf16": PEAK_BF16, "fp32": PEAK_FP32}
    step = sum(time_bound(o["flops"], o["bytes_read"] + o["bytes_written"], peaks[o["dtype"]])
               for o in report["ops"])
    assert t["predicted_step_s"] == pytest.approx(step, rel=1e-9)
    assert t["tokens_per_s"] == pytest.approx(batch * context / step, rel=1e-9)
    assert t["sequences_per_s"] is None
    decode = model_file(GQA, "decode", batch, context, **dims)
    assert (decode["workload"]["q_len"], decode["workload"]["tokens"]) == (1, batch)
    assert decode["totals"]["sequences_per_s"] == pytest.approx(batch / decode["totals"]["predicted_step_s"])


# -- 2. an SDPA call's mask is read ------------------------------------------------------------------


@pytest.mark.parametrize("mask_kind", ["additive [B,1,L,S] bf16", "bool [L,S]", "expanded [1,1,L,S] to [B,H,L,S]"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_sdpa_reads_q_k_v_and_the_mask_once_and_writes_the_output_once(phase, mask_kind):
    b, h, h_kv, d, s = 2, 8, 2, 32, 48
    q_len = s if phase == "prefill" else 1
    q, k, v = meta(b, h, q_len, d), meta(b, h_kv, s, d), meta(b, h_kv, s, d)
    if mask_kind.startswith("additive"):
        mask, mask_bytes = meta(b, 1, q_len, s), b * q_len * s * BF16
    elif mask_kind.startswith("bool"):
        mask, mask_bytes = meta(q_len, s, dtype=torch.bool), q_len * s * 1
    else:  # a stride-0 broadcast is read once: its one [L, S] plane
        mask, mask_bytes = meta(1, 1, q_len, s).expand(b, h, q_len, s), q_len * s * BF16
    report = rooflinekit.profile(AttentionOnly(h, h_kv, d), q, k, v, mask, hardware="H800", phase=phase,
                                 batch=b, context=s).to_dict()
    sdpa = only(report["ops"], name="F.scaled_dot_product_attention")
    q_bytes, kv_bytes, out_bytes = b * h * q_len * d * BF16, 2 * b * h_kv * s * d * BF16, b * h * q_len * d * BF16
    assert sdpa["bytes_read"] == q_bytes + kv_bytes + mask_bytes
    assert sdpa["bytes_written"] == out_bytes
    # a masked fused call computes every pair: 2 * (d + d) FLOPs per query-key pair and head
    assert sdpa["flops"] == 2 * b * h * q_len * s * (d + d)
    assert report["totals"]["bytes"] == q_bytes + kv_bytes + mask_bytes + out_bytes


# -- 3. the ridge: memory-bound below it, compute-bound above it -------------------------------------


def test_h800_ridge_is_the_datasheet_ratio():
    report = rooflinekit.profile(one_linear(64, 64), meta(1, 2, 64), hardware="H800").to_dict()
    assert report["hardware"]["ridge"] == pytest.approx(RIDGE, rel=1e-12)
    assert RIDGE == pytest.approx(295.3, abs=0.05)


@pytest.mark.parametrize(("batch", "q_len", "bound"), [(1, 1, "memory"), (2, 2048, "compute")])
def test_a_gemv_is_memory_bound_and_a_large_gemm_compute_bound_at_step_module_and_op(batch, q_len, bound):
    k = n = 4096
    x = meta(batch, q_len, k)
    kwargs = {"context": 4096} if q_len == 1 else {}
    report = rooflinekit.profile(one_linear(k, n), x, hardware="H800", **kwargs).to_dict()
    flops, nbytes = gemm_flops_bytes(batch * q_len, k, n)
    intensity = flops / nbytes
    # decode, one row: 2KN / 2(K + KN + N) ~ 1 FLOP/B; prefill, 4096 rows: 4096/3 = 1365 FLOP/B
    assert (intensity < RIDGE / 100) if bound == "memory" else (intensity > 4 * RIDGE)
    op = only(report["ops"], name="aten.mm")
    module = only(report["modules"], name="proj")
    for row in (report["totals"], module, op):
        assert row["intensity"] == pytest.approx(intensity, rel=1e-12)
        assert row["bound"] == bound
    assert report["totals"]["time_bound_s"] == pytest.approx(
        nbytes / BANDWIDTH if bound == "memory" else flops / PEAK_BF16, rel=1e-12)


def _mlp_flops_bytes(tokens: int, h: int, i: int) -> tuple[int, int]:
    """The SwiGLU MLP of examples/llama_gqa.py: gate and up [T,h]@[h,i], silu (T*i in and out),
    gate * up (two T*i in, one out), down [T,i]@[i,h]; bf16 throughout."""
    gate_f, gate_b = gemm_flops_bytes(tokens, h, i)
    down_f, down_b = gemm_flops_bytes(tokens, i, h)
    silu_b, mul_b = 2 * tokens * i * BF16, 3 * tokens * i * BF16
    return 2 * gate_f + down_f, 2 * gate_b + silu_b + mul_b + down_b


def test_llama_decode_gemv_memory_bound_and_prefill_gemm_compute_bound():
    h, i, heads, d = 2048, 4096, 16, 128
    dims = {"layers": 1, "hidden": h, "heads": heads, "kv_heads": 4, "head_dim": d, "intermediate": i,
            "vocab": 1000}
    for phase, batch, context, bound in (("decode", 4, 2048, "memory"), ("prefill", 2, 2048, "compute")):
        report = model_file(GQA, phase, batch, context, **dims)
        tokens = batch * (1 if phase == "decode" else context)
        # the q projection: [T, h] @ [h, heads * d]
        q_flops, q_bytes = gemm_flops_bytes(tokens, h, heads * d)
        q_proj = only(report["ops"], module="layers.0.self_attn.q_proj")
        assert (q_proj["flops"], q_proj["bytes_read"] + q_proj["bytes_written"]) == (q_flops, q_bytes)
        assert q_proj["intensity"] == pytest.approx(q_flops / q_bytes, rel=1e-12)
        assert q_proj["bound"] == bound
        # the MLP as a module row
        mlp_flops, mlp_bytes = _mlp_flops_bytes(tokens, h, i)
        mlp = only(report["modules"], name="layers.0.mlp")
        assert (mlp["flops"], mlp["bytes"]) == (mlp_flops, mlp_bytes)
        assert mlp["bound"] == bound
        if bound == "memory":  # T = 4 rows: about 4 FLOP/B
            assert q_flops / q_bytes < RIDGE / 50 and mlp_flops / mlp_bytes < RIDGE / 50
        else:  # T = 4096 rows: 819 and 558 FLOP/B
            assert q_flops / q_bytes > 2 * RIDGE and mlp_flops / mlp_bytes > 1.5 * RIDGE


# -- 4. the model-FLOP MFU bound ---------------------------------------------------------------------
#
# A prefill SDPA call with an explicit mask: the fused call executes every query-key pair (L*S),
# while the architecture's model FLOPs take prefill as causal (L(L+1)/2 pairs, top-left aligned).
# mfu_bound_model = flops_model / (time_bound_s * peak), time_bound_s = max(F_exec / P, Q / W).


@pytest.mark.parametrize(("b", "h", "d", "s"), [(1, 2, 16, 32), (1, 16, 64, 2048)])
def test_mfu_bound_model_is_model_flops_over_the_step_bound_times_peak(b, h, d, s):
    q, k, v = meta(b, h, s, d), meta(b, h, s, d), meta(b, h, s, d)
    mask = meta(s, s, dtype=torch.bool)
    report = rooflinekit.profile(AttentionOnly(h, h, d), q, k, v, mask, hardware="H800", phase="prefill",
                                 batch=b, context=s).to_dict()
    executed = 2 * b * h * s * s * (d + d)
    model = 2 * b * h * (s * (s + 1) // 2) * (d + d)
    nbytes = 4 * b * h * s * d * BF16 + s * s  # q, k, v read, out written; the bool mask
    step = time_bound(executed, nbytes)
    t = report["totals"]
    assert (t["flops"], t["flops_model"], t["bytes"]) == (executed, model, nbytes)
    assert t["time_bound_s"] == pytest.approx(step, rel=1e-12)
    assert t["mfu_bound_model"] == pytest.approx(model / (step * PEAK_BF16), rel=1e-12)
    assert t["mfu_bound"] == pytest.approx(min(1.0, executed / nbytes / RIDGE), rel=1e-12)
    if executed / nbytes > RIDGE:  # compute-bound: the ratio of model to executed FLOPs, (S+1)/2S
        assert t["mfu_bound_model"] == pytest.approx((s + 1) / (2 * s), rel=1e-12)
    else:  # memory-bound: model FLOPs over bytes, over the ridge
        assert t["mfu_bound_model"] == pytest.approx(model / nbytes / RIDGE, rel=1e-12)


# -- 5. MoE: expected distinct experts ---------------------------------------------------------------


def _distinct_by_enumeration(tokens: int, k: int, experts: int) -> float:
    """The mean number of distinct experts over every way `tokens` tokens each pick k of `experts`."""
    choices = list(itertools.combinations(range(experts), k))
    sizes = [len(set().union(*pick)) for pick in itertools.product(choices, repeat=tokens)]
    return sum(sizes) / len(sizes)


def test_expected_distinct_experts_closed_form_and_edges():
    distinct = moe.expected_distinct_experts
    # E[distinct] = E * (1 - (1 - k/E)^T): each expert is missed by one token with probability (E-k)/E
    assert distinct(2, 2, 8) == pytest.approx(8 * (1 - (6 / 8) ** 2)) == 3.5
    assert distinct(64, 8, 256) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 64), rel=1e-12)
    assert distinct(1, 2, 8) == pytest.approx(2)  # one token: its k experts
    assert distinct(5, 8, 8) == pytest.approx(8)  # k = E: every expert
    assert distinct(10_000, 2, 8) == pytest.approx(8)  # many tokens: all of them
    assert distinct(0, 2, 8) == 0.0 and distinct(-1, 2, 8) == 0.0  # no tokens
    assert distinct(4, 2, 0) == 0.0  # no experts
    assert distinct(3, 0, 8) == 0.0  # no expert per token
    # exact against enumeration (E=4, k=2: 6 choices per token)
    for tokens in (1, 2, 3):
        assert distinct(tokens, 2, 4) == pytest.approx(_distinct_by_enumeration(tokens, 2, 4), rel=1e-12)


def _slots_by_enumeration(tokens: int, copies: list[int]) -> float:
    """Mean distinct expert slots hit when each of `tokens` tokens picks one expert uniformly, then
    one of that expert's copies uniformly (k = 1): every outcome enumerated with its probability."""
    slots = [(e, c) for e, n in enumerate(copies) for c in range(n)]
    chance = {(e, c): 1 / (len(copies) * copies[e]) for e, c in slots}
    mean = 0.0
    for pick in itertools.product(slots, repeat=tokens):
        p = 1.0
        for slot in pick:
            p *= chance[slot]
        mean += p * len(set(pick))
    return mean


def test_redundant_expert_copies_split_their_hits():
    distinct = moe.expected_distinct_experts
    # E = 2, one redundant copy: expert 0 in two slots (1/4 of the tokens each), expert 1 in one (1/2)
    assert distinct(2, 1, 2, 1) == pytest.approx(2 * (1 - (3 / 4) ** 2) + (1 - (1 / 2) ** 2)) == 1.625
    for tokens, copies in ((1, [2, 1]), (3, [2, 1]), (3, [2, 2, 1]), (2, [3, 2]), (4, [2, 2])):
        e, r = len(copies), sum(copies) - len(copies)
        assert distinct(tokens, 1, e, r) == pytest.approx(_slots_by_enumeration(tokens, copies), rel=1e-12)
    # no copies: the plain formula; every slot hit by many tokens
    assert distinct(7, 2, 8, 0) == distinct(7, 2, 8)
    assert distinct(100_000, 8, 256, 32) == pytest.approx(288)


def test_the_experts_model_takes_its_touched_count_from_expected_distinct_experts(monkeypatch):
    """One formula: the module model's weight bytes follow the function (here replaced by 3.0)."""
    monkeypatch.setattr(moe, "expected_distinct_experts", lambda tokens, top_k, num_experts, redundant=0: 3.0)
    ep, hidden, inter = 4, 256, 128
    options = {"hidden": hidden, "inter": inter, "experts": 16, "top_k": 2}
    report = model_file(MODELS / "experts3d.py", "decode", 4, 8, **options)
    workload = Workload("decode", 4, 8, "bf16", "meta", tuple(sorted(options.items())))
    report_ep = run_profile(load_source(str(MODELS / "experts3d.py"), options), workload,
                        Deployment("H800", ep=ep)).report.to_dict()
    # tests/models/experts3d.py: gate_up [E, 2*inter, hidden] and down [E, hidden, inter] per expert
    per_expert = (2 * inter * hidden + hidden * inter) * BF16
    for r, share in ((report, 1), (report_ep, ep)):
        weights = sum(o["param_bytes"] for o in r["ops"] if o["name"].startswith("moe."))
        assert weights == pytest.approx(3.0 / share * per_expert)


# -- 7. planned tensor parallelism against the model's dimensions ------------------------------------

#: examples/llama_gqa.py, small: 8 heads, 4 KV heads (split at tp 2 and 4, never replicated)
TP_DIMS = {"layers": 2, "heads": 8, "kv_heads": 4, "head_dim": 32, "hidden": 256, "intermediate": 512,
           "vocab": 1000}


@pytest.fixture(scope="module")
def tp_reports():
    return {(phase, tp): model_file(GQA, phase, 3, 64, tp=tp, **TP_DIMS)
            for phase in ("decode", "prefill") for tp in (2, 4)}


@pytest.mark.parametrize("tp", [2, 4])
def test_per_gpu_weight_bytes_follow_the_split(tp_reports, tp):
    L, H, Hkv, d, h, i, V = (TP_DIMS[x] for x in ("layers", "heads", "kv_heads", "head_dim", "hidden",
                                                   "intermediate", "vocab"))
    batch = 3
    # split (1/tp): q, k, v (colwise), o (rowwise), gate, up (colwise), down (rowwise), the embedding
    # (vocab rows) and the head (vocab columns); whole: the two norms per layer and the final norm
    split_per_layer = h * H * d + 2 * h * Hkv * d + H * d * h + 3 * h * i
    norms = (2 * L + 1) * h
    held = (V * h + L * split_per_layer + h * V) / tp + norms
    report = tp_reports[("decode", tp)]
    assert report["parallel"]["weights_per_gpu"] == held * BF16
    # read in one decode step: the embedding's gathered rows (batch rows of hidden, 1/tp of them on
    # each GPU: its vocabulary share), every other weight once, rope's fp32 inv_freq (d/2 of them)
    read = batch * h / tp * BF16 + (L * split_per_layer + h * V) / tp * BF16 + norms * BF16 + d // 2 * 4
    assert report["totals"]["weight_bytes"] == pytest.approx(read, rel=1e-12)


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("tp", [2, 4])
def test_per_gpu_kv_minimum_is_the_gpus_kv_heads(tp_reports, tp, phase):
    L, Hkv, d = TP_DIMS["layers"], TP_DIMS["kv_heads"], TP_DIMS["head_dim"]
    batch, context = 3, 64
    report = tp_reports[(phase, tp)]
    per_layer = batch * context * 2 * (Hkv // tp) * d * BF16  # K and V of this GPU's heads, every position
    for row in report["attention"]:
        assert (row["num_heads"], row["num_kv_heads"]) == (TP_DIMS["heads"] // tp, Hkv // tp)
        assert row["cache_bytes_per_token"] == 2 * (Hkv // tp) * d * BF16
        assert row["kv_bytes_min"] == per_layer
    assert report["totals"]["kv_bytes_min"] == L * per_layer


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("tp", [2, 4])
def test_collective_messages_follow_the_activations(tp_reports, tp, phase):
    L, h, V = TP_DIMS["layers"], TP_DIMS["hidden"], TP_DIMS["vocab"]
    tokens = 3 * (1 if phase == "decode" else 64)
    report = tp_reports[(phase, tp)]
    comms = [o["collective"] for o in report["ops"] if o["kind"] == "collective"]
    reduces = [c for c in comms if c["collective"] == "all_reduce"]
    gathers = [c for c in comms if c["collective"] == "all_gather"]
    # an all-reduce after each rowwise product (o_proj, down_proj per layer) and the vocab-parallel embedding
    assert len(reduces) == 2 * L + 1 and len(gathers) == 1
    for c in reduces:
        assert c["group_size"] == tp
        assert c["message_bytes"] == tokens * h * BF16  # the hidden state of every token
        assert c["wire_bytes"] == pytest.approx(2 * (tp - 1) / tp * tokens * h * BF16, rel=1e-12)
    (g,) = gathers  # the logits, gathered over the vocabulary
    assert g["message_bytes"] == tokens * V * BF16
    assert g["wire_bytes"] == pytest.approx((tp - 1) / tp * tokens * V * BF16, rel=1e-12)
    wire = (2 * L + 1) * 2 * (tp - 1) / tp * tokens * h * BF16 + (tp - 1) / tp * tokens * V * BF16
    # each call: the H800 entry's latency floor, then its bytes at the link bandwidth per direction
    floor = tomllib.loads((ROOT / "hardware_db/nvidia/h800_sxm5.toml").read_text())["interconnect_latency"]
    calls = 2 * L + 2
    assert report["totals"]["time_comm_s"] == pytest.approx(calls * floor + wire / LINK_PER_DIRECTION, rel=1e-12)


def test_closed_form_helpers_are_what_they_say():
    """The helpers above, against numbers worked by hand."""
    assert gemm_flops_bytes(2, 3, 4) == (48, 2 * (6 + 12 + 8))
    assert time_bound(1e12, 0) == pytest.approx(1e12 / 989.4e12)
    assert time_bound(0, 3.35e12) == pytest.approx(1.0)
    assert math.isclose(_mlp_flops_bytes(1, 1, 1)[0], 6) and _mlp_flops_bytes(1, 1, 1)[1] == 2 * (2 * 3 + 2 + 3 + 3)
