"""transformers configs: real model code on meta, MoE under the expected-load model."""

from __future__ import annotations

import json

import pytest

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.errors import RooflineError
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, profile_dict

pytest.importorskip("transformers")
pytestmark = pytest.mark.hf

CONFIGS = EXAMPLES / "configs"
#: Shipped configs of encoders (prefill only).
ENCODERS = {"bert-base-uncased"}


def _cfg(name):
    return json.loads((CONFIGS / f"{name}.json").read_text())


def llama_params(c) -> int:
    """Parameter count of a Llama-family decoder from its config, by hand."""
    h, i, v, layers = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // heads
    attn = h * heads * d + 2 * h * kv * d + heads * d * h
    if c.get("attention_bias"):
        attn += heads * d + 2 * kv * d
    mlp = 3 * h * i
    per_layer = attn + mlp + 2 * h
    head = 0 if c.get("tie_word_embeddings") else v * h
    return v * h + layers * per_layer + h + head


def test_llama_8b_decode_weights_and_kv():
    c = _cfg("llama-3.1-8b")
    b, s = 1, 8192
    report = profile_dict(CONFIGS / "llama-3.1-8b.json", batch=b, context=s)
    params = llama_params(c)
    assert params == pytest.approx(8.03e9, rel=0.01)
    assert report["model"]["parameters"] == params
    assert report["model"]["param_bytes"] == pytest.approx(2 * params, rel=0.01)
    # per step the embedding gathers only the B rows it needs; every other weight is read once
    read = 2 * (params - c["vocab_size"] * c["hidden_size"] + b * c["hidden_size"])
    assert report["totals"]["weight_bytes"] == pytest.approx(read, rel=0.01)
    at = report["attention_totals"]
    assert at["layers"] == at["recognised"] == 32
    assert at["kv_bytes_min"] == 32 * 2 * 8 * 128 * 8192 * 2
    assert all(r["arch"] == "gqa" and r["num_kv_heads"] == 8 for r in report["attention"])


def _expert_records(report):
    return [o for o in report["ops"] if o["kind"] == "modelled" and o["name"] in
            ("moe.gate_up_proj", "moe.down_proj")]


@pytest.mark.parametrize("batch,expected", [(1, 2.0), (64, 8 * (1 - (6 / 8) ** 64))])
def test_mixtral_experts_touched(batch, expected):
    c = _cfg("mixtral-8x7b")
    h, i = c["hidden_size"], c["intermediate_size"]
    report = profile_dict(CONFIGS / "mixtral-8x7b.json", batch=batch, context=512, layers=1)
    per_expert = 3 * h * i * 2  # gate, up, down in bf16
    weights = sum(o["param_bytes"] for o in _expert_records(report))
    assert weights / per_expert == pytest.approx(expected, rel=1e-6)
    flops = sum(o["flops"] for o in _expert_records(report))
    assert flops == pytest.approx(batch * 2 * 2 * 3 * h * i, rel=1e-9)  # T*k applications
    assert any("uniform routing" in n for n in report["notes"])


def test_deepseek_v3_cache_and_moe_weights():
    c = _cfg("deepseek-v3")
    b, layers = 48, 5  # 3 dense layers, then 2 MoE layers
    report = profile_dict(CONFIGS / "deepseek-v3.json", batch=b, context=1024, layers=layers)
    rows = report["attention"]
    assert len(rows) == layers and all(r["arch"] == "mla" for r in rows)
    assert report["attention_totals"]["cache_bytes_per_token"] == layers * 1152
    # transformers' code expands the latent to per-head K/V every step: far above the minimum
    assert report["attention_totals"]["amplification"] > 50
    # ... through kv_b_proj over every position: 2*B*(S-1)*512*H*(nope+v) FLOPs per layer for the
    # cached ones, reported and kept out of the model FLOPs (the new token's expansion stays in)
    reexpand = 2 * b * (1024 - 1) * c["kv_lora_rank"] * c["num_attention_heads"] * (
        c["qk_nope_head_dim"] + c["v_head_dim"])
    assert all(r["kv_reexpand_flops"] == reexpand for r in rows)
    t = report["totals"]
    assert t["flops"] - t["flops_model"] == pytest.approx(layers * reexpand, rel=0.01)
    e, k = c["n_routed_experts"], c["num_experts_per_tok"]
    h, i = c["hidden_size"], c["moe_intermediate_size"]
    touched = e * (1 - (1 - k / e) ** b)
    per_layer = touched * 3 * h * i * 2
    moe = _expert_records(report)
    assert {o["module"].split(".")[2] for o in moe} == {"3", "4"}
    assert sum(o["param_bytes"] for o in moe) == pytest.approx(2 * per_layer, rel=1e-6)
    shared = [o for o in report["ops"] if ".shared_experts." in o["module"] and o["flops"]]
    assert sum(o["param_bytes"] for o in shared) == pytest.approx(2 * 3 * h * i * c["n_shared_experts"] * 2)


def test_full_deepseek_v3_minimum_cache_per_token():
    report = profile_dict(CONFIGS / "deepseek-v3.json", batch=2, context=256)
    assert report["model"]["parameters"] == pytest.approx(671e9, rel=0.01)
    at = report["attention_totals"]
    assert at["cache_bytes_per_token"] == 61 * 1152
    assert at["kv_bytes_executed"] > at["kv_bytes_min"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.json")))
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_every_shipped_config_profiles(name, phase):
    if name in ENCODERS and phase == "decode":  # an encoder has one step: every position at once
        with pytest.raises(RooflineError, match="an encoder has no decode step"):
            profile_dict(CONFIGS / f"{name}.json", phase=phase, batch=2, context=64, layers=2)
        return
    report = profile_dict(CONFIGS / f"{name}.json", phase=phase, batch=2, context=64, layers=2)
    assert report["totals"]["flops"] > 0
    assert report["attention"] and all(r["recognised"] for r in report["attention"])


def test_unsupported_architecture_is_named(invoke, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "not_a_real_arch", "hidden_size": 8}))
    result = invoke("profile", cfg)
    assert result.exit_code != 0
    assert "not_a_real_arch" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr) < 400, result.stderr  # not every supported type: how to list them


