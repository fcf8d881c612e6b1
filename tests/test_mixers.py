"""Recurrent, SSM, linear-attention and short-convolution layers: recognised by their plugins,
reported in the attention list with a fixed state per sequence as their cache (closed forms from
the transformers configs), and loaded with a cache of the right kind for each layer."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.report import Report
from rooflinekit.core.specs import AttentionWorkload
from rooflinekit.core.state import StateCounts, split_state, state_cost, state_spec
from rooflinekit.outputs.render import to_text
from rooflinekit_plugins import gqa, linear_attention, mha, ssm
from tests.conftest import profile_dict

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.hf

BF16 = 2
FP32 = 4


def default_config(model_type: str, **overrides):
    return transformers.AutoConfig.for_model(model_type, **overrides)


def write_config(tmp_path, model_type: str, **fields) -> str:
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps({"model_type": model_type, **fields}))
    return str(path)


def rows_of(report: dict, arch: str) -> list[dict]:
    return [r for r in report["attention"] if r["arch"] == arch]


# -- closed forms, from the config -----------------------------------------------------------------


# As transformers' code keeps them (tests/test_state_dtype.py checks the tensors a forward makes):
# the recurrent state in float32 in a bf16 model, the convolution state kernel-wide in bf16.


def deltanet_state_bytes(c) -> int:
    """Qwen3-Next's gated delta-net: v-heads x d_k x d_v in fp32, plus kernel x (2 key dims + value dims)."""
    hv, hk = c.linear_num_value_heads, c.linear_num_key_heads
    dk, dv = c.linear_key_head_dim, c.linear_value_head_dim
    conv = 2 * hk * dk + hv * dv
    return hv * dk * dv * FP32 + c.linear_conv_kernel_dim * conv * BF16


def mamba_state_bytes(c) -> int:
    """Mamba: d_inner x d_state in fp32, plus d_conv x d_inner."""
    return c.intermediate_size * c.state_size * FP32 + c.conv_kernel * c.intermediate_size * BF16


