"""Counting regressions, each against a closed form: MLA model FLOPs keep the new tokens' kv_b_proj,
a dtype cast on the K path is not a K/V repeat, a repeat_kv copy does not hide a sliding window."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rooflinekit.analyses.profile import run_profile
from rooflinekit.api import profile as profile_module
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, profile_dict

CONFIGS = EXAMPLES / "configs"


def _cfg(name):
    return json.loads((CONFIGS / f"{name}.json").read_text())


# -- MLA: the new tokens' kv_b_proj is model FLOPs -------------------------------------------------


def deepseek_v2_decode_flops(c: dict, batch: int, context: int, layers: int) -> float:
    """Model FLOPs of one decode step of a DeepSeek-V2-style model, by hand: 2 per weight a token
    multiplies (MLA projections with kv_b_proj on the new latent, the dense first layers' MLP, per
    MoE layer the router, top-k routed and the shared experts, the head on one position) plus
    naive MLA attention over `context` positions (2 * H * S * (nope + rope + v) per sequence)."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    nope, rope, v, rank = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    q = h * c["q_lora_rank"] + c["q_lora_rank"] * heads * (nope + rope) if c.get("q_lora_rank") else h * heads * (nope + rope)
    attn = q + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
    dense = min(layers, c["first_k_dense_replace"])
    mlp = 3 * h * c["intermediate_size"]
    moe = (h * c["n_routed_experts"] + c["num_experts_per_tok"] * 3 * h * c["moe_intermediate_size"]
           + 3 * h * c["moe_intermediate_size"] * c["n_shared_experts"])
    weights = layers * attn + dense * mlp + (layers - dense) * moe + h * c["vocab_size"]
    attention = layers * 2 * batch * heads * context * (nope + rope + v)
    return 2 * batch * weights + attention


@pytest.mark.hf
@pytest.mark.slow
def test_deepseek_v2_decode_model_flops_keep_the_new_tokens_kv_b_proj():
    c = _cfg("deepseek-v2")
    assert (c["hidden_size"], c["num_hidden_layers"], c["n_routed_experts"]) == (5120, 60, 160)
    b, s = 8, 8192
    report = profile_dict(CONFIGS / "deepseek-v2.json", batch=b, context=s)
    expected = deepseek_v2_decode_flops(c, b, s, c["num_hidden_layers"])
    assert report["totals"]["flops_model"] == pytest.approx(expected, rel=0.005)


@pytest.mark.hf
def test_mla_reexpansion_leaves_the_new_tokens_projection_in_model_flops():
    c = _cfg("deepseek-v2-lite")
    b, s, layers = 8, 1024, 2
    report = profile_dict(CONFIGS / "deepseek-v2-lite.json", batch=b, context=s, layers=layers)
    per_row = 2 * c["kv_lora_rank"] * c["num_attention_heads"] * (c["qk_nope_head_dim"] + c["v_head_dim"])
    # the cached positions' re-expansion only: S - 1 of the S rows kv_b_proj ran over
    assert all(r["kv_reexpand_flops"] == b * (s - 1) * per_row for r in report["attention"])
    expected = deepseek_v2_decode_flops(c, b, s, layers)
    assert report["totals"]["flops_model"] == pytest.approx(expected, rel=0.005)


# -- a dtype cast on the K path is not a repeat ----------------------------------------------------


