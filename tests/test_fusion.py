"""The fused view (rooflinekit.stages.fusion): kernel bytes against counts written by hand.

Each figure here is derived from the fusion rule in docs/accounting.md (Fused view), kernel by
kernel, from the model's dimensions; the tool's own numbers are only compared against them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import EXAMPLES, profile_dict
from torch import nn

import rooflinekit
from rooflinekit.stages.capture import OpRecord
from rooflinekit.stages.fusion import fuse, fusible, fusion_notes
from rooflinekit.stages.hardware import hardware_db

LLAMA_8B = EXAMPLES / "configs" / "llama-3.1-8b.json"


def _op(i, name, reads=(), writes=(), kind="op", flops=0.0):
    """A record with per-storage traffic: reads/writes as (storage, bytes)."""
    return OpRecord(index=i, name=name, module="m", flops=flops, bytes_read=float(sum(b for _, b in reads)),
                    bytes_written=float(sum(b for _, b in writes)), dtype="bf16", counted=True, kind=kind,
                    reads=tuple((s, float(b)) for s, b in reads), writes=tuple((s, float(b)) for s, b in writes))


# -- the rule on hand-built records ------------------------------------------------------------------


def test_fusible_ops():
    for name in ("aten.add", "aten.mul_", "aten.silu", "aten.rsqrt", "aten.mean", "aten.amax", "aten._softmax",
                 "aten._to_copy", "aten.cat", "aten.index_copy_", "aten.native_layer_norm", "aten.arange"):
        assert fusible(name), name
    for name in ("aten.mm", "aten.addmm", "aten.bmm", "aten.embedding", "aten.index", "aten.topk", "aten.sort",
                 "aten.median", "F.scaled_dot_product_attention", "moe.combine", "nosuch.op"):
        assert not fusible(name), name


def test_chain_reads_inputs_once_and_writes_what_leaves():
    # x(1) -> pow -> mean -> mul(x, .) -> mm ; the mm reads 4 (the chain's output)
    ops = [
        _op(0, "aten.pow", reads=[(1, 100)], writes=[(2, 100)]),
        _op(1, "aten.mean", reads=[(2, 100)], writes=[(3, 1)]),
        _op(2, "aten.mul", reads=[(1, 100), (3, 1), (9, 10)], writes=[(4, 100)]),
        _op(3, "aten.mm", reads=[(4, 100), (8, 1000)], writes=[(5, 50)]),
    ]
    f = fuse(ops)
    assert len(f.kernels) == 1 and f.kernels[0].ops == (0, 1, 2)
    # x once (100) and the weight (10) in; the normed tensor (100) out; 2 and 3 stay inside
    assert f.kernels[0].bytes_read == 110 and f.kernels[0].bytes_written == 100
    assert f.op_bytes == [100, 0, 110, 1150]  # each byte charged to the op that moves it
    assert f.kernel_of == [0, 0, 0, -1]


def test_no_kernel_across_an_anchor():
    # a -> mm -> b, and a's output read by b too (a residual): a and b cannot be one kernel
    ops = [
        _op(0, "aten.add", reads=[(1, 8), (2, 8)], writes=[(3, 8)]),
        _op(1, "aten.mm", reads=[(3, 8), (9, 64)], writes=[(4, 8)]),
        _op(2, "aten.add", reads=[(3, 8), (4, 8)], writes=[(5, 8)]),
    ]
    f = fuse(ops)
    assert [k.ops for k in f.kernels] == [(0,), (2,)]
    assert f.op_bytes == [24, 80, 24]  # 3 leaves kernel 0 (read by the mm and by op 2)


def test_epilogue_joins_the_next_chain_and_gate_up_fuse():
    # gate = mm(x), up = mm(x), silu(gate) * up: one kernel reading gate and up, writing the product
    ops = [
        _op(0, "aten.mm", reads=[(1, 10), (20, 100)], writes=[(2, 40)]),
        _op(1, "aten.silu", reads=[(2, 40)], writes=[(3, 40)]),
        _op(2, "aten.mm", reads=[(1, 10), (21, 100)], writes=[(4, 40)]),
        _op(3, "aten.mul", reads=[(3, 40), (4, 40)], writes=[(5, 40)]),
    ]
    f = fuse(ops)
    assert [k.ops for k in f.kernels] == [(1, 3)]
    assert f.kernels[0].bytes == 120
    assert f.bytes == 150 + 120 + 150


def test_storage_read_in_parts_is_read_once_and_in_place_writes_once():
    # rotate_half: mul reads q whole, neg and cat read its halves; then an in-place add_ on the result
    ops = [
        _op(0, "aten.mm", reads=[(1, 10), (20, 100)], writes=[(2, 64)]),
        _op(1, "aten.mul", reads=[(2, 64), (7, 16)], writes=[(3, 64)]),
        _op(2, "aten.neg", reads=[(2, 32)], writes=[(4, 32)]),
        _op(3, "aten.cat", reads=[(4, 32), (2, 32)], writes=[(5, 64)]),
        _op(4, "aten.mul_", reads=[(5, 64), (7, 16)], writes=[(5, 64)]),
        _op(5, "aten.add_", reads=[(3, 64), (5, 64)], writes=[(3, 64)]),
    ]
    f = fuse(ops)
    assert [k.ops for k in f.kernels] == [(1, 2, 3, 4, 5)]
    # q (64) and the table (16) read once; 3 written once (never read again: an output)
    assert f.kernels[0].bytes_read == 80 and f.kernels[0].bytes_written == 64


def test_cache_write_remains_and_unread_output_is_written():
    # k rope then index_copy_ into a cache (30) that attention reads; v copied into cache 31
    ops = [
        _op(0, "aten.mul", reads=[(1, 16), (7, 4)], writes=[(2, 16)]),
        _op(1, "aten.index_copy_", reads=[(8, 2), (2, 16)], writes=[(30, 16)]),
        _op(2, "F.scaled_dot_product_attention", reads=[(9, 16), (30, 64), (31, 64)], writes=[(10, 16)],
            kind="fused"),
        _op(3, "aten.add", reads=[(10, 16), (11, 16)], writes=[(12, 16)]),
    ]
    f = fuse(ops)
    assert [k.ops for k in f.kernels] == [(0, 1), (3,)]
    assert f.op_bytes == [20, 18, 160, 48]


def test_counts_without_their_storages_stay_eager():
    op = _op(0, "aten.mul", reads=[(1, 16)], writes=[(2, 16)])
    op.bytes_read = 8.0  # a transform scaled the totals, not the per-storage traffic
    f = fuse([op, _op(1, "aten.add", reads=[(2, 16)], writes=[(3, 16)])])
    assert f.unknown == 1 and f.kernel_of == [-1, 0]
    assert f.op_bytes == [24.0, 32.0]
    (note,) = fusion_notes(f)
    assert "1 fusible ops keep their eager bytes" in note
    assert fusion_notes(fuse([_op(0, "aten.add", reads=[(1, 4)], writes=[(2, 4)])])) == []


# -- a small module, every kernel by hand ------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


class Block(nn.Module):
    def __init__(self, d: int, f: int):
        super().__init__()
        self.norm = RMSNorm(d)
        self.fc1 = nn.Linear(d, f, bias=False)
        self.fc2 = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def test_small_block_every_kernel_by_hand():
    B, S, d, f, b = 2, 64, 256, 1024, 2  # bf16
    with torch.device("meta"):
        model = Block(d, f).to(torch.bfloat16)
        x = torch.empty(B, S, d, dtype=torch.bfloat16)
    report = rooflinekit.profile(model, x, hardware="H800", phase="prefill")
    N = B * S
    act_d, act_f = N * d * b, N * f * b
    norm = act_d + d * b + act_d  # x and the weight in, the normed tensor out (fp32 steps stay inside)
    fc1 = act_d + d * f * b + act_f  # anchor: eager
    gelu = act_f + act_f
    fc2 = act_f + f * d * b + act_d  # anchor: eager
    residual = act_d + act_d + act_d  # x and fc2's output in, the model's output out
    fused = report.totals.fused
    assert fused.bytes == norm + fc1 + gelu + fc2 + residual
    assert fused.kernels == 3
    # placement: pointwise kernels (no FLOPs counted) at bytes/bandwidth, the products at their bound
    hw = hardware_db().get("H800")
    peak, bw = hw.peak("bf16"), hw.memory_bandwidth
    mm = 2 * N * d * f
    expected = (norm + gelu + residual) / bw + max(mm / peak, fc1 / bw) + max(mm / peak, fc2 / bw)
    assert fused.predicted_step_s == pytest.approx(expected, rel=1e-12)
    assert fused.time_bound_s == pytest.approx(max(report.totals.flops / peak, fused.bytes / bw), rel=1e-12)
    assert fused.intensity == pytest.approx(report.totals.flops / fused.bytes, rel=1e-12)
    rows = {m.name: m.fused_bytes for m in report.modules}
    assert rows["norm"] == norm and rows["fc1"] == fc1 and rows["fc2"] == fc2
    assert rows["(root)"] == gelu + residual
    assert report.totals.bytes > fused.bytes  # eager moves every fp32 step of the norm
    data = report.to_dict()  # validated against the shipped schema (conftest)
    assert data["totals"]["fused"]["bytes"] == fused.bytes
    assert {"bytes", "intensity", "time_bound_s", "predicted_step_s"} <= data["totals"]["fused"].keys()


# -- Llama-3.1-8B, full model -----------------------------------------------------------------------

S, H, HKV, INTER, VOCAB, LAYERS, BF16 = 4096, 4096, 1024, 14336, 128256, 32, 2
T = S * H * BF16  # one hidden-state activation
KV = S * HKV * BF16  # K or V of all positions
M = S * INTER * BF16  # one MLP activation
CS = S * 128 * BF16  # the rope cos (or sin) table, head_dim 128
POS = S * 8  # int64 positions
WN = H * BF16  # a norm weight
W_Q, W_KV, W_MLP, W_HEAD = H * H * BF16, H * HKV * BF16, H * INTER * BF16, VOCAB * H * BF16


def llama_prefill_fused_by_hand() -> int:
    """Llama-3.1-8B prefill, batch 1, context 4096, bf16, under the fusion rule, kernel by kernel."""
    total = POS + T + T  # embedding (anchor): ids, the gathered rows, its output
    total += POS + 64 * 4 + 2 * CS  # rotary: positions and fp32 inv_freq in, cos and sin out
    for layer in range(LAYERS):
        total += 8 + POS + 8 + 8  # static cache bookkeeping: positions from the offset; offset += S
        if layer == 0:
            total += T + WN + T  # input rmsnorm: hidden in, normed out
        else:  # previous layer's residual add + input rmsnorm: both addends in, residual and normed out
            total += 2 * T + WN + 2 * T
        total += (T + W_Q + T) + 2 * (T + W_KV + KV)  # q, k, v projections (anchors)
        total += T + 2 * CS + T  # rope on q: q, cos, sin in, q rotated out
        total += KV + 2 * CS + POS + KV  # rope on k fused with its cache write: k, cos, sin, positions in
        total += KV + POS + KV  # v's cache write
        total += T + 2 * KV + T  # attention (anchor)
        total += T + W_Q + T  # o_proj (anchor)
        total += 2 * T + WN + 2 * T  # residual add + post-attention rmsnorm
        total += 2 * (T + W_MLP + M)  # gate, up (anchors)
        total += 3 * M  # silu(gate) * up
        total += M + W_MLP + T  # down (anchor)
    total += 2 * T + WN + T  # last residual add + final norm (the residual is read only inside)
    total += WN + W_HEAD + VOCAB * BF16  # lm_head on the last position (anchor)
    return total


def llama_prefill_floor() -> int:
    """Weights read once, and each matrix product's activation input and output moved once."""
    weights = T + LAYERS * (2 * W_Q + 2 * W_KV + 3 * W_MLP + 2 * WN) + WN + W_HEAD  # embedding: rows read
    products = LAYERS * ((T + T) + 2 * (T + KV) + (T + T) + 2 * (T + M) + (M + T)) + WN + VOCAB * BF16
    return weights + products