def mamba2_state_bytes(c) -> int:
    """Mamba-2: heads x (d_inner / heads) x d_state in fp32, plus d_conv x (d_inner + 2 groups d_state)."""
    inner = int(c.expand * c.hidden_size)
    conv = inner + 2 * c.n_groups * c.state_size
    return c.num_heads * (inner // c.num_heads) * c.state_size * FP32 + c.conv_kernel * conv * BF16


# -- must show: Qwen3-Next, Mamba, Mamba-2 ---------------------------------------------------------


@pytest.mark.slow
def test_qwen3_next_linear_layers_keep_a_fixed_state_whatever_the_context():
    c = default_config("qwen3_next")
    b = 2
    reports = {s: profile_dict("hf:qwen3_next", batch=b, context=s, layers=4) for s in (1024, 8192)}
    per_sequence = deltanet_state_bytes(c)
    assert per_sequence == 2_162_688  # 32 x 128 x 128 elements in fp32 + 4 x 8192 in bf16
    for s, report in reports.items():
        linear = rows_of(report, "gated_deltanet")
        kinds = [r["arch"] for r in report["attention"]]
        assert kinds == ["gated_deltanet"] * 3 + ["gqa"], kinds  # layer_types: 3 linear, then full attention
        for row in linear:
            assert row["cache_bytes_per_sequence"] == per_sequence
            assert row["cache_bytes_per_token"] == 0
            assert row["kv_bytes_min"] == b * 2 * per_sequence  # read once and written once per step
            assert row["kv_bytes_executed"] > 0
        (attention,) = rows_of(report, "gqa")
        assert attention["kv_bytes_min"] == b * s * 2 * c.num_key_value_heads * c.head_dim * BF16
        assert report["attention_totals"]["cache_bytes_per_sequence"] == 3 * per_sequence
    small, large = (rows_of(reports[s], "gated_deltanet") for s in (1024, 8192))
    assert [r["cache_bytes_per_sequence"] for r in small] == [r["cache_bytes_per_sequence"] for r in large]
    assert [r["kv_bytes_min"] for r in small] == [r["kv_bytes_min"] for r in large]


@pytest.mark.parametrize("phase,passes", [("decode", 2), ("prefill", 1)])
def test_mamba_state_is_its_cache(phase, passes):
    c = default_config("mamba")
    b, s = 2, 1024 if phase == "decode" else 16
    report = profile_dict("hf:mamba", phase=phase, batch=b, context=s, layers=2)
    rows = report["attention"]
    assert [r["arch"] for r in rows] == ["mamba", "mamba"]
    per_sequence = mamba_state_bytes(c)
    d, n = c.intermediate_size, c.state_size
    tokens = b * (1 if phase == "decode" else s)
    for row in rows:
        assert row["cache_bytes_per_sequence"] == per_sequence
        # decode reads the state it starts from and writes the one it ends with; prefill writes it
        assert row["kv_bytes_min"] == passes * b * per_sequence
        assert row["flops_model"] == tokens * (7 * d * n + 3 * d)
        assert row["extra"]["d_state"] == n and row["extra"]["d_conv"] == c.conv_kernel
    assert report["totals"]["kv_bytes_min"] == 2 * passes * b * per_sequence


def test_mamba2_state_is_its_cache():
    c = default_config("mamba2")
    b = 2
    report = profile_dict("hf:mamba2", batch=b, context=1024, layers=2)
    inner = int(c.expand * c.hidden_size)
    for row in report["attention"]:
        assert (row["arch"], row["num_heads"], row["num_kv_heads"]) == ("mamba2", c.num_heads, c.n_groups)
        assert (row["head_dim"], row["v_head_dim"]) == (c.state_size, inner // c.num_heads)
        assert row["cache_bytes_per_sequence"] == mamba2_state_bytes(c)
        assert row["kv_bytes_min"] == 2 * b * mamba2_state_bytes(c)


def test_a_mamba_decode_reads_and_writes_its_state_at_least_once():
    """What transformers' code moved is at least the minimum: amplification at least 1, from both
    reads and writes of its fp32 SSM state."""
    c = default_config("mamba")
    b = 2
    report = profile_dict("hf:mamba", batch=b, context=4096, layers=1)
    (row,) = report["attention"]
    state = c.intermediate_size * c.state_size * FP32
    assert row["kv_read_bytes"] >= b * state and row["kv_copy_bytes"] >= b * state
    assert row["amplification"] >= 1


# -- every family, on transformers' own code -------------------------------------------------------


def test_rwkv_time_mixing_state(tmp_path):
    c = default_config("rwkv")
    report = profile_dict("hf:rwkv", batch=2, context=1024, layers=2)
    rows = report["attention"]
    assert [r["module_class"] for r in rows] == ["RwkvSelfAttention"] * 2
    a, h = c.attention_hidden_size, c.hidden_size
    # numerator, denominator and maximum per channel in float32; the time-mix token shift in bf16
    assert all(r["arch"] == "rwkv" and r["cache_bytes_per_sequence"] == 3 * a * 4 + h * BF16 for r in rows)


def test_xlstm_matrix_memory(tmp_path):
    c = default_config("xlstm")
    path = write_config(tmp_path, "xlstm", num_hidden_layers=2, num_blocks=2)  # xLSTM counts blocks
    report = profile_dict(path, batch=2, context=1024)
    rows = report["attention"]
    assert [r["module_class"] for r in rows] == ["xLSTMBackend"] * 2  # the recurrence, once per layer
    per_sequence = c.num_heads * (c.qk_head_dim * c.v_head_dim + c.qk_head_dim + 1) * BF16
    assert all(r["arch"] == "xlstm" and r["cache_bytes_per_sequence"] == per_sequence for r in rows)


def test_lfm2_short_convolution_and_attention(tmp_path):
    c = default_config("lfm2")
    path = write_config(tmp_path, "lfm2", num_hidden_layers=2, layer_types=["conv", "full_attention"])
    report = profile_dict(path, batch=2, context=1024)
    conv, attention = report["attention"]
    assert (conv["arch"], attention["arch"]) == ("short_conv", "gqa")
    assert conv["cache_bytes_per_sequence"] == c.conv_L_cache * c.hidden_size * BF16  # kept kernel-wide
    assert attention["cache_bytes_per_sequence"] == 0 and attention["cache_bytes_per_token"] > 0


def test_minimax_lightning_layers(tmp_path):
    c = default_config("minimax")
    report = profile_dict("hf:minimax", batch=2, context=1024, layers=2)
    (lightning,) = rows_of(report, "lightning")
    d = c.hidden_size // c.num_attention_heads
    assert lightning["cache_bytes_per_sequence"] == c.num_attention_heads * d * d * BF16


def test_falcon_h1_hybrid_layers_each_get_their_kind():
    report = profile_dict("hf:falcon_h1", batch=2, context=1024, layers=2)
    assert [r["arch"] for r in report["attention"]] == ["mamba2", "gqa"] * 2


def test_a_pure_recurrent_hybrid_cut_loads(tmp_path):
    """Bamba's default config cut to 2 layers keeps only Mamba layers: transformers' mask code asks
    the cache for a length only attention layers track; the loader answers it."""
    report = profile_dict("hf:bamba", batch=2, context=1024, layers=2)
    assert [r["arch"] for r in report["attention"]] == ["mamba2", "mamba2"]
    assert any("no attention layer in this model's cache" in n for n in report["notes"])


# -- the core and the plugins ----------------------------------------------------------------------


def test_state_cost_closed_form():
    spec = state_spec("x", 4, 2, 8, 16, StateCounts(state_elements=4 * 8 * 16, conv_elements=3 * 100,
                                                    flops_per_token=1000, io_per_token=50))
    decode = state_cost(spec, AttentionWorkload(batch=3, q_len=1, context=4096, phase="decode",
                                                cache_itemsize=2, act_itemsize=2))
    per_sequence = (512 + 300) * 2
    assert decode.cache_bytes_per_sequence == per_sequence and decode.cache_bytes_per_token == 0
    assert decode.kv_bytes_min == 3 * 2 * per_sequence
    assert decode.bytes_min == decode.kv_bytes_min + 3 * 50 * 2
    assert decode.flops_model == 3 * 1000
    prefill = state_cost(spec, AttentionWorkload(batch=3, q_len=64, context=64, phase="prefill",
                                                 cache_itemsize=2, act_itemsize=2))
    assert prefill.kv_bytes_min == 3 * per_sequence and prefill.flops_model == 3 * 64 * 1000
    fp32 = state_cost(spec.__class__(**{**spec.__dict__, "extra": {**spec.extra, "state_itemsize": 4}}),
                      AttentionWorkload(1, 1, 10, "decode", 2, 2))
    assert fp32.cache_bytes_per_sequence == 512 * 4 + 300 * 2


def test_state_spec_takes_the_counts_as_keywords_until_0_4():
    """The form before 0.3 (the counts as keywords of state_spec) gives the same spec, and warns."""
    counts = StateCounts(state_elements=512, conv_elements=300, flops_per_token=1000, io_per_token=50,
                         state_itemsize=4)
    new = state_spec("x", 4, 2, 8, 16, counts, d_conv=4, notes=("n",))
    with pytest.warns(DeprecationWarning, match=r"state_spec\(\.\.\., StateCounts\(\.\.\.\)\)"):
        old = state_spec("x", 4, 2, 8, 16, state_elements=512, conv_elements=300, flops_per_token=1000,
                         io_per_token=50, state_itemsize=4, d_conv=4, notes=("n",))
    assert old == new and list(old.extra) == list(new.extra)
    with pytest.raises(TypeError, match="counts"):
        state_spec("x", 4, 2, 8, 16, state_elements=512)


def test_split_state_halves_the_state_with_the_heads():
    spec = state_spec("x", 8, 2, 16, 16, StateCounts(state_elements=8 * 256, conv_elements=300,
                                                     flops_per_token=800, io_per_token=40))
    shard = split_state(spec, 2)
    assert (shard.spec.num_heads, shard.spec.num_kv_heads) == (4, 1)
    assert shard.spec.extra["state_elements"] == 4 * 256 and shard.spec.extra["conv_elements"] == 150
    with pytest.raises(Exception, match="does not divide"):
        split_state(spec, 3)


class _Mixer2(torch.nn.Module):
    """A Mamba-2 mixer that also declares heads and a head size: not plain attention."""

    def __init__(self):
        super().__init__()
        self.num_heads, self.head_dim, self.n_groups = 8, 16, 1
        self.ssm_state_size, self.conv_kernel_size, self.intermediate_size = 32, 4, 128


@pytest.mark.parametrize("order", [("mha", "gqa", "ssm"), ("ssm", "gqa", "mha")])
def test_mixers_go_before_the_head_plugins(order):
    modules = {"mha": mha, "gqa": gqa, "ssm": ssm}
    host = PluginHost(load_entry_points=False)
    for name in order:
        host.register(modules[name], name, "tests", "0")
    spec, plugin = host.first(host.hook.rooflinekit_attention_spec, module=_Mixer2(),
                                   path="x", call=None)
    assert (spec.arch, plugin, spec.fixed_state) == ("mamba2", "ssm", True)
    assert spec.extra["state_elements"] == 8 * 16 * 32


def test_mixer_sites_are_named_by_class_and_attributes():
    model = torch.nn.Module()
    model.mixer = _Mixer2()
    model.other = torch.nn.Linear(2, 2)
    assert ssm.rooflinekit_mixer_sites(model) == ["mixer"]
    assert linear_attention.rooflinekit_mixer_sites(model) == []


def test_the_table_says_mixers_and_per_sequence():
    report = Report.from_dict(profile_dict("hf:mamba", batch=1, context=256, layers=1))
    text = to_text(report)
    assert "mixer (per layer)" in text and "/seq" in text and "Mixers:" in text
    per_sequence = report.attention[0].cache_bytes_per_sequence
    assert math.isclose(report.attention_totals.cache_bytes_per_sequence, per_sequence)


@pytest.mark.parametrize("model_type", ["mamba2", "jamba", "falcon_h1", "bamba", "granitemoehybrid"])
def test_state_mixers_are_recognised_on_the_installed_transformers(model_type):
    """From transformers 5.25 the mixers' scan and convolution run inside `kernels`' Func modules that
    no model holds: still one recognised state layer per mixer, named as the model names it, reading
    and writing its whole state once (2 x B x the state per sequence), and no unrecognised layer."""
    b = 2
    report = profile_dict(f"hf:{model_type}", batch=b, context=256, layers=2)
    assert not [w for w in report["warnings"] if "not recognised" in w or "no layer of its own" in w]
    states = [r for r in report["attention"] if r["arch"] in ("mamba", "mamba2")]
    assert states and all(r["recognised"] for r in report["attention"])
    for row in states:
        assert "Func" not in row["module"]
        assert row["kv_bytes_min"] == 2 * b * row["cache_bytes_per_sequence"]
