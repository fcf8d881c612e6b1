"""Encoders (BERT-style) and encoder-decoders (T5, BART): every layer costed over its own lengths."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLES, one_line_error, profile_dict

pytest.importorskip("transformers")
pytestmark = pytest.mark.hf

BERT = EXAMPLES / "configs" / "bert-base-uncased.json"


def test_bert_base_prefill_is_two_flops_per_weight_plus_bidirectional_attention():
    c = json.loads(BERT.read_text())
    h, i, v, layers, heads = (c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"],
                              c["num_attention_heads"])
    assert (h, i, v, layers, heads, c["max_position_embeddings"]) == (768, 3072, 30522, 12, 12, 512)
    t = 512  # batch 1
    encoder = layers * (4 * h * h + 2 * h * i)  # Q, K, V, O and the two FFN matrices per layer
    mlm_head = h * h + h * v  # the transform dense, then the decoder over the vocabulary
    attention = 4 * layers * t * t * h  # QK^T and PV over every pair: no causal halving
    expected = 2 * t * (encoder + mlm_head) + attention

    report = profile_dict(BERT, phase="prefill", batch=1, context=t)
    assert report["totals"]["flops"] == pytest.approx(expected, rel=0.02)
    assert report["totals"]["flops_model"] == pytest.approx(expected, rel=0.02)
    rows = report["attention"]
    assert len(rows) == layers and all(r["mode"] == "encoder" and r["recognised"] for r in rows)
    assert all(r["flops_model"] == 4 * t * t * h for r in rows)  # every query sees every key
    # no KV cache: K and V are this step's activations
    assert all(r["cache_bytes_per_token"] == 0 for r in rows)
    assert report["attention_totals"]["cache_bytes_per_token"] == 0
    # the MLM head runs on every position (not logits=last): its matmul is T x h x V
    head = [o for o in report["ops"] if o["module"].startswith("cls.") and o["param_bytes"] >= 2 * h * v]
    assert sum(o["flops"] for o in head) == 2 * t * h * v
    assert any("no KV cache" in n for n in report["notes"])


def test_an_encoder_has_no_decode_step(invoke):
    one_line_error(invoke("profile", BERT, "--phase", "decode", "-O", "layers=1"),
                   "BertForMaskedLM", "an encoder has no decode step", "--phase prefill")


# -- encoder-decoders ------------------------------------------------------------------------------

T5 = {"model_type": "t5", "d_model": 128, "d_kv": 32, "num_heads": 4, "d_ff": 256, "num_layers": 2,
      "num_decoder_layers": 3, "vocab_size": 1000}
BART = {"model_type": "bart", "d_model": 128, "encoder_attention_heads": 4, "decoder_attention_heads": 8,
        "encoder_layers": 2, "decoder_layers": 3, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256, "vocab_size": 1000,
        "max_position_embeddings": 1024}


def _decoder(config: dict) -> tuple[int, int, int]:
    """(decoder layers, decoder heads, head size) from a T5 or BART config, by hand."""
    if config["model_type"] == "t5":
        return config["num_decoder_layers"], config["num_heads"], config["d_kv"]
    heads = config["decoder_attention_heads"]
    return config["decoder_layers"], heads, config["d_model"] // heads


def _write(tmp_path, config: dict):
    path = tmp_path / f"{config['model_type']}.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("config", [T5, BART], ids=["t5", "bart"])
@pytest.mark.parametrize("encoder_len", [None, 300])
def test_decode_reads_the_cross_attention_kv_every_step_in_rows_of_their_own(tmp_path, config, encoder_len):
    layers, heads, d = _decoder(config)
    b, s = 2, 256
    options = {} if encoder_len is None else {"encoder_len": encoder_len}
    enc = encoder_len or s  # the source is as long as the context unless given
    report = profile_dict(_write(tmp_path, config), phase="decode", batch=b, context=s, **options)
    rows = report["attention"]
    cross = [r for r in rows if r["mode"] == "cross"]
    own = [r for r in rows if r["mode"] is None]
    assert len(cross) == len(own) == layers and len(rows) == 2 * layers
    # K and V of every head over the encoder's positions, bf16, read by every step
    assert sum(r["kv_read_bytes"] for r in cross) == 2 * layers * heads * d * enc * b * 2
    assert all(r["kv_bytes_min"] == 2 * heads * d * enc * b * 2 for r in cross)
    # they were written at prefill: nothing grows per generated token, and no K/V projection runs
    assert all(r["cache_bytes_per_token"] == 0 for r in cross)
    cross_modules = {r["module"] for r in cross}
    projections = {o["module"].rsplit(".", 1)[1] for o in report["ops"]
                   if o["param_bytes"] and o["module"].rsplit(".", 1)[0] in cross_modules}
    assert projections and not projections & {"k", "v", "k_proj", "v_proj"}, projections
    # the decoder's own cache: the context's positions, growing by one token per step
    assert all(r["cache_bytes_per_token"] == 2 * heads * d * 2 for r in own)
    assert all(r["kv_bytes_min"] == 2 * heads * d * s * b * 2 for r in own)


@pytest.mark.parametrize("config", [T5, BART], ids=["t5", "bart"])
def test_prefill_encodes_the_source_and_writes_the_cross_kv_once(tmp_path, config):
    layers, heads, d = _decoder(config)
    b, s = 1, 128
    report = profile_dict(_write(tmp_path, config), phase="prefill", batch=b, context=s)
    rows = report["attention"]
    encoder = [r for r in rows if r["mode"] == "encoder"]
    cross = [r for r in rows if r["mode"] == "cross"]
    assert len(encoder) == 2 and len(cross) == layers
    enc_heads = config.get("num_heads") or config["encoder_attention_heads"]
    enc_d = config.get("d_kv") or config["d_model"] // enc_heads
    # bidirectional over the source: every query sees every key
    assert all(r["flops_model"] == 4 * b * s * s * enc_heads * enc_d for r in encoder)
    # the decoder's first token attends over the whole source
    assert all(r["flops_model"] == 4 * b * 1 * s * heads * d for r in cross)
    # the cross K/V projections run here, once, over the source's positions
    cross_modules = {r["module"] for r in cross}
    kv = [o for o in report["ops"] if o["param_bytes"] and o["module"].rsplit(".", 1)[0] in cross_modules
          and o["module"].rsplit(".", 1)[1] in ("k", "v", "k_proj", "v_proj")]
    assert len(kv) == 2 * layers
    assert sum(o["flops"] for o in kv) == 2 * layers * 2 * b * s * config["d_model"] * heads * d