# -- bounded work: sizes from the config before building (rooflinekit/core/limits.py) -----------------


@pytest.mark.parametrize("name,rel", [("llama-3.1-8b", 1e-3), ("qwen2.5-7b", 0.01), ("mixtral-8x7b", 1e-3),
                                      ("deepseek-v3", 0.01), ("gpt-oss-20b", 0.01)])
def test_the_parameter_estimate_is_close_to_the_built_count(name, rel):
    import torch

    from rooflinekit_plugins.hf.config_file import estimate_parameters
    from rooflinekit_plugins.hf.loader import load_hf_config

    source = load_hf_config(str(CONFIGS / f"{name}.json"), {})
    estimate = estimate_parameters(source.config.get_text_config(decoder=True))
    with torch.device("meta"):
        built = sum(p.numel() for p in source.build_model().parameters())
    assert estimate == pytest.approx(built, rel=rel)  # norms and biases are left out


@pytest.mark.timing  # judges a wall time
def test_the_bounds_fail_fast_and_can_be_raised(invoke, tmp_path, monkeypatch):
    import time

    cfg = dict(_cfg("llama-3.1-8b"), num_hidden_layers=100_000)
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(cfg))
    start = time.perf_counter()
    result = invoke("profile", path)
    assert time.perf_counter() - start < 10
    assert result.exit_code != 0
    assert "num_hidden_layers is 100,000" in result.stderr and "limit: 2,048 layers" in result.stderr
    # the limits are the bound, not the model: 3 layers pass a limit of 3, 4 do not
    monkeypatch.setenv("ROOFLINEKIT_MAX_LAYERS", "3")
    assert invoke("profile", CONFIGS / "llama-3.1-8b.json", "-O", "layers=3", "-s", "16").exit_code == 0
    result = invoke("profile", CONFIGS / "llama-3.1-8b.json", "-O", "layers=4")
    assert result.exit_code != 0 and "option layers is 4" in result.stderr
    # parameters: Llama-3.1-8B at 2 layers is about 1.49e9 by the estimate
    monkeypatch.delenv("ROOFLINEKIT_MAX_LAYERS")
    monkeypatch.setenv("ROOFLINEKIT_MAX_PARAMETERS", "1e9")
    result = invoke("profile", CONFIGS / "llama-3.1-8b.json", "-O", "layers=2")
    assert result.exit_code != 0 and "about 1.49e+09 parameters" in result.stderr, result.stderr


# -- families with their own conventions ------------------------------------------------------------


def _write(tmp_path, config: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
                                **config}))
    return path


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_falcon_multi_query_caches_one_kv_head(tmp_path, phase):
    # Falcon-7B layout: multi_query without num_key_value_heads; H=4, d=64
    path = _write(tmp_path, {"model_type": "falcon", "hidden_size": 256, "num_attention_heads": 4,
                             "multi_query": True, "new_decoder_architecture": False, "bias": False})
    b, s, d = 2, 256, 64
    rows = profile_dict(path, phase=phase, batch=b, context=s)["attention"]
    assert len(rows) == 2
    for row in rows:
        assert (row["arch"], row["num_heads"], row["num_kv_heads"]) == ("mqa", 4, 1)
        assert row["kv_bytes_min"] == b * s * 2 * d * 2  # K and V of one head, bf16


def test_a_class_refusing_sdpa_is_built_eager_and_says_so(tmp_path):
    path = _write(tmp_path, {"model_type": "gemma2", "hidden_size": 256, "intermediate_size": 1024,
                             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                             "sliding_window": 4096})
    from transformers import Gemma2Config, Gemma2ForCausalLM

    try:  # only meaningful where this transformers refuses sdpa for Gemma2
        Gemma2ForCausalLM._from_config(Gemma2Config(num_hidden_layers=1, hidden_size=64, intermediate_size=64,
                                                    num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                                    vocab_size=10), attn_implementation="sdpa")
        refuses = False
    except ValueError:
        refuses = True
    report = profile_dict(path, batch=2, context=512)
    assert [r["num_kv_heads"] for r in report["attention"]] == [2, 2]
    assert any("eager" in n for n in report["notes"]) == refuses


def test_a_window_the_plugins_do_not_model_is_flagged(tmp_path):
    # transformers' cache keeps only the last `sliding_window` positions. Without the built-in
    # `sliding_window` plugin no window is modelled: the layer reads less than the full-context
    # minimum, and the report says so. With it, the minimum is the window's.
    path = _write(tmp_path, {"model_type": "mistral", "hidden_size": 256, "intermediate_size": 512,
                             "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                             "sliding_window": 256})
    s, window = 1024, 256
    workload = Workload("decode", 2, s, "bf16", "meta", ())
    host = PluginHost(disabled={"sliding_window"})
    report = run_profile(load_source(str(path), {}, host), workload, Deployment("H800"), host=host).report.to_dict()
    for row in report["attention"]:
        assert row["window"] is None
        assert row["read_amplification"] == pytest.approx(window / s, rel=0.01)
        assert any("fewer positions than the spec assumes" in n for n in row["notes"])
    for row in profile_dict(path, batch=2, context=s)["attention"]:
        assert row["window"] == window
        assert row["read_amplification"] == pytest.approx(1, rel=0.01)
        assert not any("fewer positions than the spec assumes" in n for n in row["notes"])