class UpcastKAttention(nn.Module):
    """MHA that declares its query heads only (`n_heads`) and normalises k in float32 (OLMoE's
    k_norm): the cast doubles the bytes of k, not its heads."""

    def __init__(self, hidden=256, heads=8, head_dim=32):
        super().__init__()
        self.n_heads, self.dh = heads, head_dim
        self.wq = nn.Linear(hidden, heads * head_dim, bias=False)
        self.wk = nn.Linear(hidden, heads * head_dim, bias=False)
        self.wv = nn.Linear(hidden, heads * head_dim, bias=False)
        self.wo = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x, k_cache, v_cache):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.n_heads, self.dh).transpose(1, 2)
        k = self.wk(x)
        k32 = k.float()
        k = (k32 * torch.rsqrt(k32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        k = k.view(b, n, self.n_heads, self.dh).transpose(1, 2)
        v = self.wv(x).view(b, n, self.n_heads, self.dh).transpose(1, 2)
        k_cache[:, :, -1:].copy_(k)
        v_cache[:, :, -1:].copy_(v)
        o = F.scaled_dot_product_attention(q, k_cache, v_cache)
        return self.wo(o.transpose(1, 2).reshape(b, n, -1))


def test_a_cast_on_the_k_path_is_not_a_kv_repeat():
    b, s, heads, dh = 2, 512, 8, 32
    with torch.device("meta"):
        model = UpcastKAttention(heads=heads, head_dim=dh).to(torch.bfloat16)
        x = torch.empty(b, 1, 256, dtype=torch.bfloat16)
        kc = torch.empty(b, heads, s, dh, dtype=torch.bfloat16)
        vc = torch.empty(b, heads, s, dh, dtype=torch.bfloat16)
    report = profile_module(model, x, kc, vc, phase="decode", context=s)
    (row,) = report.attention
    assert (row.arch, row.num_heads, row.num_kv_heads) == ("mha", heads, heads)
    assert row.kv_bytes_min == b * s * 2 * heads * dh * 2  # K and V of every head, bf16
    assert not any("distinct heads" in n for n in row.notes)


def test_olmoe_k_norm_upcast_leaves_its_16_kv_heads(tmp_path):
    pytest.importorskip("transformers")
    config = tmp_path / "olmoe.json"
    config.write_text(json.dumps({"model_type": "olmoe"}))
    report = profile_dict(config, batch=2, context=1024, layers=1)
    (row,) = report["attention"]
    # OLMoE's default config: 16 heads, 16 K/V heads of 128
    assert (row["arch"], row["num_heads"], row["num_kv_heads"]) == ("mha", 16, 16)
    assert row["kv_bytes_min"] == 2 * 1024 * 2 * 16 * 128 * 2
    assert not any("distinct heads" in n for n in row["notes"])


# -- a repeat_kv copy does not hide a window -------------------------------------------------------


def _gemma2(host=None, context=8192):
    workload = Workload("decode", 1, context, "bf16", "meta", (("layers", 2),))
    source = load_source(str(CONFIGS / "gemma-2-9b.json"), {"layers": 2}, host)
    return run_profile(source, workload, Deployment("H800"), host=host).report


def test_gemma2_sliding_rows_carry_their_window_at_8192():
    pytest.importorskip("transformers")
    c = _cfg("gemma-2-9b")
    w, hkv, d = c["sliding_window"], c["num_key_value_heads"], c["head_dim"]
    local, full = _gemma2().attention
    assert (local.window, full.window) == (w, None)
    assert local.kv_bytes_min == 1 * w * hkv * 2 * d * 2  # the window's K and V, bf16
    assert full.kv_bytes_min == 1 * 8192 * hkv * 2 * d * 2


def test_a_window_no_plugin_declares_is_seen_through_repeat_kv():
    """Without the sliding-window plugin the local layer is costed as full attention: the note must
    say it read half the minimum, although its repeat_kv copy reads the window twice over."""
    pytest.importorskip("transformers")
    c = _cfg("gemma-2-9b")
    groups = c["num_attention_heads"] // c["num_key_value_heads"]
    host = PluginHost(disabled={"sliding_window"})
    local, full = _gemma2(host).attention
    assert local.window is None and local.num_kv_heads == c["num_key_value_heads"]
    # what the products read: every query head over the window's keys (the repeat), = groups x window
    assert local.kv_read_bytes == pytest.approx(groups * c["sliding_window"] / 8192 * local.kv_bytes_min)
    read = [n for n in local.notes if "the K/V minimum" in n]
    assert read and f"read {c['sliding_window'] / 8192:.3g}x the K/V minimum" in read[0]
    assert f"{groups:g}x repeated K/V counted once" in read[0]
    assert not any("the K/V minimum" in n for n in full.notes)