@pytest.mark.slow
@pytest.mark.hf
def test_llama_8b_prefill_fused_bytes_by_hand():
    report = profile_dict(LLAMA_8B, phase="prefill", batch=1, context=4096)
    fused, eager = report["totals"]["fused"]["bytes"], report["totals"]["bytes"]
    by_hand, floor = llama_prefill_fused_by_hand(), llama_prefill_floor()
    # acceptance: within 2%; the hand count follows every kernel, so it holds far closer
    assert fused == pytest.approx(by_hand, rel=1e-3)
    assert floor < fused < eager
    assert fused / eager < 0.6
    assert sum(m["fused_bytes"] for m in report["modules"]) == pytest.approx(fused, rel=1e-12)
    # the predicted step shrinks with the bytes; FLOPs do not change
    assert report["totals"]["fused"]["predicted_step_s"] < report["totals"]["predicted_step_s"]
    assert report["totals"]["fused"]["intensity"] == pytest.approx(report["totals"]["flops"] / fused, rel=1e-12)


@pytest.mark.slow
@pytest.mark.hf
def test_llama_8b_decode_barely_changes():
    report = profile_dict(LLAMA_8B, phase="decode", batch=1, context=4096)
    t = report["totals"]
    assert t["fused"]["bytes"] <= t["bytes"]
    assert abs(t["fused"]["bytes"] / t["bytes"] - 1) < 0.02
    assert abs(t["fused"]["predicted_step_s"] / t["predicted_step_s"] - 1) < 0.02
    assert abs(t["fused"]["time_bound_s"] / t["time_bound_s"] - 1) < 0.02


def test_reductions_are_fusible_by_name_as_by_torchs_tag():
    """REDUCTION_OPS is what torch tags `reduction` where the tag exists (so a torch without it,
    2.5, fuses the same ops): every tagged op is in it, and every op in it is fusible."""
    import torch

    from rooflinekit.stages.fusion import REDUCTION_OPS, UNFUSIBLE_OPS, fusible

    assert all(fusible(name) for name in REDUCTION_OPS - UNFUSIBLE_OPS)
    if not hasattr(torch.Tag, "reduction"):
        return
    tagged = set()
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        for overload in getattr(packet, "overloads", list)():
            if torch.Tag.reduction in getattr(getattr(packet, overload), "tags", ()):
                tagged.add(f"aten.{name}")
    assert tagged <= REDUCTION_OPS, tagged - REDUCTION_OPS
