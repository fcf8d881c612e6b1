"""Quantized weights and KV caches, fp8 activations (rooflinekit.transforms.quantize), against closed
forms computed here from the configs' dimensions."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from conftest import EXAMPLES, MODELS, TINY_LLAMA

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source

CONFIGS = EXAMPLES / "configs"
GQA_FILE = EXAMPLES / "llama_gqa.py"
BF16 = 2


def run(path, workload: Workload, deployment: Deployment | None = None, hardware: str = "H800"):
    """Profile `path` at `workload` (its -O options from workload.options) under `deployment` (its
    formats and degrees) on `hardware`."""
    deployment = replace(deployment or Deployment(), hardware=hardware)
    return run_profile(load_source(str(path), dict(workload.options)), workload, deployment)


def config(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


def decode(batch=2, context=1024, options=(), **fields) -> Workload:
    return Workload("decode", batch, context, options=tuple(sorted(options)), **fields)


# -- weights -------------------------------------------------------------------------------------


def llama_weights(c: dict, layers: int, bits: float, group: int | None, scale_bytes: float,
                  quantize_embeddings: bool = False) -> tuple[float, float]:
    """(quantized linear parameters, stored bytes of every parameter) of a Llama config: q/k/v/o and
    gate/up/down at `bits` plus one scale per `group` input elements, embedding and untied lm_head at
    bf16 (or quantized too), RMSNorm weights at bf16."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    head_dim = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * head_dim
    per_layer = [(h, h), (kv, h), (kv, h), (h, h), (i, h), (i, h), (h, i)]  # (out, in) of each Linear

    def stored(rows: int, cols: int) -> float:
        return rows * cols * bits / 8 + (rows * math.ceil(cols / group) * scale_bytes if group else 0)

    quantized = layers * sum(r * k for r, k in per_layer)
    total = layers * sum(stored(r, k) for r, k in per_layer)
    table = stored(v, h) if quantize_embeddings else v * h * BF16
    total += 2 * table  # embedding and lm_head (untied)
    total += (2 * layers + 1) * h * BF16  # input/post-attention norms, final norm
    return quantized, total


@pytest.mark.hf
@pytest.mark.slow
def test_int4_group128_llama_8b_weights_are_half_a_byte_plus_scales():
    c = config("llama-3.1-8b.json")
    assert (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"],
            c["num_key_value_heads"], c["vocab_size"]) == (4096, 14336, 32, 32, 8, 128256)
    p = run(CONFIGS / "llama-3.1-8b.json", decode(batch=1, context=4096), Deployment(weight_dtype="int4"))
    quantized, stored = llama_weights(c, 32, 4, 128, 2)
    # 0.5 byte per quantized parameter plus one fp16 scale per 128 of them
    assert quantized * (0.5 + 2 / 128) + 2 * 128256 * 4096 * BF16 + 65 * 4096 * BF16 == pytest.approx(stored)
    r = p.report
    assert r.model.param_bytes == pytest.approx(stored, rel=0.005)
    assert r.deployment.weight_dtype == "int4" and r.deployment.weight_group_size == 128
    # a decode step reads every quantized weight, lm_head, one embedding row and the norms
    step = quantized * (0.5 + 2 / 128) + 128256 * 4096 * BF16 + 4096 * BF16 + 65 * 4096 * BF16
    assert r.totals.weight_bytes == pytest.approx(step, rel=0.005)
    assert any("kept as run: token embedding" in n and "output head (lm_head.weight)" in n for n in r.notes)


