"""Memory capacity: weights, KV cache and measured activations per GPU against capacity x fraction.

Expected numbers are written out from the configs' dimensions and the H800 entry's capacity (what
the device reports, 81,559 MiB) less its reserve;
the activation peak of a small model is derived by hand from which tensors are alive at once.
"""

from __future__ import annotations

import json
import math
import re
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
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.analyses.sweep import run_sweep
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.capture import capture
from rooflinekit.stages.hardware import load_file
from rooflinekit.stages.memory import activation_peak
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, ROOT, TINY_LLAMA, one_line_error

CONFIGS = EXAMPLES / "configs"
H800_TOML = ROOT / "hardware_db/nvidia/h800_sxm5.toml"
H800_BYTES = 81559 * 2**20  # nvidia-smi's memory.total of an H800 SXM (the datasheet's "80 GB")
H800_RESERVE = tomllib.loads(H800_TOML.read_text())["memory_reserve_bytes"]
FRACTION = 0.9
USABLE = (H800_BYTES - H800_RESERVE) * FRACTION
BF16 = 2


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def decoder_params(c: dict, qkv_bias: bool) -> int:
    """Parameters of a Llama/Qwen2 decoder: embeddings, head, attention, SwiGLU MLP, RMSNorms."""
    d, inter, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or d // heads
    attn = d * heads * hd + 2 * d * kv * hd + heads * hd * d
    if qkv_bias:
        attn += heads * hd + 2 * kv * hd
    per_layer = attn + 3 * d * inter + 2 * d
    head = 0 if c.get("tie_word_embeddings") else c["vocab_size"] * d
    return c["vocab_size"] * d + layers * per_layer + d + head


def kv_per_sequence(c: dict, context: int) -> int:
    """K and V of every layer, every K/V head, at bf16."""
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * hd * BF16 * context


def _profile(name: str, workload: Workload, tp: int = 1):
    return run_profile(load_source(str(CONFIGS / f"{name}.json"), {}), workload, Deployment("H800", tp=tp),
                   options=ReportOptions(measure=False)).report


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_llama_70b_fits_one_h800_only_split(tp):
    """Weights alone (70.6e9 parameters x 2 B = 141 GB) exceed 0.9 x 80 GB; at TP 2 and 4 each GPU
    holds half or a quarter of them and of the K/V heads, which fits as the closed form says."""
    c = _config("llama-3.1-70b")
    weights = decoder_params(c, qkv_bias=False) * BF16
    kv = kv_per_sequence(c, 4096)
    usable = USABLE
    base = Workload("decode", 1, 4096)
    if tp == 1:
        assert weights > usable  # the closed form: no batch fits on one GPU
        m = _profile("llama-3.1-70b", base).memory
        assert m.weights_bytes == pytest.approx(weights, rel=1e-6)
        assert m.kv_cache_bytes == kv
        assert m.capacity_bytes == H800_BYTES and m.usable_bytes == pytest.approx(usable)
        assert m.fits is False and m.max_batch == 0 and m.gpus == 1
        assert m.headroom_bytes == pytest.approx(usable - m.total_bytes)
        return
    m = _profile("llama-3.1-70b", base, tp).memory
    # every weight split N ways but the 2L+1 RMSNorm vectors, replicated on every GPU
    norms = (2 * c["num_hidden_layers"] + 1) * c["hidden_size"] * BF16
    expected = (weights - norms) / tp + norms
    assert m.weights_bytes == pytest.approx(expected, rel=1e-6)
    assert m.kv_cache_bytes == kv / tp  # 8 K/V heads: 8/tp per GPU
    closed = expected + kv / tp + m.activation_peak_bytes
    assert m.fits is (closed <= usable) is True
    assert m.gpus == tp


@pytest.mark.hf
@pytest.mark.slow
def test_qwen_14b_max_batch_closed_form():
    """Decode at context 16384: max_batch = floor((capacity x fraction - weights - activations) /
    KV per sequence), KV = 2 x layers x kv_heads x head_dim x 2 B x context."""
    c = _config("qwen2.5-14b")
    weights = decoder_params(c, qkv_bias=True) * BF16
    kv = kv_per_sequence(c, 16384)
    assert kv == 2 * 48 * 8 * 128 * 2 * 16384
    m = _profile("qwen2.5-14b", Workload("decode", 1, 16384)).memory
    assert m.weights_bytes == pytest.approx(weights, rel=1e-6)
    assert m.kv_bytes_per_sequence == kv and m.kv_cache_bytes == kv
    act = m.activation_peak_bytes
    assert 0 < act < 1e8  # measured: one token's hidden states and logits, not gigabytes
    usable = USABLE
    assert m.max_batch == math.floor((usable - weights - act) / kv) == 14
    # the rule as implemented (activations scaled per sequence) gives the same batch here
    assert m.max_batch == math.floor((usable - weights) / (kv + act))
    assert m.fits is True


class _MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_activation_peak_by_hand(device):
    """up(x) [T, 4d] and gelu's output [T, 4d] are alive together (gelu reads one while writing the
    other); up's output is freed before down writes [T, d]: the peak is 2 x T x 4d elements.
    The input is passed in and the weights are parameters: neither counts."""
    tokens, d = 6, 8
    model = _MLP(d).to(device=device, dtype=torch.bfloat16)
    x = torch.zeros(tokens, d, device=device, dtype=torch.bfloat16)
    cap = capture(model, (x,))
    assert activation_peak(cap) == 2 * tokens * 4 * d * BF16


