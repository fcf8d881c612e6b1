"""The serving view reads each layer's K/V cache once, whatever style the model file attends in.

Serving engines never materialise a repeat of K/V, a mask or a re-projection: their attention
kernels read each cached key and value once. Model files write attention in many styles (HF's
`repeat_kv` before SDPA, einsum scores, a fused QKV projection with one K/V head, `enable_gqa`,
`nn.MultiheadAttention`); in each, the serving view's decode step must move the cache once:
layers x batch x context x K/V heads x head size x 2 (K and V) x 2 bytes (bf16), computed here from
the model's options alone. The code as written may move more; the serving view's attention never
does, and its step's bytes hold the weights plus that cache (nothing repeated).
"""

from __future__ import annotations

import pytest

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, MODELS

BATCH, CONTEXT, BF16 = 4, 4096, 2

#: (model file, options, K/V heads, head size, layers)
STYLES = {
    "repeat_kv before SDPA": (MODELS / "repeat_kv_sdpa.py", {"layers": 2, "heads": 8, "kv_heads": 2}, 2, 32, 2),
    "einsum scores": (MODELS / "einsum_attn.py", {"layers": 2, "heads": 8, "kv_heads": 2}, 2, 32, 2),
    "fused QKV, one K/V head": (MODELS / "fused_qkv_mqa.py", {"layers": 2, "heads": 8}, 1, 32, 2),
    "SDPA with enable_gqa": (EXAMPLES / "llama_gqa.py", {"layers": 2, "heads": 8, "kv_heads": 2, "head_dim": 32,
                                                          "hidden": 256, "intermediate": 512, "vocab": 1000}, 2, 32, 2),
    "nn.MultiheadAttention": (MODELS / "torch_mha.py", {"layers": 2, "hidden": 256, "heads": 8}, 8, 32, 2),
}


def _reports(path, options):
    source = load_source(str(path), options)
    workload = Workload("decode", BATCH, CONTEXT, "bf16", "meta", tuple(sorted(options.items())))
    return {kernels: run_profile(source, workload, Deployment("H800", kernels=kernels)).report
            for kernels in ("as-written", "serving")}


@pytest.mark.parametrize("style", list(STYLES))
def test_the_serving_view_reads_the_cache_once(style):
    path, options, kv_heads, head_dim, layers = STYLES[style]
    reports = _reports(path, options)
    serving, written = reports["serving"], reports["as-written"]
    cache = layers * BATCH * CONTEXT * kv_heads * head_dim * 2 * BF16
    assert len(serving.attention) == layers, style
    kv_min = sum(r.kv_bytes_min for r in serving.attention)
    kv_read = sum(r.kv_read_bytes for r in serving.attention)
    assert kv_min == pytest.approx(cache, rel=1e-9), style
    assert kv_read == pytest.approx(cache, rel=1e-9), style  # once: no repeat, no copy read back
    assert serving.totals.kv_bytes_executed == pytest.approx(cache, rel=1e-9), style
    assert written.totals.kv_bytes_executed >= cache  # as written, the repeats and re-reads are counted
    # the step: the weights, the cache read once, the new token's K/V and small activations
    other = serving.totals.bytes - serving.totals.weight_bytes - cache
    assert 0 <= other < 0.05 * cache, (style, other / cache)
