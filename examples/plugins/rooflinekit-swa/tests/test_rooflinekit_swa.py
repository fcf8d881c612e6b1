"""Tests for rooflinekit-swa, written as a plugin author would: register the plugin modules on a
`PluginHost` (beside the built-ins it loads from entry points) and profile through rooflinekit's
public pipeline. They run from a source checkout (the plugin root is put on sys.path when the
distribution is not installed) and against an installed distribution alike.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

PLUGIN_ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("rooflinekit_swa") is None:  # a source checkout, not installed
    sys.path.insert(0, str(PLUGIN_ROOT))

from rooflinekit.analyses.profile import run_profile  # noqa: E402
from rooflinekit.core.errors import UserError  # noqa: E402
from rooflinekit.core.plugins import PluginHost  # noqa: E402
from rooflinekit.core.request import Deployment, Workload  # noqa: E402
from rooflinekit.core.specs import AttentionSpec  # noqa: E402
from rooflinekit.stages.hardware import hardware_db  # noqa: E402
from rooflinekit.stages.model_source import load_source  # noqa: E402

import rooflinekit_swa  # noqa: E402
from rooflinekit_swa import attention, card, grouped_mm, hardware  # noqa: E402
from rooflinekit_swa.attention import ENV, what_if_window  # noqa: E402
from rooflinekit_swa.grouped_mm import grouped_mm_flops  # noqa: E402

EXAMPLES = PLUGIN_ROOT / "examples"
PLUGINS = {"swa_attention": attention, "swa_grouped_mm": grouped_mm, "swa_hardware": hardware, "swa_card": card}
TINY = {"layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512,
        "vocab": 1000, "sliding_window": 64}
HAS_GROUPED_MM = hasattr(torch, "_grouped_mm")  # torch >= 2.8


def make_host(with_plugin: bool = True) -> PluginHost:
    """The built-ins, plus this distribution's plugins (registered by hand unless installed)."""
    host = PluginHost()
    for name, module in PLUGINS.items():
        installed = host.pm.has_plugin(name)
        if with_plugin and not installed:
            host.register(module, name, "rooflinekit-swa", rooflinekit_swa.__version__)
        elif not with_plugin and installed:
            host.pm.unregister(name=name)
    return host


def run(path, phase, batch, context, options, host, hardware_name="H800"):
    workload = Workload(phase, batch, context, "bf16", "meta", tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options, host), workload, Deployment(hardware_name),
                   host=host).report.to_dict()


# -- the override ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_what_if(monkeypatch):
    """Each test starts without the what-if window; the ones that want it set it."""
    monkeypatch.delenv(ENV, raising=False)


def _attn(**attrs):
    module = torch.nn.Module()
    module.num_heads, module.num_key_value_heads, module.head_dim = 32, 8, 128
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def _ask(host, module):
    spec = AttentionSpec(arch="gqa", num_heads=32, num_kv_heads=8, head_dim=128, v_head_dim=128)
    return host.first(host.hook.rooflinekit_attention_window, module=module, path="model.layers.0.self_attn",
                      call=None, spec=spec)


@pytest.mark.parametrize(("value", "expected"), [("1024", 1024), ("0", 0), ("full", 0), ("", None), (None, None)])
def test_what_if_window_from_the_environment(monkeypatch, value, expected):
    if value is not None:
        monkeypatch.setenv(ENV, value)
    assert what_if_window() == expected


def test_override_answers_before_the_builtin(monkeypatch):
    host = make_host()
    module = _attn(sliding_window=4096)
    # unset: the built-in `sliding_window` plugin reads the module's own window
    answer, plugin = _ask(host, module)
    assert plugin == "sliding_window" and answer.window == 4096
    # a what-if window: this plugin answers first (tryfirst), over the declared one
    monkeypatch.setenv(ENV, "1024")
    answer, plugin = _ask(host, module)
    assert plugin == "swa_attention" and answer.window == 1024
    # full attention: 0 stops the asking, the built-in never answers
    monkeypatch.setenv(ENV, "full")
    assert _ask(host, module) == (0, "swa_attention")
    monkeypatch.setenv(ENV, "a lot")
    with pytest.raises(UserError, match=ENV):
        _ask(host, module)


# -- capped cache bytes through the pipeline ------------------------------------------------------


def _cache_bytes_per_token(o, itemsize=2):
    return o["kv_heads"] * 2 * o["head_dim"] * itemsize  # K and V, bf16


