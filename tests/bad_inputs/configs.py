"""transformers configs that cannot be analysed, and work past the bounds (rooflinekit/core/limits.py).

Each config case writes a small config .json into the case's folder; the tiny Llama below is
valid, and every case breaks one thing. The error line names the file and the field.
"""

from __future__ import annotations

import json

import pytest

from bad_inputs.case import GQA, TINY, Case

CAT = "configs"
BOUNDS = "bounds"
HF = (pytest.mark.hf,)

#: A valid Llama config, small enough that the cases that break it fail before any real work.
TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
}
GEMMA2 = {
    "model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 4, "vocab_size": 100,
    "sliding_window": 32, "layer_types": ["sliding_attention", "full_attention"],
}
DROP = object()


def config(**changes) -> str:
    """TINY_LLAMA with `changes` (a value DROP removes the key), as JSON text."""
    data = dict(TINY_LLAMA)
    for key, value in changes.items():
        if value is DROP:
            data.pop(key, None)
        else:
            data[key] = value
    return json.dumps(data)


def cfg(id, name, text, needles, args=(), category=CAT, env=None):
    """A case profiling `{dir}/name`, a config file holding `text`."""
    return Case(id, category, ["profile", f"{{dir}}/{name}", "-s", "16", *args], needles, files={name: text},
                env=env or {}, marks=HF)


