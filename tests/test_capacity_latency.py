"""Collectives with a per-call latency, and capacity as the device reports it less a reserve.

The expectations are written out from the hardware entries' TOML and the configs, independently of
the code that prices them (issue 23's acceptance: Llama-3.1-70B decode at TP 8 pays at least two
all-reduces per layer at the interconnect's latency; Qwen2.5-14B at context 32768 on one H800 in the
serving view holds the batch docs/advise.md's closed form gives).
"""

from __future__ import annotations

import json
import math
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, ROOT

CONFIGS = EXAMPLES / "configs"
H800 = tomllib.loads((ROOT / "hardware_db/nvidia/h800_sxm5.toml").read_text())
BF16 = 2


@pytest.mark.hf
def test_llama_70b_tp8_decode_pays_two_latencies_per_layer(invoke):
    layers = 2
    result = invoke("profile", CONFIGS / "llama-3.1-70b.json", "-O", f"layers={layers}", "--phase", "decode",
                    "-b", 1, "-s", 1024, "--tp", 8, "-H", "H800", "-f", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    comm, totals = report["comm"], report["totals"]
    floor, library = H800["interconnect_latency"], H800["collective_latency"]
    # two all-reduces per layer (attention output, MLP output), each at least the link's latency
    assert totals["time_comm_s"] == comm["time_s"] >= 2 * layers * floor
    assert comm["expected_time_s"] >= 2 * layers * library
    assert comm["latency_s"] == floor and comm["expected_latency_s"] == library
    (reduces,) = [c for c in comm["collectives"] if c["collective"] == "all_reduce"]
    assert reduces["calls"] >= 2 * layers and reduces["group_size"] == 8
    # stated per call: the bound's latency and the expected one, and the algorithm the latter chose
    assert reduces["latency_s"] == floor and reduces["expected_latency_s"] == library
    assert reduces["algorithm"] == "one-shot"  # one token's hidden state: a small message
    wire = reduces["wire_bytes"]
    assert reduces["time_bound_s"] == pytest.approx(reduces["calls"] * floor + wire / (H800["interconnect_bandwidth"] / 2))
    assert reduces["expected_time_s"] == pytest.approx(
        reduces["calls"] * library + 7 * reduces["message_bytes"] / (H800["interconnect_bandwidth"] / 2))
    assert reduces["time_bound_s"] < reduces["expected_time_s"]
    assert "latency" in comm["assumption"]


def decoder_params(c: dict) -> int:
    """Parameters of a Qwen2 decoder (q/k/v biases, untied head)."""
    d, inter, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // heads
    attn = d * heads * hd + 2 * d * kv * hd + heads * hd * d + heads * hd + 2 * kv * hd
    head = 0 if c.get("tie_word_embeddings") else c["vocab_size"] * d
    return c["vocab_size"] * d + layers * (attn + 3 * d * inter + 2 * d) + d + head


@pytest.mark.hf
@pytest.mark.slow
def test_qwen_14b_serving_max_batch_is_the_paged_closed_form():
    c = json.loads((CONFIGS / "qwen2.5-14b.json").read_text())
    context, block, fraction = 32768, 16, 0.9
    deployment = Deployment("H800", kernels="serving")
    assert deployment.kv_block_size == block
    m = run_profile(load_source(str(CONFIGS / "qwen2.5-14b.json"), {}), Workload("decode", 1, context), deployment,
                options=ReportOptions(measure=False)).report.memory
    weights = decoder_params(c) * BF16
    activations = m.activation_peak_bytes
    assert m.weights_bytes == pytest.approx(weights, rel=1e-6) and 0 < activations < 1e8
    usable = (H800["memory_bytes"] - H800["memory_reserve_bytes"]) * fraction
    hd = c["hidden_size"] // c["num_attention_heads"]
    block_bytes = block * c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * hd * BF16
    blocks = math.floor((usable - weights - activations) / block_bytes)
    per_sequence = math.ceil(context / block)
    assert m.usable_bytes == pytest.approx(usable) and m.reserve_bytes == H800["memory_reserve_bytes"]
    assert m.kv_block_size == block and m.kv_blocks == blocks
    assert m.max_batch == blocks // per_sequence
