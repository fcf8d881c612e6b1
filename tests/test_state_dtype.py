"""Recurrent and linear-attention states at the dtype and shape the code keeps them.

transformers' gated delta-net (Qwen3-Next), Mamba-2 and Jamba keep their recurrent state in float32
in a bf16 model and their convolution state kernel-wide (all `conv_kernel` last inputs) in bf16;
RWKV keeps its wkv state (numerator, denominator, maximum) in float32 and its token shift in bf16.
Each row's state per sequence is checked three ways: the closed form from the config, the report
(the loader declares the tensors a one-token run filled), and the tensors a real forward on cpu
allocates, read straight from transformers' cache without rooflinekit.
"""

from __future__ import annotations

import json

import pytest
import torch

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.specs import AttentionWorkload
from rooflinekit.core.state import (
    STATE_ATTR,
    StateCounts,
    kept_state,
    state_cost,
    state_spec,
    with_kept_state,
)
from rooflinekit.stages.model_source import load_source
from rooflinekit_plugins import linear_attention, ssm
from tests.conftest import profile_dict

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.hf

BF16, FP32 = 2, 4

#: Small configs of each family (two layers, every dimension small) for the real forwards on cpu.
TINY = {
    "qwen3_next": dict(hidden_size=64, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                       linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                       linear_value_head_dim=8, linear_conv_kernel_dim=4, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, intermediate_size=128, moe_intermediate_size=32,
                       shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2, vocab_size=256),
    "mamba2": dict(hidden_size=64, num_heads=8, head_dim=16, expand=2, n_groups=2, state_size=16,
                   conv_kernel=4, num_hidden_layers=2, vocab_size=256),
    "jamba": dict(hidden_size=64, num_hidden_layers=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                  mamba_dt_rank=8, num_experts=4, num_experts_per_tok=2, intermediate_size=128,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=256, attn_layer_period=2,
                  attn_layer_offset=1),  # a Mamba layer, then attention (an all-Mamba cache has no length)
    "rwkv": dict(hidden_size=64, attention_hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 vocab_size=256, context_length=128),
}


def tiny_config(model_type: str):
    return transformers.AutoConfig.for_model(model_type, **TINY[model_type])


def tiny_file(model_type: str, tmp_path) -> str:
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps({"model_type": model_type, **TINY[model_type]}))
    return str(path)


# -- closed forms from the config, as transformers' code keeps the state ------------------------------


def deltanet_bytes(c) -> int:
    """v-heads x d_k x d_v in fp32, plus the convolution state of q, k and v kernel-wide in bf16."""
    hv, hk = c.linear_num_value_heads, c.linear_num_key_heads
    dk, dv = c.linear_key_head_dim, c.linear_value_head_dim
    return hv * dk * dv * FP32 + (2 * hk * dk + hv * dv) * c.linear_conv_kernel_dim * BF16


def mamba2_bytes(c) -> int:
    """heads x head_dim x d_state in fp32, plus x, B and C kernel-wide in bf16."""
    inner = int(c.expand * c.hidden_size)
    return c.num_heads * (inner // c.num_heads) * c.state_size * FP32 + \
        (inner + 2 * c.n_groups * c.state_size) * c.conv_kernel * BF16


def jamba_bytes(c) -> int:
    """Mamba (v1): d_inner x d_state in fp32, plus d_inner kernel-wide in bf16."""
    inner = c.mamba_expand * c.hidden_size
    return inner * c.mamba_d_state * FP32 + inner * c.mamba_d_conv * BF16


def rwkv_bytes(c) -> int:
    """The time mixing's wkv state (numerator, denominator, maximum) in fp32, its token shift in bf16."""
    return 3 * c.attention_hidden_size * FP32 + c.hidden_size * BF16


CLOSED = {"qwen3_next": deltanet_bytes, "mamba2": mamba2_bytes, "jamba": jamba_bytes, "rwkv": rwkv_bytes}
ARCH = {"qwen3_next": "gated_deltanet", "mamba2": "mamba2", "jamba": "mamba", "rwkv": "rwkv"}


# -- what a real forward allocates, read from transformers' own cache ---------------------------------


def allocated_per_layer(model_type: str) -> tuple[list[int], list[str]]:
    """Bytes per sequence of each state layer's tensors after a real bf16 forward on cpu (batch 1),
    and the tensors' shapes and dtypes in words (printed for the record)."""
    config = tiny_config(model_type)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, 3, dtype=torch.long), use_cache=True)
    if model_type == "rwkv":  # state: [channel-mix shift, time-mix shift, num, den, max], layers last
        state = out.state
        words = [f"state[{i}] {tuple(t.shape)} {t.dtype}" for i, t in enumerate(state)]
        per_layer = [sum(t[:, :, layer].numel() * t.element_size() for t in state[1:])
                     for layer in range(config.num_hidden_layers)]
        return per_layer, words
    cache = out.past_key_values if getattr(out, "past_key_values", None) is not None else out.cache_params
    per_layer, words = [], []
    for idx, layer in enumerate(cache.layers):
        tensors = [t for states in (getattr(layer, "conv_states", {}), getattr(layer, "recurrent_states", {}))
                   for t in states.values() if isinstance(t, torch.Tensor)]
        if tensors:
            words += [f"layer {idx}: {tuple(t.shape)} {t.dtype}" for t in tensors]
            per_layer.append(sum(t.numel() * t.element_size() for t in tensors))
    return per_layer, words


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_state_per_sequence_is_what_the_code_keeps(model_type, tmp_path):
    config = tiny_config(model_type)
    report = profile_dict(tiny_file(model_type, tmp_path), batch=2, context=32, device="cpu")
    rows = [r for r in report["attention"] if r["arch"] == ARCH[model_type]]
    allocated, words = allocated_per_layer(model_type)
    print(model_type, *words, sep="\n  ")
    assert rows and len(allocated) == len(rows), (allocated, [r["arch"] for r in report["attention"]])
    closed = CLOSED[model_type](config)
    assert allocated == [closed] * len(rows)  # the closed form is what the code allocates
    for row in rows:
        assert row["cache_bytes_per_sequence"] == closed, row["module"]
        assert row["kv_bytes_min"] == 2 * 2 * closed  # decode: read once and written once, batch 2