@pytest.mark.parametrize("fmt,group,bits,scale_bytes,per_row", [
    ("int8", 64, 8, 2, False), ("int4", None, 4, 2, False), ("fp8", None, 8, 4, True), ("fp8", 128, 8, 4, False),
])
def test_weight_formats_on_a_small_llama(fmt, group, bits, scale_bytes, per_row):
    opts = TINY_LLAMA | {"layers": 2, "vocab": 1000}
    base = decode(batch=4, context=64, options=opts.items())
    q = run(GQA_FILE, base, Deployment(weight_dtype=fmt, weight_group_size=group)).report
    plain = run(GQA_FILE, base).report
    h, heads, kv_heads, d, i = opts["hidden"], opts["heads"], opts["kv_heads"], opts["head_dim"], opts["intermediate"]
    shapes = [(heads * d, h), (kv_heads * d, h), (kv_heads * d, h), (h, heads * d), (i, h), (i, h), (h, i)]
    g = group or (None if per_row else 128)

    def stored(rows, cols):
        return rows * cols * bits / 8 + rows * (1 if g is None else math.ceil(cols / g)) * scale_bytes

    per_layer_plain = sum(r * k * BF16 for r, k in shapes)
    per_layer = sum(stored(r, k) for r, k in shapes)
    assert q.model.param_bytes - plain.model.param_bytes == pytest.approx(2 * (per_layer - per_layer_plain))
    assert q.totals.weight_bytes - plain.totals.weight_bytes == pytest.approx(2 * (per_layer - per_layer_plain))
    # only bytes change: FLOPs and the byte split's other parts are as before
    assert q.totals.flops == plain.totals.flops
    assert q.totals.kv_bytes_executed == plain.totals.kv_bytes_executed
    assert {o.dtype for o in q.ops if o.flops} == {"bf16"}  # weight-only: products at the bf16 peak


def test_quantize_embeddings_quantizes_embedding_and_head():
    opts = TINY_LLAMA | {"vocab": 1000}
    base = decode(batch=1, context=64, options=opts.items())
    int8 = Deployment(weight_dtype="int8")
    kept = run(GQA_FILE, base, int8).report
    both = run(GQA_FILE, base, replace(int8, quantize_embeddings=True)).report
    v, h = opts["vocab"], opts["hidden"]
    table_int8 = v * h * 1 + v * math.ceil(h / 128) * 2
    assert both.model.param_bytes - kept.model.param_bytes == pytest.approx(2 * (table_int8 - v * h * BF16))
    assert both.deployment.quantize_embeddings and not kept.deployment.quantize_embeddings


def test_fp8_activations_place_weight_products_at_the_fp8_peak():
    opts = TINY_LLAMA | {"layers": 2}
    p = run(GQA_FILE, decode(batch=64, context=64, options=opts.items(), dtype="fp8"))
    r = p.report
    assert r.deployment.weight_dtype == "fp8" and r.deployment.kv_dtype == "fp8"
    assert r.hardware.dtype == "fp8" and r.hardware.peak_flops == 1979e12
    products = [o for o in r.ops if o.flops and o.param_bytes and o.module.endswith("_proj")]
    assert len(products) == 2 * 7 and {o.dtype for o in products} == {"fp8"}
    # the head keeps its bf16 weight, so its product runs bf16
    assert [o.dtype for o in r.ops if o.module == "lm_head" and o.flops] == ["bf16"]
    # every fp8 product's time bound is its own, at the fp8 peak
    for o in products:
        assert o.time_bound_s == pytest.approx(max(o.flops / 1979e12, (o.bytes_read + o.bytes_written) / 3.35e12))
    assert any("--dtype fp8: the model ran in bf16" in n for n in r.notes)


def test_a_model_running_fp8_itself_is_counted_as_it_runs():
    hidden, inter, layers, batch, seq = 256, 512, 2, 2, 64
    p = run(MODELS / "fp8_scaled_mm.py", Workload("prefill", batch, seq))
    r = p.report
    mms = [o for o in r.ops if o.name == "aten._scaled_mm"]
    assert len(mms) == 2 * layers
    for o in mms:
        assert o.dtype == "fp8" and o.counted
        assert o.flops == 2 * batch * seq * hidden * inter
        assert o.param_bytes == hidden * inter * 1 + 2 * 4  # float8 weight, two fp32 scales
    # a weight format leaves weights the model already stores in 8 bits alone, and says so
    q = run(MODELS / "fp8_scaled_mm.py", Workload("prefill", batch, seq), Deployment(weight_dtype="int4")).report
    assert q.totals.weight_bytes == r.totals.weight_bytes
    assert any("stores in 8 bits or fewer" in n for n in q.notes)