@pytest.mark.parametrize("context", [40, 200])
def test_decode_kv_bytes_capped_at_window(context):
    batch, window = 3, TINY["sliding_window"]
    report = run(EXAMPLES / "mistral_swa.py", "decode", batch, context, TINY, make_host())
    (row,) = report["attention"]
    assert row["arch"] == "gqa" and row["window"] == window  # the built-in reads the model's window
    per_token = _cache_bytes_per_token(TINY)
    assert row["cache_bytes_per_token"] == per_token
    assert row["kv_bytes_min"] == batch * min(context, window) * per_token
    # the rolling cache holds min(context, window) slots, so the executed read is capped too
    assert row["kv_read_bytes"] == batch * min(context, window) * per_token
    # model FLOPs: 4 * B * H * min(context, window) * d
    assert row["flops_model"] == 4 * batch * TINY["heads"] * min(context, window) * TINY["head_dim"]


def test_what_if_window_through_the_pipeline(monkeypatch):
    batch, context, what_if = 2, 200, 16
    monkeypatch.setenv(ENV, str(what_if))
    report = run(EXAMPLES / "mistral_swa.py", "decode", batch, context, TINY, make_host())
    (row,) = report["attention"]
    per_token = _cache_bytes_per_token(TINY)
    assert row["window"] == what_if and row["kv_bytes_min"] == batch * what_if * per_token
    assert any(ENV in n for n in row["notes"])
    # the model still runs its own 64-slot rolling cache: it reads 64 / 16 times the what-if minimum
    assert row["kv_read_bytes"] == batch * TINY["sliding_window"] * per_token


def test_full_attention_override_ignores_the_declared_window(monkeypatch):
    batch, context = 2, 200
    monkeypatch.setenv(ENV, "0")
    report = run(EXAMPLES / "mistral_swa.py", "decode", batch, context, TINY, make_host())
    (row,) = report["attention"]
    assert row["window"] is None
    assert row["kv_bytes_min"] == batch * context * _cache_bytes_per_token(TINY)
    # the model's rolling cache really moved less than that "minimum": amplification below 1
    assert row["amplification"] < 1


def test_without_the_plugin_the_builtin_still_caps(monkeypatch):
    monkeypatch.setenv(ENV, "16")  # ignored: the plugin is not registered
    batch, context = 2, 200
    report = run(EXAMPLES / "mistral_swa.py", "decode", batch, context, TINY, make_host(with_plugin=False))
    (row,) = report["attention"]
    assert row["window"] == TINY["sliding_window"]
    assert row["kv_bytes_min"] == batch * TINY["sliding_window"] * _cache_bytes_per_token(TINY)


def test_prefill_model_flops_count_the_band_and_every_key_is_read():
    batch, context, window = 1, 150, TINY["sliding_window"]
    report = run(EXAMPLES / "mistral_swa.py", "prefill", batch, context, TINY, make_host())
    (row,) = report["attention"]
    pairs = sum(min(window, i + 1) for i in range(context))
    assert row["flops_model"] == 2 * batch * TINY["heads"] * pairs * 2 * TINY["head_dim"]
    # a masked fused call computes every pair: executed FLOPs are the full square
    assert row["flops_executed"] == 2 * batch * TINY["heads"] * context * context * 2 * TINY["head_dim"]
    # each new token's K/V is needed by some query: all `context` positions are read once
    assert row["kv_bytes_min"] == batch * context * _cache_bytes_per_token(TINY)


# -- grouped mm -----------------------------------------------------------------------------------


def _loop_flops(sizes, k, n):
    return sum(2 * m * k * n for m in sizes)


@pytest.mark.skipif(not HAS_GROUPED_MM, reason="torch._grouped_mm needs torch >= 2.8")
def test_grouped_mm_formula_matches_a_loop_over_groups():
    sizes, k, n = [3, 0, 5, 2], 16, 8
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    a = torch.randn(12, k, dtype=torch.bfloat16)  # 12 rows, groups cover 10: the last 2 are ignored
    b = torch.randn(len(sizes), k, n, dtype=torch.bfloat16)
    assert torch._grouped_mm(a, b, offs=offs).shape == (12, n)
    assert grouped_mm_flops(a, b, offs) == _loop_flops(sizes, k, n)
    # on meta the offsets hold no values: the groups are assumed to cover every row
    assert grouped_mm_flops(a.to("meta"), b.to("meta"), offs.to("meta")) == _loop_flops([12], k, n)
    # 3D x 3D: a batched matmul, no offsets
    a3 = torch.randn(4, 5, k, dtype=torch.bfloat16)
    assert grouped_mm_flops(a3, b) == 4 * 2 * 5 * k * n