def test_capture_block_reports_memory():
    """rooflinekit.capture(): the same measured peak, and the weights (2 x d x 4d bf16 elements)."""
    tokens, d = 6, 8
    model = _MLP(d).to(dtype=torch.bfloat16)
    x = torch.zeros(tokens, d, dtype=torch.bfloat16)
    with rooflinekit.capture(hardware="H800 SXM5", phase="prefill") as cap:
        model(x)
    m = cap.report.memory
    assert m.activation_peak_bytes == 2 * tokens * 4 * d * BF16
    assert m.weights_bytes == 2 * d * 4 * d * BF16
    assert m.fits is True


def test_kv_cache_kept_by_the_forward_is_not_an_activation():
    """A cache grown by concatenation that outlives the forward is the KV cache, not activations:
    only the concatenation's transient inputs count while it runs."""

    class Grow(nn.Module):
        def forward(self, cache: list, k):
            cache[0] = torch.cat([cache[0], k * 2], dim=0)  # k*2: [1, d]; the new cache: [n+1, d]
            return cache[0].sum(0)

    n, d = 10, 4
    cache = [torch.zeros(n, d, dtype=torch.float32)]
    k = torch.zeros(1, d, dtype=torch.float32)
    cap = capture(Grow(), (cache, k))
    f32 = 4
    # as allocations: k*2 [1, d] is alive while cat writes the grown cache [n+1, d]; the grown cache
    # is alive while sum writes its [d]
    assert activation_peak(cap) == (n + 1) * d * f32 + d * f32
    grown = next(op for op in cap.ops if op.name == "aten.cat")
    for op in cap.ops:  # the grown cache read as K/V, as an attention product would read it
        if op.name == "aten.sum":
            op.sinks = tuple(sid for sid, _ in grown.writes)
    # kept after the forward and read as K/V: the KV cache, not activations
    assert activation_peak(cap) == d * f32


def small_entry(capacity: float, reserve: float = 4e6) -> str:
    """The H800 entry's text with another capacity and reserve."""
    text = re.sub(r"(?m)^memory_bytes = \d.*$", f"memory_bytes = {capacity:g}", H800_TOML.read_text())
    return re.sub(r"(?m)^memory_reserve_bytes = \d.*$", f"memory_reserve_bytes = {reserve:g}", text)


def test_every_hardware_entry_has_a_sourced_capacity():
    paths = sorted((ROOT / "hardware_db").rglob("*.toml"))
    assert paths
    for path in paths:
        entry = load_file(path)
        assert entry.memory_bytes and entry.memory_bytes > 0, path
        assert entry.sources.get("memory_bytes"), path


def test_memory_fraction_changes_usable_and_fit(invoke):
    gqa = EXAMPLES / "llama_gqa.py"
    args = ["profile", gqa, *sum((["-O", f"{k}={v}"] for k, v in TINY_LLAMA.items()), []), "-f", "json"]
    full = json.loads(invoke(*args, "--memory-fraction", "1").stdout)["memory"]
    half = json.loads(invoke(*args, "--memory-fraction", "0.5").stdout)["memory"]
    assert full["fraction"] == 1 and half["fraction"] == 0.5
    assert full["usable_bytes"] == H800_BYTES - H800_RESERVE and full["reserve_bytes"] == H800_RESERVE
    assert half["usable_bytes"] == (H800_BYTES - H800_RESERVE) / 2
    assert half["max_batch"] == math.floor(((H800_BYTES - H800_RESERVE) / 2 - half["weights_bytes"])
                                           / (half["kv_bytes_per_sequence"] + half["activation_bytes_per_sequence"]))


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2", "nan"])
def test_memory_fraction_outside_unit_interval_is_refused(invoke, value):
    one_line_error(invoke("profile", EXAMPLES / "llama_gqa.py", "--memory-fraction", value), "--memory-fraction")


def test_sweep_marks_points_that_do_not_fit(tmp_path):
    """A device with 40 MB: weights of the tiny model plus a KV cache that grows with batch x
    context; each point's fit follows weights + KV + activations against 0.9 x 40 MB, points from
    the fit carry the same activation peak a capture measures, and the critical batch names the
    largest batch that fits."""
    entry = small_entry(40e6)
    entry = entry.replace('name = "H800 SXM5"', 'name = "Small"').replace("aliases = [", 'aliases = ["small", ')
    hw = tmp_path / "small.toml"
    hw.write_text(entry)
    options = dict(TINY_LLAMA, layers=2)
    source = load_source(str(EXAMPLES / "llama_gqa.py"), options)
    base = Workload("decode", 1, 64, options=tuple(sorted(options.items())))
    result = run_sweep(source, base, Deployment(str(hw)), [1, 4, 64], [64, 4096])
    points = result.to_dict()["points"]
    usable = (40e6 - 4e6) * FRACTION
    for p in points:
        m = p["memory"]
        kv = 2 * 2 * 2 * 32 * BF16 * p["context"]  # K and V, 2 layers, 2 K/V heads of 32
        assert m["kv_cache_bytes"] == kv * p["batch"]
        assert p["fits"] is (m["weights_bytes"] + kv * p["batch"] + m["activation_peak_bytes"] <= usable)
    assert {p["fits"] for p in points} == {True, False}
    # a fitted point's activation peak is the one a capture at that point measures
    fitted = next(p for p in points if p["batch"] == 64 and p["context"] == 4096)
    captured = run_profile(source, Workload("decode", 64, 4096, options=base.options), Deployment(str(hw)),
                       options=ReportOptions(measure=False))
    assert fitted["memory"]["activation_peak_bytes"] == captured.report.memory.activation_peak_bytes
    for c in result.to_dict()["critical_batch"]:
        at = next(p for p in points if p["context"] == c["context"])
        assert c["max_batch_fits"] == at["memory"]["max_batch"]
        assert f"{c['max_batch_fits']:,}" in c["summary"]