@pytest.mark.slow
def test_qwen3_next_state_per_layer_and_sequence():
    """The default Qwen3-Next config: 32 v-heads x 128 x 128 in fp32 (2,097,152 B) and the q, k, v
    convolution state 8,192 x 4 in bf16 (65,536 B); the report said 1,097,728 B (all bf16, kernel - 1
    wide), half what the code keeps, and put the other half on the code reading the state twice."""
    c = transformers.AutoConfig.for_model("qwen3_next")
    report = profile_dict("hf:qwen3_next", batch=1, context=1024, layers=4)
    rows = [r for r in report["attention"] if r["arch"] == "gated_deltanet"]
    assert deltanet_bytes(c) == 2_162_688
    for row in rows:
        assert row["cache_bytes_per_sequence"] == 2_162_688
        assert row["kv_bytes_min"] == 2 * 2_162_688
        # read once, written once; from transformers 5.25 the conv state's update also adds 1 to the
        # layer's int64 token count in the cache (`increase_count`: 8 B read, 8 B written)
        counter = 16 if hasattr(transformers.cache_utils.LinearAttentionLayer, "increase_count") else 0
        assert row["kv_bytes_executed"] == row["kv_bytes_min"] + counter
        assert row["extra"]["state_itemsize"] == FP32 and row["extra"]["conv_itemsize"] == BF16
        assert any("recurrent 32x128x128 float32" in n for n in row["notes"])


def test_kv_dtype_sets_the_state_format_only_when_asked(tmp_path):
    config = tiny_config("qwen3_next")
    path = tiny_file("qwen3_next", tmp_path)
    hv, dk, dv = config.linear_num_value_heads, config.linear_key_head_dim, config.linear_value_head_dim
    conv = (2 * config.linear_num_key_heads * dk + hv * dv) * config.linear_conv_kernel_dim
    for kv, per_sequence in ((None, deltanet_bytes(config)), ("fp8", hv * dk * dv + conv),
                             ("bf16", (hv * dk * dv + conv) * BF16)):  # bf16 asked of a bf16 model: both at 2 B
        workload = Workload("decode", 1, 32, "bf16", "meta", ())
        report = run_profile(load_source(path, {}), workload, Deployment("H800", kv_dtype=kv)).report.to_dict()
        (row,) = [r for r in report["attention"] if r["arch"] == "gated_deltanet"]
        assert row["cache_bytes_per_sequence"] == per_sequence, kv


# -- the core: declared tensors and the cost -----------------------------------------------------------


class _Mamba2Mixer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.num_heads, self.head_dim, self.n_groups = 8, 16, 1
        self.ssm_state_size, self.conv_kernel_size, self.intermediate_size = 32, 4, 128


def test_a_declared_state_replaces_the_closed_form_elements_and_sizes():
    mixer = _Mamba2Mixer()
    plain = ssm.recognise(mixer)
    assert plain.extra["state_elements"] == 8 * 16 * 32 and "state_itemsize" not in plain.extra
    setattr(mixer, STATE_ATTR, (("conv", (192, 4), torch.bfloat16), ("recurrent", (8, 16, 32), torch.float32)))
    assert kept_state(mixer) == {"state_elements": 4096, "state_itemsize": 4.0, "conv_elements": 768,
                                 "conv_itemsize": 2.0}
    spec = ssm.recognise(mixer)
    assert spec.extra["state_elements"] == 4096 and spec.extra["conv_elements"] == 768
    aw = AttentionWorkload(batch=1, q_len=1, context=64, phase="decode", cache_itemsize=2, act_itemsize=2)
    assert state_cost(spec, aw).cache_bytes_per_sequence == 4096 * 4 + 768 * 2
    fp8 = AttentionWorkload(batch=1, q_len=1, context=64, phase="decode", cache_itemsize=1, act_itemsize=2)
    assert state_cost(spec, fp8).cache_bytes_per_sequence == 4096 + 768  # the format asked replaces both
    asked = AttentionWorkload(1, 1, 64, "decode", 2, 2, cache_format_given=True)  # bf16 asked: both at 2
    assert state_cost(spec, asked).cache_bytes_per_sequence == (4096 + 768) * 2
    assert any("recurrent 8x16x32 float32" in n for n in spec.notes)


def test_an_unreadable_declaration_is_ignored():
    mixer = _Mamba2Mixer()
    setattr(mixer, STATE_ATTR, (("bogus", (4,), torch.float32),))
    assert kept_state(mixer) is None
    spec = state_spec("x", 1, 1, 1, 1, StateCounts(state_elements=10, conv_elements=0, flops_per_token=1,
                                                   io_per_token=1))
    assert with_kept_state(spec, mixer) is spec
    assert linear_attention.recognise(torch.nn.Linear(2, 2)) is None
