"""The serving view (`--kernels serving`, rooflinekit.transforms.serving): attention by each architecture's
serving kernel, the engine's fused kernels, memory without eager-only K/V. Expected numbers are
written from the model configs, not from the code."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from rooflinekit.analyses.profile import run_profile
from rooflinekit.cli.main import cli
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.report import Report
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "configs"
EXAMPLES = ROOT / "examples"


def _profiled(path: Path, workload: Workload, kernels: str, host=None, **deployment):
    host = host or get_host()
    source = load_source(str(path), dict(workload.options), host)
    return run_profile(source, workload, Deployment("H800", kernels=kernels, **deployment), host=host).report


@pytest.fixture(scope="module")
def qwen14b() -> dict:
    return json.loads((CONFIGS / "qwen2.5-14b.json").read_text())


@pytest.fixture(scope="module")
def qwen_serving() -> dict[int, Report]:
    return {q: _profiled(CONFIGS / "qwen2.5-14b.json", Workload("decode", 4, 32768, decode_q_len=q), "serving")
            for q in (1, 4)}


@pytest.mark.hf
def test_qwen_serving_reads_the_kv_cache_once_whatever_the_q_len(qwen14b, qwen_serving):
    c = qwen14b
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    expected = c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * head_dim * 32768 * 2 * 4
    for report in qwen_serving.values():
        assert report.deployment.kernels == "serving"
        assert report.attention_totals.kv_bytes_executed == pytest.approx(expected, rel=1e-9)
        assert report.totals.kv_bytes_executed == pytest.approx(expected, rel=1e-9)
        assert all(a.kv_copy_bytes == 0 and a.kv_reexpand_flops == 0 for a in report.attention)
    # every drafted token accepted: 4 tokens per step for one cache read
    assert qwen_serving[4].totals.tokens_per_s > qwen_serving[1].totals.tokens_per_s


@pytest.mark.hf
def test_qwen_serving_runs_the_engines_kernels_and_holds_no_repeated_kv(qwen14b, qwen_serving):
    report = qwen_serving[1]
    names = [op.name for op in report.ops]
    layers = qwen14b["num_hidden_layers"]
    assert names.count("serving.attention") == layers
    assert names.count("serving.silu_and_mul") == layers
    assert names.count("serving.rotary_embedding+reshape_and_cache") == layers
    assert "F.scaled_dot_product_attention" not in names
    assert not any(n == "aten.clone" and op.bytes > 1e8 for n, op in zip(names, report.ops, strict=True))
    # the repeated K/V (5x the cache per layer) is no activation of the engine's step
    cache_per_layer = 2 * qwen14b["num_key_value_heads"] * 128 * 32768 * 2 * 4
    assert report.memory.activation_peak_bytes < 0.1 * cache_per_layer
    # at q_len 4 transformers' SDPA path gets a mask and repeats each K/V head (repeat_kv)
    report = qwen_serving[4]
    views = report.views
    assert views is not None and views.serving_step_s == report.totals.predicted_step_s
    assert views.as_written_step_s > views.serving_step_s
    assert views.largest_gap is not None and "self_attn" in views.largest_gap.module


@pytest.mark.hf
def test_deepseek_v3_serving_attends_over_the_latent_once():
    c = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    batch, context = 2, 2048
    report = _profiled(CONFIGS / "deepseek-v3.json", Workload("decode", batch, context), "serving")
    latent = c["num_hidden_layers"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * context * batch * 2
    assert report.attention_totals.kv_bytes_executed == pytest.approx(latent, rel=1e-9)
    assert report.attention_totals.kv_reexpand_flops == 0
    # no kv_b_proj over the cached positions left: only the new tokens' rows
    kv_b = [op for op in report.ops if op.module.endswith("kv_b_proj")]
    assert not kv_b or all(op.flops < 1e9 for op in kv_b)
    assert sum(op.name == "serving.absorbed_projection" for op in report.ops) == c["num_hidden_layers"]
    assert "re-expands the MLA cache" in report.views.largest_gap.why


def test_as_written_reports_carry_the_serving_step_and_stay_as_they_were():
    workload = Workload("decode", 1, 256, options=(("layers", 2),))
    report = _profiled(EXAMPLES / "llama_gqa.py", workload, "as-written")
    assert report.deployment.kernels == "as-written"
    assert report.views is not None and report.views.as_written_step_s == report.totals.predicted_step_s
    assert not any(op.name.startswith("serving.") for op in report.ops)
    assert Report.from_dict(json.loads(report.to_json())).views == report.views


THIRD_PARTY = '''
from rooflinekit.plugin import AttentionCost, heads_cost, hookimpl, module_heads

ASKED = []


@hookimpl(tryfirst=True)
def rooflinekit_attention_spec(module, path, call):
    if type(module).__name__ != "GQAAttention" or not hasattr(module, "num_kv_heads"):
        return None
    layout = module_heads(module, call)
    return layout.spec("toy") if layout is not None else None


@hookimpl
def rooflinekit_attention_cost(spec, workload):
    return heads_cost(spec, workload) if spec.arch == "toy" else None


@hookimpl
def rooflinekit_serving_attention(spec, workload):
    if spec.arch != "toy":
        return None
    ASKED.append(spec.arch)
    cost = heads_cost(spec, workload)
    return AttentionCost(flops_model=12345.0, kv_bytes_min=cost.kv_bytes_min, bytes_min=cost.bytes_min,
                         cache_bytes_per_token=cost.cache_bytes_per_token)
'''


def _host_with(name: str, code: str) -> tuple[PluginHost, types.ModuleType]:
    module = types.ModuleType(name)
    exec(compile(code, name, "exec"), module.__dict__)
    sys.modules[name] = module
    host = PluginHost(load_entry_points=True)
    host.register(module, name, "tests", "0")
    assert not host.warnings, host.warnings
    return host, module


def test_a_third_party_architecture_brings_its_serving_kernel():
    host, plugin = _host_with("toy_serving_plugin", THIRD_PARTY)
    workload = Workload("decode", 1, 256, options=(("layers", 2),))
    report = _profiled(EXAMPLES / "llama_gqa.py", workload, "serving", host=host)
    assert {a.arch for a in report.attention} == {"toy"} and plugin.ASKED
    kernels = [op for op in report.ops if op.name == "serving.attention"]
    assert len(kernels) == 2 and all(op.flops == 12345.0 for op in kernels)


def test_a_layer_no_plugin_prices_stays_as_written():
    code = THIRD_PARTY.split("@hookimpl\ndef rooflinekit_serving_attention")[0]
    host, _ = _host_with("toy_unpriced_plugin", code)
    workload = Workload("decode", 1, 256, options=(("layers", 2),))
    report = _profiled(EXAMPLES / "llama_gqa.py", workload, "serving", host=host)
    assert not any(op.name == "serving.attention" for op in report.ops)
    assert any("no plugin prices a serving kernel" in n for n in report.notes)


def test_the_cli_takes_kernels_and_prints_both_views():
    result = CliRunner().invoke(cli, ["profile", str(EXAMPLES / "llama_gqa.py"), "-O", "layers=2", "-s", "256",
                                       "-H", "H800", "--kernels", "serving"])
    assert result.exit_code == 0, result.output
    assert "kernels: serving view" in result.output and "as written" in result.output
    bad = CliRunner().invoke(cli, ["profile", str(EXAMPLES / "llama_gqa.py"), "--kernels", "fast"])
    assert bad.exit_code != 0


def test_a_routers_top_k_runs_as_one_routing_kernel():
    """A router's top-k and the softmax over its picks run as one kernel, as engines' fused routing
    kernels do: it reads the T x E logits (bf16) once and writes the T x k weights (bf16) and indices
    (int64); the top-k values live only inside it. experts3d: hidden 256, 16 experts, top 2."""
    tokens, experts, k = 4, 16, 2
    report = _profiled(ROOT / "tests" / "models" / "experts3d.py", Workload("decode", tokens, 64), "serving")
    routing = [op for op in report.ops if op.name == "serving.moe_routing"]
    assert len(routing) == 1 and routing[0].module == "moe"
    assert not [op for op in report.ops if op.name in ("aten.topk", "aten._softmax")]
    assert routing[0].bytes_read == tokens * experts * 2
    assert routing[0].bytes_written == tokens * k * (2 + 8)


@pytest.mark.hf
def test_deepseek_v3s_grouped_top_k_runs_as_one_routing_kernel():
    """DeepSeek-V3's router (sigmoid scores, the correction bias, top-2 of each of 8 groups, the top 4
    groups masked in, top-8 of what is left, gather, normalisation): one routing kernel after its GEMM
    in each MoE layer, reading the fp32 logits and the bias once."""
    c = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    batch = 2
    report = _profiled(CONFIGS / "deepseek-v3.json", Workload("decode", batch, 1024), "serving")
    moe_layers = c["num_hidden_layers"] - c["first_k_dense_replace"]
    gate = [op for op in report.ops if op.module.endswith("mlp.gate")]
    assert len(gate) == 2 * moe_layers
    routing = [op for op in gate if op.name == "serving.moe_routing"]
    assert len(routing) == moe_layers
    experts = c["n_routed_experts"]
    assert all(op.bytes_read == (batch * experts + experts) * 4 for op in routing)


def test_a_top_k_that_feeds_no_experts_is_not_a_routing_kernel():
    """A top-k and gather over a cache (a sparse-attention indexer's selection) between projections,
    with no MoE after it: the serving view keeps them as they are."""
    report = _profiled(ROOT / "tests" / "models" / "topk_select.py", Workload("decode", 2, 256), "serving")
    names = [op.name for op in report.ops]
    assert "serving.moe_routing" not in names
    assert "aten.topk" in names and "aten.gather" in names