CASES = [
    # transformers' own validation, as one line naming the file and transformers' reason
    cfg("cfg-heads-not-dividing-hidden", "heads.json", config(num_attention_heads=3),
        ["heads.json", "not a multiple of the number of attention heads"]),
    cfg("cfg-hidden-wrong-type", "hidden.json", config(hidden_size="big"), ["hidden.json", "hidden_size", "'big'"]),
    cfg("cfg-layers-float", "layers.json", config(num_hidden_layers=2.5), ["layers.json", "num_hidden_layers", "2.5"]),
    cfg("cfg-layers-null", "layers.json", config(num_hidden_layers=None), ["layers.json", "num_hidden_layers"]),
    cfg("cfg-layers-bool", "layers.json", config(num_hidden_layers=True), ["layers.json", "num_hidden_layers"]),
    cfg("cfg-rope-missing-required-keys", "rope.json", config(rope_scaling={"rope_type": "llama3"}),
        ["rope.json", "transformers rejects this llama config", "factor"]),
    cfg("cfg-unknown-activation", "act.json", config(hidden_act="no_such_act"), ["act.json", "no_such_act"]),
    cfg("cfg-layer-types-shorter-than-layers", "gemma.json", json.dumps(GEMMA2),
        ["gemma.json", "layer_types", "(2)"]),
    cfg("cfg-option-layers-past-layer-types", "gemma.json", json.dumps(GEMMA2), ["gemma.json", "layer_types"],
        ["-O", "layers=3"]),
    # what transformers lets through but no decoder runs
    cfg("cfg-kv-heads-not-dividing-heads", "kv.json", config(num_key_value_heads=3),
        ["kv.json", "num_attention_heads (4) is not a multiple of num_key_value_heads (3)"]),
    cfg("cfg-zero-kv-heads", "kv.json", config(num_key_value_heads=0), ["kv.json", "num_key_value_heads is 0"]),
    cfg("cfg-zero-vocab", "vocab.json", config(vocab_size=0), ["vocab.json", "vocab_size is 0"]),
    cfg("cfg-negative-hidden", "hidden.json", config(hidden_size=-64), ["hidden.json", "hidden_size is -64"]),
    cfg("cfg-zero-layers", "zero.json", config(num_hidden_layers=0), ["zero.json", "num_hidden_layers is 0"]),
    cfg("cfg-negative-layers", "neg.json", config(num_hidden_layers=-2), ["neg.json", "num_hidden_layers is -2"]),
    cfg("cfg-text-config-zero-layers", "mm.json",
        json.dumps({"model_type": "llama", "text_config": {"num_hidden_layers": 0}}),
        ["mm.json", "text_config.num_hidden_layers is 0"]),
    cfg("cfg-option-layers-zero", "ok.json", config(), ["ok.json", "option layers=0"], ["-O", "layers=0"]),
    cfg("cfg-option-layers-word", "ok.json", config(), ["ok.json", "option layers='two'"], ["-O", "layers=two"]),
    # model_type
    cfg("cfg-no-model-type", "config.json", config(model_type=DROP), ["config.json", "no model_type"]),
    cfg("cfg-model-type-not-string", "mt.json", config(model_type=5), ["mt.json", "model_type must be a string"]),
    cfg("cfg-model-type-typo", "typo.json", config(model_type="llamma"),
        ["typo.json", "unknown model_type 'llamma'", "did you mean 'llama'"]),
    cfg("cfg-model-type-unknown", "odd.json", config(model_type="zzqqxx"),
        ["odd.json", "unknown model_type 'zzqqxx'", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"]),
    cfg("cfg-model-type-not-causal-lm", "vit.json", config(model_type="vit"),
        ["vit.json", "model_type 'vit' has no causal-LM class"]),
    # not a config at all
    cfg("cfg-empty-file", "empty.json", "", ["empty.json is empty"]),
    cfg("cfg-binary-file", "blob.json", bytes(range(256)), ["blob.json is not a JSON text file", "not UTF-8"]),
    cfg("cfg-invalid-json", "broken.json", '{"model_type": "llama",', ["broken.json is not valid JSON"]),
    cfg("cfg-json-list", "list.json", "[1, 2]", ["list.json does not hold a JSON object"]),
    cfg("cfg-json-nested-too-deeply", "deep.json", "[" * 100_000 + "]" * 100_000,
        ["deep.json", "nested too deeply"]),
    # bounded work: absurd sizes fail before anything is built
    cfg("cfg-absurd-layers", "deep.json", config(num_hidden_layers=100_000),
        ["deep.json", "num_hidden_layers is 100,000", "limit: 2,048 layers", "ROOFLINEKIT_MAX_LAYERS"],
        category=BOUNDS),
    cfg("cfg-absurd-layers-alias", "gpt2.json", json.dumps({"model_type": "gpt2", "n_layer": 10**12}),
        ["gpt2.json", "n_layer is 1,000,000,000,000"], category=BOUNDS),
    cfg("cfg-absurd-hidden", "wide.json", config(hidden_size=2**30, intermediate_size=2**30),
        ["wide.json", "parameters", "hidden_size 1,073,741,824", "ROOFLINEKIT_MAX_PARAMETERS"], category=BOUNDS),
    cfg("cfg-absurd-vocab", "vocab.json", config(vocab_size=10**13),
        ["vocab.json", "vocab_size 10,000,000,000,000", "limit: 1e+13 parameters"], category=BOUNDS),
    cfg("cfg-absurd-experts", "moe.json",
        json.dumps({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                    "num_hidden_layers": 2, "num_local_experts": 10**9, "num_experts_per_tok": 2}),
        ["moe.json", "parameters"], category=BOUNDS),
    cfg("cfg-option-layers-absurd", "ok.json", config(), ["ok.json", "option layers is 100,000", "2,048"],
        ["-O", "layers=100000"], category=BOUNDS),
    cfg("cfg-layers-over-a-lowered-limit", "ok.json", config(), ["ok.json", "num_hidden_layers is 2",
                                                                "limit: 1 layers"],
        category=BOUNDS, env={"ROOFLINEKIT_MAX_LAYERS": "1"}),
    cfg("cfg-limit-variable-not-a-number", "ok.json", config(), ["ROOFLINEKIT_MAX_LAYERS='lots'"],
        category=BOUNDS, env={"ROOFLINEKIT_MAX_LAYERS": "lots"}),
    # per-layer fields, roles, model types by name (issue 13)
    cfg("cfg-layer-types-length", "lt.json",
        json.dumps({"model_type": "gemma3_text", "num_hidden_layers": 4,
                    "layer_types": ["full_attention", "sliding_attention", "full_attention"]}),
        ["lt.json", "layer_types", "num_hidden_layers"], ["-O", "layers=2"]),
    cfg("cfg-rope-type-unknown", "rope.json", config(rope_scaling={"rope_type": "bogus"}),
        ["rope.json", "rope_type", "'bogus'"]),
    cfg("cfg-option-task-unknown", "ok.json", config(), ["ok.json", "option task='banana'", "seq2seq"],
        ["-O", "task=banana"]),
    cfg("cfg-option-task-unavailable", "ok.json", config(), ["ok.json", "task=encoder", "no encoder class"],
        ["-O", "task=encoder"]),
    cfg("cfg-option-encoder-len-zero", "ok.json", config(), ["ok.json", "option encoder_len=0"],
        ["-O", "encoder_len=0"]),
    cfg("cfg-encoder-decode", "bert.json",
        json.dumps({"model_type": "bert", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                    "num_hidden_layers": 1, "vocab_size": 100}),
        ["bert.json", "BertForMaskedLM", "an encoder has no decode step", "--phase prefill"]),
    Case("hf-spec-model-type-typo", CAT, ["profile", "hf:lamma", "-s", "16"],
         ["unknown model_type 'lamma'", "did you mean 'llama'"], marks=HF),
    Case("hf-spec-no-model-type", CAT, ["profile", "hf:", "-s", "16"], ["hf: needs a model type"], marks=HF),
    # a model file: modules while building, ops while capturing
    Case("model-file-absurd-layers", BOUNDS, ["profile", GQA, *TINY, "-O", "layers=100000"],
         ["llama_gqa.py", "more than 2,000 modules", "ROOFLINEKIT_MAX_MODULES"],
         env={"ROOFLINEKIT_MAX_MODULES": "2000"}),
    Case("model-file-too-many-ops", BOUNDS, ["profile", GQA, *TINY, "-O", "layers=4"],
         ["more than 60 ops", "layers.1", "ROOFLINEKIT_MAX_OPS"], env={"ROOFLINEKIT_MAX_OPS": "60"}),
]