# -- KV cache ------------------------------------------------------------------------------------


def _kv(path, batch, context, options, kv_dtype):
    return run(path, decode(batch, context, options=options.items()), Deployment(kv_dtype=kv_dtype))


@pytest.mark.hf
def test_fp8_kv_halves_the_minimum_and_the_cache_reads_gqa_config():
    c = config("llama-3.1-8b.json")
    b, s, layers = 2, 1024, 2
    kv_heads, d = c["num_key_value_heads"], c["hidden_size"] // c["num_attention_heads"]
    reports = {kv: _kv(CONFIGS / "llama-3.1-8b.json", b, s, {"layers": layers}, kv).report for kv in ("bf16", "fp8")}
    for kv, size in (("bf16", 2), ("fp8", 1)):
        r = reports[kv]
        assert r.deployment.kv_dtype == kv
        assert r.attention_totals.kv_bytes_min == layers * b * s * kv_heads * 2 * d * size
        assert r.attention_totals.cache_bytes_per_token == layers * kv_heads * 2 * d * size
        for row in r.attention:  # the fused call reads the K and V caches, all `context` slots
            assert row.kv_read_bytes == b * s * kv_heads * 2 * d * size
    lo, hi = reports["fp8"].attention_totals, reports["bf16"].attention_totals
    assert lo.kv_bytes_min * 2 == hi.kv_bytes_min
    # cache writes of the new token halve too; the new K/V read by them (bf16 activations) do not
    new_kv = b * 1 * kv_heads * 2 * d
    assert hi.kv_bytes_executed - lo.kv_bytes_executed == layers * (b * s * kv_heads * 2 * d + new_kv)
    assert reports["bf16"].totals.bytes - reports["fp8"].totals.bytes == pytest.approx(
        layers * (b * s * kv_heads * 2 * d + new_kv))


@pytest.mark.hf
def test_fp8_kv_halves_the_latent_cache_mla_config():
    c = config("deepseek-v2-lite.json")
    b, s, layers = 2, 1024, 2
    r_, rope = c["kv_lora_rank"], c["qk_rope_head_dim"]
    reports = {kv: _kv(CONFIGS / "deepseek-v2-lite.json", b, s, {"layers": layers}, kv).report
               for kv in ("bf16", "fp8")}
    for kv, size in (("bf16", 2), ("fp8", 1)):
        at = reports[kv].attention_totals
        assert at.kv_bytes_min == layers * b * s * (r_ + rope) * size
        assert at.cache_bytes_per_token == layers * (r_ + rope) * size
    # transformers' MLA reads its latent and rope-key caches (all slots) and writes the new token's:
    # every one of those bytes halves
    cache_traffic = b * s * (r_ + rope) * BF16 + b * (r_ + rope) * BF16
    lo, hi = reports["fp8"].attention_totals, reports["bf16"].attention_totals
    assert hi.kv_bytes_executed - lo.kv_bytes_executed == layers * cache_traffic / 2


def test_fp8_kv_halves_the_latent_cache_mla_model_file():
    b, s, layers, heads, r_, rope = 2, 512, 2, 16, 512, 64
    opts = {"layers": layers, "heads": heads}
    hi, lo = (_kv(EXAMPLES / "deepseek_mla.py", b, s, opts, kv).report for kv in ("bf16", "fp8"))
    assert hi.attention_totals.kv_bytes_min == layers * b * s * (r_ + rope) * BF16
    assert lo.attention_totals.kv_bytes_min * 2 == hi.attention_totals.kv_bytes_min
    # absorbed MLA reads the latent twice (scores, then values) and the rope keys once
    for a, z in zip(hi.attention, lo.attention, strict=True):
        assert a.kv_read_bytes == b * s * (2 * r_ + rope) * BF16
        assert z.kv_read_bytes * 2 == a.kv_read_bytes


