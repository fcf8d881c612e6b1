"""transformers model types by name (`hf:TYPE`), `-O layers=N` on configs with per-layer fields, and
the coverage table benchmarks/hf_coverage.py writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import one_line_error, profile_dict

pytest.importorskip("transformers")
pytestmark = pytest.mark.hf

ROOT = Path(__file__).resolve().parents[1]


# -- cutting a config to N layers (rooflinekit_plugins.hf.layers) ----------------------------------


def test_every_per_layer_field_is_cut_and_nothing_else():
    from rooflinekit_plugins.hf.layers import cut_layers

    kinds = ["sliding_attention", "full_attention", "linear_attention", "sliding_attention", "full_attention",
             "linear_attention"]
    config = {
        "num_hidden_layers": 6,
        "layer_types": kinds,
        "intermediate_size": [10, 11, 12, 13, 14, 15],  # per layer
        "mlp_only_layers": [1, 4],  # layer indices
        "per_layer_config": {"0": {"a": 1}, "3": {"a": 2}},  # keyed by layer index
        "attention_types": [[["global", "local"], 3]],  # run-length (GPT-Neo)
        "eos_token_id": [1, 2, 3, 4, 5, 6],  # tokens, not layers
        "id2label": {"0": "x", "1": "y", "2": "z"},  # not layers
        "block_pattern": ["a", "b", "c"],  # a cycle shorter than the layers: left as is
        "text_config": {"num_layers": 4, "no_rope_layers": [1, 0, 1, 1]},
        "vision_config": {"num_hidden_layers": 6, "layer_types": kinds},  # a tower a text forward skips
    }
    cut, changed = cut_layers(config, 2)
    assert cut["num_hidden_layers"] == 2 and cut["layer_types"] == kinds[:2]
    assert cut["intermediate_size"] == [10, 11]
    assert cut["mlp_only_layers"] == [1]
    assert cut["per_layer_config"] == {"0": {"a": 1}}
    assert cut["attention_types"] == [[["global", "local"], 1]]
    assert cut["eos_token_id"] == config["eos_token_id"] and cut["id2label"] == config["id2label"]
    assert cut["block_pattern"] == ["a", "b", "c"]
    assert cut["text_config"] == {"num_layers": 2, "no_rope_layers": [1, 0]}
    assert cut["vision_config"] == config["vision_config"]
    assert set(changed) == {"num_hidden_layers", "layer_types", "intermediate_size", "mlp_only_layers",
                            "per_layer_config", "attention_types", "text_config.num_layers",
                            "text_config.no_rope_layers"}
    assert cut_layers(cut, 2)[1] == []  # cut once is cut


@pytest.mark.parametrize("model_type,scope,field", [
    ("qwen3_next", None, "layer_types"),  # linear and full attention
    ("gemma3", "text_config", "layer_types"),  # a text model inside a multimodal config
    ("llama4", "text_config", "no_rope_layers"),
    ("zamba2", None, "layers_block_type"),
])
def test_layers_keeps_the_first_layers_of_the_default_config(model_type, scope, field):
    from transformers import AutoConfig

    from rooflinekit_plugins.hf.loader import load_hf_config

    default = AutoConfig.for_model(model_type)
    config = load_hf_config(f"hf:{model_type}", {"layers": 4}).config.get_text_config(decoder=True)
    default = getattr(default, scope) if scope else default
    assert len(getattr(default, field)) > 4
    assert config.num_hidden_layers == 4
    assert list(getattr(config, field)) == list(getattr(default, field))[:4]


def test_layers_cuts_both_stacks_of_an_encoder_decoder_and_leaves_a_vision_tower_whole():
    from transformers import AutoConfig

    from rooflinekit_plugins.hf.loader import load_hf_config

    bart = load_hf_config("hf:bart", {"layers": 2}).config
    assert (bart.encoder_layers, bart.decoder_layers) == (2, 2)
    gemma3 = load_hf_config("hf:gemma3", {"layers": 2}).config
    assert gemma3.text_config.num_hidden_layers == 2
    assert gemma3.vision_config.num_hidden_layers == AutoConfig.for_model("gemma3").vision_config.num_hidden_layers


def test_a_file_with_per_layer_lists_profiles_at_fewer_layers_each_layer_of_its_kind(tmp_path):
    # Gemma-3 style: five sliding layers then a full one; cut to 2 the kinds are the file's first two
    kinds = ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
             "full_attention"]
    window = 256
    path = tmp_path / "gemma3.json"
    path.write_text(json.dumps({
        "model_type": "gemma3_text", "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 6, "vocab_size": 1000,
        "sliding_window": window, "layer_types": kinds, "max_position_embeddings": 4096}))
    report = profile_dict(path, phase="decode", batch=2, context=1024, layers=2)
    rows = report["attention"]
    assert [r["window"] for r in rows] == [None, window]
    assert rows[0]["kv_bytes_min"] == 2 * 2 * 32 * 1024 * 2 * 2  # K and V, 2 heads of 32, 1024 positions
    assert rows[1]["kv_bytes_min"] == 2 * 2 * 32 * window * 2 * 2


# -- hf:TYPE and transformers' own errors, in one line ---------------------------------------------


def test_a_model_type_by_name_is_its_default_config():
    from transformers import AutoConfig

    from rooflinekit.api import profile_file

    report = profile_file("hf:llama", phase="decode", batch=1, context=64, options={"layers": 1})
    default = AutoConfig.for_model("llama")
    assert "LlamaForCausalLM" in report.model.kind
    (row,) = report.attention
    assert (row.num_heads, row.num_kv_heads) == (default.num_attention_heads, default.num_key_value_heads)


def test_errors_from_the_config_name_the_field(invoke, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "gemma3_text", "num_hidden_layers": 4,
                               "layer_types": ["full_attention", "sliding_attention", "full_attention"]}))
    one_line_error(invoke("profile", bad), "bad.json", "layer_types", "num_hidden_layers")
    # with -O layers the file's own inconsistency is named, not the cut
    result = invoke("profile", bad, "-O", "layers=2")
    one_line_error(result, "bad.json", "layer_types", "(4)")
    assert "cut to" not in result.stderr
    rope = tmp_path / "rope.json"
    rope.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1, "rope_scaling": {"rope_type": "bogus"}}))
    one_line_error(invoke("profile", rope), "rope.json", "rope_type", "'bogus'")
    one_line_error(invoke("profile", "hf:lama"), "unknown model_type 'lama'", "did you mean 'llama'")
    one_line_error(invoke("profile", "hf:llama", "-O", "task=encoder"), "task=encoder", "no encoder class")
    result = invoke("profile", "hf:nonexistent_type_x")
    assert "don't know how to load" not in result.stderr


# -- the coverage table ------------------------------------------------------------------------------


def test_the_coverage_table_meets_its_goal_and_names_every_failure():
    text = (ROOT / "docs" / "coverage.md").read_text()
    both, total = (int(x) for x in re.search(r"\*\*(\d+) of (\d+) types", text).groups())
    assert both / total >= 0.9
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == total
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if "**fail**" in cells[2:4]:
            assert len(cells[-1]) > 20, row  # a reason: the construct and whose it is


# -- the meta device: values a model reads, answered from the workload (rooflinekit_plugins.hf.meta) ----


def test_models_that_read_cache_lengths_and_masks_run_on_meta(tmp_path):
    import os

    from transformers import masking_utils

    before = (masking_utils._ignore_causal_mask_sdpa, masking_utils._ignore_bidirectional_mask_sdpa,
              masking_utils.find_packed_sequence_indices)
    # OPT turns the static cache's length into a size (torch.ones(batch, past + new))
    opt = tmp_path / "opt.json"
    opt.write_text(json.dumps({"model_type": "opt", "hidden_size": 128, "num_attention_heads": 4, "ffn_dim": 256,
                               "num_hidden_layers": 2, "vocab_size": 1000, "word_embed_proj_dim": 128}))
    b, s, heads, d = 2, 512, 4, 32
    report = profile_dict(opt, phase="decode", batch=b, context=s)
    assert [r["kv_bytes_min"] for r in report["attention"]] == [2 * heads * d * s * b * 2] * 2
    assert any("cache lengths are answered from the workload" in n for n in report["notes"])
    # RoFormer's encoder makes an all-ones padding mask and asks whether SDPA can skip it
    roformer = tmp_path / "roformer.json"
    roformer.write_text(json.dumps({"model_type": "roformer", "hidden_size": 128, "num_attention_heads": 4,
                                    "intermediate_size": 256, "num_hidden_layers": 1, "vocab_size": 1000,
                                    "embedding_size": 128}))
    report = profile_dict(roformer, phase="prefill", batch=1, context=s)
    (row,) = report["attention"]
    assert row["mode"] == "encoder" and row["flops_model"] == 4 * s * s * 128  # no mask: every pair
    assert any("taken as all ones (no padding)" in n for n in report["notes"])
    # nothing of it outlives the forward
    after = (masking_utils._ignore_causal_mask_sdpa, masking_utils._ignore_bidirectional_mask_sdpa,
             masking_utils.find_packed_sequence_indices)
    assert after == before and "TRANSFORMERS_DISABLE_TORCH_CHECK" not in os.environ
