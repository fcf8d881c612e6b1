"""A bad hook answer is checked where it enters, so the warning names the plugin that gave it, and
the report is the one it would be without that answer (issue: a negative state size was blamed on
the built-in that priced it; a shard with 1,000 times the heads and a 1e30 B/token cache were taken).
"""

from __future__ import annotations

import math
import types
from dataclasses import replace

import pytest

import rooflinekit.plugin as rp
from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.plugins import PluginHost
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, TINY_LLAMA


def _report(plugin=None, tp: int = 1):
    host = PluginHost(load_entry_points=True)
    if plugin is not None:
        host.register(plugin, "blame", "tests", "0")
    source = load_source(str(EXAMPLES / "llama_gqa.py"), TINY_LLAMA, host)
    workload = rp.Workload("decode", 2, 64, options=tuple(sorted(TINY_LLAMA.items())))
    report = run_profile(source, workload, rp.Deployment("H800", tp=tp), host=host).report
    return report, host.warnings


def _plugin(**hooks) -> types.ModuleType:
    module = types.ModuleType("blame_plugin")
    for name, fn in hooks.items():
        setattr(module, name, rp.hookimpl(fn))
    return module


def _state_spec(**sizes):
    counts = dict(state_elements=1024, conv_elements=64, flops_per_token=4096, io_per_token=64)
    counts.update(sizes)
    return rp.state_spec("blamed_state", 8, 2, 32, 32, rp.StateCounts(**counts))


def _only_blame(warnings: list[str], hook: str, *needles: str) -> None:
    mine = [w for w in warnings if w.startswith(f"plugin 'blame' answered {hook}")]
    assert len(mine) >= 1, warnings
    for needle in needles:
        assert all(needle in w for w in mine), mine
    others = [w for w in warnings if w.startswith("plugin '") and not w.startswith("plugin 'blame'")]
    assert not others, others  # no built-in is blamed for pricing it


@pytest.mark.parametrize("field,value,needle", [
    ("state_elements", -1, "extra['state_elements'] must be a finite number, not negative"),
    ("conv_elements", math.nan, "extra['conv_elements'] must be a finite number, not negative"),
    ("flops_per_token", "many", "extra['flops_per_token'] must be a finite number, not negative"),
    ("state_elements", 1e30, "past any device's memory"),
])
def test_a_bad_state_spec_is_the_plugin_that_gave_it(field, value, needle):
    plain, _ = _report()

    def rooflinekit_attention_spec(module, path, call):
        return _state_spec(**{field: value}) if path.endswith("self_attn") else None

    report, warnings = _report(_plugin(rooflinekit_attention_spec=rooflinekit_attention_spec))
    _only_blame(warnings, "rooflinekit_attention_spec", needle)
    assert [r.arch for r in report.attention] == [r.arch for r in plain.attention] == ["gqa"]
    assert report.totals.flops_model == plain.totals.flops_model


def test_a_shard_with_more_heads_than_the_layer_is_refused():
    plain, _ = _report(tp=2)

    def rooflinekit_attention_shard(spec, tp):
        whole = rp.split_heads(spec, tp)
        return replace(whole, spec=replace(whole.spec, num_heads=spec.num_heads * 1000,
                                           num_kv_heads=spec.num_kv_heads))

    report, warnings = _report(_plugin(rooflinekit_attention_shard=rooflinekit_attention_shard), tp=2)
    _only_blame(warnings, "rooflinekit_attention_shard",
                f"num_heads {TINY_LLAMA['heads'] * 1000}, more than the layer's {TINY_LLAMA['heads']}")
    # the built-in split stands: FLOPs and the KV minimum as without the plugin
    assert report.totals.flops_model == plain.totals.flops_model
    assert report.totals.kv_bytes_min == plain.totals.kv_bytes_min
    # and that split is the closed form: q.k and p.v, 2 FLOPs a multiply-add, heads / 2 per GPU,
    # over 64 positions for each of the 2 sequences
    h, d = TINY_LLAMA["heads"], TINY_LLAMA["head_dim"]
    (row,) = report.attention
    assert row.num_heads == h // 2
    assert row.flops_model == 2 * 2 * (h // 2) * d * 64 * 2


def test_a_cache_past_any_device_is_refused():
    plain, _ = _report()

    def rooflinekit_attention_cost(spec, workload):
        return rp.AttentionCost(flops_model=1.0, kv_bytes_min=1.0, bytes_min=1.0, cache_bytes_per_token=1e30)

    report, warnings = _report(_plugin(rooflinekit_attention_cost=rooflinekit_attention_cost))
    _only_blame(warnings, "rooflinekit_attention_cost", "cache_bytes_per_token of 1e+30 B is past any device")
    assert report.memory.kv_cache_bytes == plain.memory.kv_cache_bytes
    assert report.totals.kv_bytes_min == plain.totals.kv_bytes_min


def test_builtin_splits_decline_what_they_cannot_split():
    """MHA with 4 heads at TP 8: the built-in declines (no warning about 0 heads); the split is refused
    as a whole with one line."""
    spec = rp.AttentionSpec("mha", 4, 4, 64, 64)
    host = PluginHost(load_entry_points=True)
    answer, plugin = host.first(host.hook.rooflinekit_attention_shard, spec=spec, tp=8)
    assert answer is None and plugin is None and not host.warnings, host.warnings
    with pytest.raises(rp.UserError, match="--tp 8 does not divide the 4 attention heads"):
        rp.split_heads(spec, 8)