def test_grouped_mm_formula_other_layouts():
    meta = dict(device="meta", dtype=torch.bfloat16)
    offs = torch.empty(4, dtype=torch.int32, device="meta")
    # 2D x 2D (weight gradients): K is split, output [G, M, N]
    assert grouped_mm_flops(torch.empty(6, 32, **meta), torch.empty(32, 8, **meta), offs) == 2 * 6 * 32 * 8
    # 3D x 2D: N is split, output [M, N]
    assert grouped_mm_flops(torch.empty(4, 6, 16, **meta), torch.empty(16, 24, **meta), offs) == 2 * 6 * 16 * 24


@pytest.mark.skipif(not HAS_GROUPED_MM, reason="torch._grouped_mm needs torch >= 2.8")
def test_moe_model_grouped_mm_flops_are_counted():
    options = dict(TINY, experts=4, top_k=2)
    batch = 3
    rows = batch * options["top_k"]  # token-expert pairs
    h, inter = options["hidden"], options["intermediate"]
    expert_flops = 2 * rows * h * 2 * inter + 2 * rows * inter * h

    def grouped_mm_run(with_plugin):
        host = make_host(with_plugin)
        if host.pm.has_plugin("moe"):  # the built-in would model the experts instead of running them
            host.pm.unregister(name="moe")
        report = run(EXAMPLES / "mistral_swa.py", "decode", batch, 100, options, host)
        return report, [op for op in report["ops"] if op["name"] == "aten._grouped_mm"]

    report, grouped = grouped_mm_run(with_plugin=True)
    assert len(grouped) == 2 and all(op["counted"] for op in grouped)
    assert sum(op["flops"] for op in grouped) == expert_flops
    assert "aten._grouped_mm" not in {u["name"] for u in report["uncounted_ops"]}
    # without the plugin the op has no formula: listed as uncounted, never a silent zero
    bare, grouped = grouped_mm_run(with_plugin=False)
    assert len(grouped) == 2 and not any(op["counted"] for op in grouped)
    assert "aten._grouped_mm" in {u["name"] for u in bare["uncounted_ops"]}


@pytest.mark.skipif(not HAS_GROUPED_MM, reason="the model's experts need torch._grouped_mm (torch >= 2.8)")
def test_builtin_moe_model_takes_the_experts_when_present():
    """With rooflinekit's built-in `moe` plugin (the default), the experts are modelled, not run."""
    host = make_host()
    if not host.pm.has_plugin("moe"):
        pytest.skip("this rooflinekit has no built-in moe plugin")
    options = dict(TINY, experts=4, top_k=2)
    batch = 3
    report = run(EXAMPLES / "mistral_swa.py", "decode", batch, 100, options, host)
    assert not [op for op in report["ops"] if op["name"] == "aten._grouped_mm"]
    modelled = [op for op in report["ops"] if op["kind"] == "modelled"]
    # T*k token-expert rows (decode: T = batch), each through [h -> 2*inter] (gate and up) and [inter -> h]:
    #   2*rows*h*(2*inter) + 2*rows*inter*h
    rows, h, inter = batch * options["top_k"], options["hidden"], options["intermediate"]
    assert sum(op["flops"] for op in modelled) == 2 * rows * h * 2 * inter + 2 * rows * inter * h


# -- hardware and model cards ---------------------------------------------------------------------


def test_hardware_entries_load_with_sources():
    db = hardware_db(make_host())
    assert not [p for p in db.problems if "rooflinekit_swa" in p]
    nvl = db.get("NVIDIA H100 NVL")
    assert nvl.name == "H100 NVL" and nvl.memory_bandwidth == 3.9e12
    assert round(nvl.ridge("bf16"), 1) == round(835.5e12 / 3.9e12, 1)
    assert db.get("NVIDIA GH200 480GB").name == "GH200 96GB"


def test_model_card_builds_the_model_it_describes(tmp_path):
    host = make_host()
    report = run(EXAMPLES / "mistral-7b-v0.1.swa.toml", "decode", 1, 8192, {"layers": 2}, host)
    assert report["model"]["kind"] == "swa model card" and report["model"]["name"] == "Mistral-7B-v0.1"
    assert len(report["attention"]) == 2  # -O layers=2 overrides the card's 32
    row = report["attention"][0]
    assert row["window"] == 4096 and row["kv_bytes_min"] == 4096 * 8 * 2 * 128 * 2
    bad = tmp_path / "bad.swa.toml"
    bad.write_text("layers = 2\nwindow = 10\n")
    with pytest.raises(UserError, match="unknown key window"):
        load_source(str(bad), {}, host)