def test_prefill_keeps_fresh_kv_and_halves_the_cache_writes():
    opts = TINY_LLAMA | {"layers": 1}
    b, s = 2, 64
    w = Workload("prefill", b, s, options=tuple(sorted(opts.items())))
    hi, lo = (run(GQA_FILE, w, Deployment(kv_dtype=kv)).report for kv in ("bf16", "fp8"))
    kv_heads, d = opts["kv_heads"], opts["head_dim"]
    # prefill attends the K/V it computed (bf16); only the cache writes (all slots) halve
    assert hi.attention[0].kv_read_bytes == lo.attention[0].kv_read_bytes
    assert hi.totals.bytes - lo.totals.bytes == b * s * kv_heads * 2 * d * BF16 / 2


def test_weights_per_gpu_under_tp_follow_the_format():
    p = run(GQA_FILE, Workload("decode", 1, 256), Deployment(tp=2, weight_dtype="int4"))
    # llama_gqa.py's defaults: 2 layers, hidden 4096, 8 KV heads of 128, intermediate 14336, vocab 32000
    h, kv, i, v, layers = 4096, 8 * 128, 14336, 32000, 2
    params = layers * (2 * h * h + 2 * kv * h + 3 * i * h)
    split = params * (0.5 + 2 / 128) + 2 * v * h * BF16  # every Linear, embedding and head split in 2
    norms = (2 * layers + 1) * h * BF16  # replicated
    assert p.report.parallel["weights_per_gpu"] == pytest.approx(split / 2 + norms)


@pytest.mark.hf
@pytest.mark.slow
def test_int4_quantizes_the_experts_a_module_model_stands_in_for():
    """DeepSeek-V2-Lite's routed experts run as the MoE module model (records of bytes, not
    storages): int4 stores them, and reads the touched ones, at 0.5 byte + one fp16 scale per 128
    elements, as every other linear weight. Stored bytes against a walk of the model's own
    parameters; the experts' per-step weight reads against the bf16 run's, by the same factor."""
    c = config("deepseek-v2-lite.json")
    options = (("layers", 2),)
    bf16 = run(CONFIGS / "deepseek-v2-lite.json", decode(4, 4096, options))
    int4 = run(CONFIGS / "deepseek-v2-lite.json", decode(4, 4096, options), Deployment(weight_dtype="int4"))

    expected = 0.0
    for name, p in bf16.model.named_parameters():
        if p.dim() >= 2 and name not in ("model.embed_tokens.weight", "lm_head.weight"):
            rows, cols = math.prod(p.shape[:-1]), p.shape[-1]
            expected += p.numel() * 0.5 + rows * math.ceil(cols / 128) * 2
        else:
            expected += p.numel() * BF16
    expected += sum(b.numel() * b.element_size() for b in bf16.model.buffers())  # rotary tables, as run
    assert int4.report.model.param_bytes == pytest.approx(expected, rel=1e-12)

    def expert_reads(r):
        return sum(op.param_bytes for op in r.report.ops if op.kind == "modelled" and op.name.startswith("moe."))

    e = c["moe_intermediate_size"]
    h = c["hidden_size"]
    # gate/up rows read H inputs, down rows read e inputs: 0.5 B + 2 B per 128 of them, against 2 B
    factor = (2 * e * h * (0.5 + 2 / 128) + h * e * (0.5 + 2 * math.ceil(e / 128) / e)) / (3 * e * h * BF16)
    assert expert_reads(bf16) > 0
    assert expert_reads(int4) == pytest.approx(expert_reads(bf16) * factor, rel=1e-9)
