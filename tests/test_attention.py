"""Attention attribution per architecture, against closed forms (bf16, decode, per layer)."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, MODELS, profile_dict

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"
B, S = 4, 32768


def _rows(report):
    assert report["attention"], "no attention layer found"
    return report["attention"]


def test_gqa_example_minimum_bytes_and_intensity():
    h, h_kv, d = 32, 8, 128
    report = profile_dict(GQA, batch=B, context=S, layers=1)
    (row,) = _rows(report)
    assert (row["arch"], row["num_heads"], row["num_kv_heads"], row["head_dim"]) == ("gqa", h, h_kv, d)
    assert row["kv_bytes_min"] == 2 * B * S * h_kv * d * 2
    assert row["cache_bytes_per_token"] == 2 * h_kv * d * 2
    assert row["flops_model"] == 4 * B * h * S * d
    # 4*B*H*S*d FLOPs over 4*B*H_kv*S*d bytes: the group size H/H_kv (= 4 here), plus q/out bytes
    assert row["intensity_min"] == pytest.approx(h / h_kv, rel=0.01)
    assert row["amplification"] == pytest.approx(1.0, rel=0.01)  # enable_gqa: no repeat


@pytest.mark.parametrize("heads,kv_heads,expected", [(8, 8, 1.0), (8, 1, 8.0), (16, 4, 4.0)])
def test_mha_mqa_gqa_intensity_is_group_size(heads, kv_heads, expected):
    report = profile_dict(GQA, batch=B, context=S, layers=1, hidden=heads * 64, heads=heads,
                         kv_heads=kv_heads, head_dim=64, intermediate=256, vocab=256)
    (row,) = _rows(report)
    assert row["arch"] == {1.0: "mha", 8.0: "mqa", 4.0: "gqa"}[expected]
    assert row["intensity_min"] == pytest.approx(expected, rel=0.01)


def test_mla_absorbed_128_heads():
    report = profile_dict(MLA, batch=B, context=S, layers=1, mode="absorbed", heads=128)
    (row,) = _rows(report)
    assert (row["arch"], row["mode"]) == ("mla", "absorbed")
    assert row["cache_bytes_per_token"] == (512 + 64) * 2 == 1152
    assert row["kv_bytes_min"] == B * S * 576 * 2
    assert row["flops_executed"] == pytest.approx(2 * B * S * 128 * (576 + 512), rel=0.01)
    assert row["intensity_min"] == pytest.approx(128 * 1088 / 576, rel=0.01)  # 241.8
    # the example reads the latent in both products (scores and output): (512+64+512)/576
    assert row["amplification"] == pytest.approx((512 + 64 + 512) / 576, rel=0.01)


def test_mla_absorbed_16_heads_tp8_view():
    report = profile_dict(MLA, batch=B, context=S, layers=1, mode="absorbed", heads=16)
    (row,) = _rows(report)
    assert row["intensity_min"] == pytest.approx(16 * 1088 / 576, rel=0.01)  # 30.2


def test_mla_naive_caches_per_head_kv():
    report = profile_dict(MLA, batch=B, context=S, layers=1, mode="naive", heads=128)
    (row,) = _rows(report)
    assert row["kv_read_bytes"] == pytest.approx(B * S * 128 * (192 + 128) * 2, rel=0.01)
    assert row["kv_bytes_executed"] == pytest.approx(B * S * 128 * (192 + 128) * 2, rel=0.01)
    assert row["amplification"] == pytest.approx(128 * 320 / 576, rel=0.01)  # ~71


@pytest.mark.parametrize("path,kw", [(GQA, {"layers": 1}), (MLA, {"layers": 1, "mode": "absorbed"})])
def test_attention_intensity_does_not_depend_on_batch(path, kw):
    values = [_rows(profile_dict(path, batch=b, context=4096, **kw))[0]["intensity_min"] for b in (1, 4, 48)]
    assert max(values) == pytest.approx(min(values), rel=0.01)


def test_repeated_kv_amplification():
    # tests/models/repeat_kv_sdpa.py: H=8, H_kv=2 (g=4), static cache, repeat_kv before SDPA.
    g, ctx = 4, 2048
    (row,) = _rows(profile_dict(MODELS / "repeat_kv_sdpa.py", batch=2, context=ctx))[:1]
    assert (row["arch"], row["num_kv_heads"]) == ("gqa", 2)
    # SDPA reads the repeated K/V: g times the cache
    assert row["read_amplification"] == pytest.approx(g, rel=0.01)
    # plus the repeat copy itself (read the cache once, write g copies): 1 + 2g in all
    assert row["amplification"] == pytest.approx(1 + 2 * g, rel=0.02)


def test_no_repeat_amplification_is_one():
    (row,) = _rows(profile_dict(MODELS / "fused_qkv_mqa.py", batch=2, context=2048))[:1]
    assert row["arch"] == "mqa"
    assert row["amplification"] == pytest.approx(1.0, rel=0.01)


def test_einsum_attention_with_cat_cache():
    # einsum QK^T/PV, repeat_interleave to 8 heads, torch.cat cache update: H=8, H_kv=2, d=32
    ctx, b = 2048, 2
    (row,) = _rows(profile_dict(MODELS / "einsum_attn.py", batch=b, context=ctx))[:1]
    assert (row["arch"], row["num_heads"], row["num_kv_heads"]) == ("gqa", 8, 2)
    assert row["kv_bytes_min"] == 2 * b * ctx * 2 * 32 * 2
    assert row["read_amplification"] == pytest.approx(4, rel=0.01)
    assert row["amplification"] > row["read_amplification"] + 2  # the cat and the repeat are counted


def test_nn_multihead_attention_recognised():
    rows = _rows(profile_dict(MODELS / "torch_mha.py", batch=2, context=256))
    assert all(r["arch"] == "mha" and r["num_heads"] == 8 for r in rows)
    assert all(r["intensity_min"] == pytest.approx(1.0, rel=0.01) for r in rows)


def test_unrecognised_attention_is_reported_and_counted(tmp_path):
    (tmp_path / "anon.py").write_text(
        "import torch\n"
        "class Core(torch.nn.Module):\n"
        "    def forward(self, q, k, v):\n"
        "        return torch.softmax(q.flatten(0, 1) @ k.flatten(0, 1).transpose(1, 2), -1) @ v.flatten(0, 1)\n"
        "def build_model():\n    return Core()\n"
        "def make_inputs(b, c, p):\n"
        "    return (torch.randn(b, 3, 1, 16), torch.randn(b, 3, c, 16), torch.randn(b, 3, c, 16))\n"
    )
    report = profile_dict(tmp_path / "anon.py", batch=2, context=100)
    (row,) = report["attention"]
    assert row["arch"] == "unrecognised" and not row["recognised"]
    assert row["flops_executed"] == 4 * 2 * 3 * 100 * 16
    assert "not recognised" in " ".join(row["notes"])
    # the minimum is unknown (null, not 0), and so is the amplification
    totals = report["attention_totals"]
    assert totals["kv_bytes_min"] is None and totals["amplification"] is None
    assert report["totals"]["kv_bytes_min"] is None
    assert totals["kv_bytes_executed_unrecognised"] == totals["kv_bytes_executed"] == 2 * (2 * 3 * 100 * 16 * 2)  # K and V, bf16


# -- heads the module does not declare: the call tells --------------------------------------------

UNDECLARED = MODELS / "undeclared_heads.py"


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize(
    "attn,kv_heads,declare,arch",
    [
        ("sdpa", 1, False, "mqa"),  # [B, S, d] cache widened by a stride-0 expand
        ("sdpa", 1, True, "mqa"),  # n_heads declared, K/V heads not: taken from the call
        ("matmul", 1, False, "mqa"),
        ("matmul", 2, False, "gqa"),  # repeat_interleave before q @ k^T
        ("sdpa", 2, True, "gqa"),
        ("matmul", 8, False, "mha"),
        ("einsum", 1, False, "mqa"),  # einsum's operand shapes, before aten folds the heads
        ("einsum", 2, False, "gqa"),
    ],
)
def test_kv_heads_from_the_call_when_the_module_does_not_declare_them(attn, kv_heads, declare, arch, device):
    b, ctx, h, d = 2, 512, 8, 32
    report = profile_dict(UNDECLARED, batch=b, context=ctx, device=device, attn=attn, kv_heads=kv_heads,
                         declare_heads=declare)
    (row,) = _rows(report)
    assert (row["arch"], row["num_heads"], row["num_kv_heads"], row["head_dim"]) == (arch, h, kv_heads, d)
    assert row["kv_bytes_min"] == 2 * b * ctx * kv_heads * d * 2  # K and V, bf16, read once
    assert row["flops_model"] == 4 * b * h * ctx * d  # QK^T and PV, one query row
    assert not any("taken as" in n for n in row["notes"])  # nothing was assumed


def test_expand_is_read_once_and_repeat_is_a_copy():
    b, ctx = 2, 512
    (expand,) = _rows(profile_dict(UNDECLARED, batch=b, context=ctx, kv_heads=1))
    assert expand["read_amplification"] == pytest.approx(1.0, rel=1e-3)  # stride-0 heads: one read
    (repeat,) = _rows(profile_dict(UNDECLARED, batch=b, context=ctx, kv_heads=2))
    g = 8 // 2
    assert repeat["read_amplification"] == pytest.approx(g, rel=1e-3)
    assert repeat["amplification"] == pytest.approx(1 + 2 * g, rel=0.01)  # + the copy's read and write


def test_heads_assumed_equal_are_said_so(tmp_path):
    (tmp_path / "folded.py").write_text(
        "import torch\n"
        "class Attn(torch.nn.Module):\n"
        "    num_heads, head_dim = 3, 16\n"
        "    def forward(self, q, k, v):\n"  # heads folded into batch: the call cannot show them
        "        return torch.softmax(q.flatten(0, 1) @ k.flatten(0, 1).transpose(1, 2), -1) @ v.flatten(0, 1)\n"
        "def build_model():\n    return Attn()\n"
        "def make_inputs(b, c, p):\n"
        "    return (torch.randn(b, 3, 1, 16), torch.randn(b, 3, c, 16), torch.randn(b, 3, c, 16))\n"
    )
    (row,) = _rows(profile_dict(tmp_path / "folded.py", batch=2, context=100))
    assert (row["arch"], row["num_kv_heads"]) == ("mha", 3)
    assert any("taken as 3, the query heads" in n for n in row["notes"])


# -- causal or not: from the call ------------------------------------------------------------------


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_encoder_and_cross_attention_are_full_decoder_self_attention_causal(device):
    b, n, h, d = 2, 96, 4, 16
    report = profile_dict(MODELS / "encoder_decoder.py", phase="prefill", batch=b, context=n, device=device)
    rows = {r["module"]: r for r in _rows(report)}
    assert set(rows) == {"encoder.self_attn", "decoder.self_attn", "decoder.multihead_attn"}
    full = 2 * b * h * n * n * (d + d)  # every query row sees all n keys
    causal = 2 * b * h * (n * (n + 1) // 2) * (d + d)  # row i sees i + 1 keys
    assert rows["encoder.self_attn"]["flops_model"] == full
    assert rows["decoder.multihead_attn"]["flops_model"] == full
    assert rows["decoder.self_attn"]["flops_model"] == causal
    for r in rows.values():
        assert not any("not inspected" in note for note in r["notes"])


def test_an_explicit_mask_is_assumed_causal_and_said_so():
    # matmul attention in prefill: the additive mask's values are not read
    (row,) = _rows(profile_dict(UNDECLARED, phase="prefill", batch=1, context=64, attn="matmul", kv_heads=2))
    assert row["flops_model"] == 2 * 8 * (64 * 65 // 2) * 64
    assert any("not inspected" in n and "causal" in n for n in row["notes"])
