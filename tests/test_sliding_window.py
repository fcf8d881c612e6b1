"""Sliding-window and chunked attention: the `rooflinekit_attention_window` hook, the built-in
`sliding_window` plugin, and the capped minimum, for any architecture.

Expected numbers are closed forms written here (KV minimum = B * positions * H_kv * (d_k + d_v) *
itemsize; pairs enumerated from the mask's definition), never outputs of the tool.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.keys import pairs_attended, positions_attended
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.specs import AttentionCall, AttentionSpec, AttentionWindow
from rooflinekit.stages.capture import mask_keys_max
from rooflinekit.stages.model_source import load_source
from rooflinekit_plugins import sliding_window
from tests.conftest import EXAMPLES, MODELS, profile_dict

CONFIGS = EXAMPLES / "configs"
WINDOWED = MODELS / "windowed_attn.py"
#: windowed_attn.py's default dimensions
H, H_KV, D = 4, 2, 16
BF16 = 2


def kv_min(batch, positions, kv_heads=H_KV, d_k=D, d_v=D, itemsize=BF16):
    """The architecture-minimum K/V bytes of one layer: each attended position's K and V read once."""
    return batch * positions * kv_heads * (d_k + d_v) * itemsize


def visible(q_pos: int, key: int, window: int = 0, chunk: int = 0) -> bool:
    """Causal sliding-window / chunked visibility, from the definitions (transformers' overlays)."""
    ok = key <= q_pos
    if window:
        ok = ok and key > q_pos - window
    if chunk:
        ok = ok and key // chunk == q_pos // chunk
    return ok


def enumerate_pairs(q_len, context, window=0, chunk=0):
    """(pairs scored, distinct keys read) for queries at the last q_len of context positions."""
    pairs, keys = 0, set()
    for p in range(context - q_len, context):
        seen = [k for k in range(context) if visible(p, k, window, chunk)]
        pairs += len(seen)
        keys.update(seen)
    return pairs, len(keys)


# -- the pure counts --------------------------------------------------------------------------------


@pytest.mark.parametrize("context", [1, 5, 17, 40])
@pytest.mark.parametrize("window", [0, 1, 4, 16, 64])
@pytest.mark.parametrize("chunk", [0, 1, 6, 64])
def test_keys_helpers_match_enumeration(context, window, chunk):
    for q_len in {1, context}:  # decode, and prefill from position 0
        pairs, positions = enumerate_pairs(q_len, context, window, chunk)
        assert positions_attended(q_len, context, window, chunk) == positions
        # decode's one query is costed as a non-causal call (it may see every cached key); prefill
        # from position 0 as a causal one
        assert pairs_attended(q_len, context, q_len > 1, window, chunk) == pairs


def test_a_window_at_or_above_the_context_changes_nothing():
    for context in (10, 64):
        for limit in (context, context + 1, 10**6):
            assert positions_attended(1, context, window=limit) == context
            assert pairs_attended(context, context, True, window=limit) == context * (context + 1) // 2
            assert pairs_attended(context, context, True, chunk=limit) == context * (context + 1) // 2


# -- the plugin's recognition ------------------------------------------------------------------------


def _module(**attrs):
    module = torch.nn.Module()
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def _window(answer):
    """(window, chunk) of a hook answer; (0, 0) for full attention, None for "don't know"."""
    if answer is None:
        return None
    if isinstance(answer, int):
        return (answer, 0)
    return (answer.window, answer.chunk)


LAYER_TYPES = ["sliding_attention", "full_attention"]


@pytest.mark.parametrize(
    ("attrs", "path", "expected"),
    [
        ({"sliding_window": 4096}, "x", (4096, 0)),
        ({"window_size": 512}, "x", (512, 0)),
        ({"attention_window": 256}, "x", (256, 0)),
        ({"local_window": 128}, "x", (128, 0)),
        ({"window_size": (255, 0)}, "x", (256, 0)),  # flash-attn (left, right): itself plus 255 before
        ({"window_size": (-1, -1)}, "x", (0, 0)),  # flash-attn: unbounded
        ({"window_size": (7, 7)}, "x", None),  # Swin's two-sided patch window: not a causal window
        ({"sliding_window": True}, "x", None),  # not a window
        ({"attention_chunk_size": 8192}, "x", (0, 8192)),
        # transformers' Qwen2/Gemma-2 full-attention layers: the module's own None wins over config
        ({"sliding_window": None, "config": SimpleNamespace(sliding_window=4096)}, "x", (0, 0)),
        ({"config": SimpleNamespace(sliding_window=4096)}, "x", (4096, 0)),  # Mistral v0.1, Phi-3
        ({"config": SimpleNamespace(sliding_window=None)}, "x", None),  # Mistral v0.2+: null
        # Qwen2: a window in the config that is not used
        ({"config": SimpleNamespace(sliding_window=131072, use_sliding_window=False)}, "x", None),
        ({"layer_idx": 1, "config": SimpleNamespace(sliding_window=1024, layer_types=LAYER_TYPES)}, "x", (0, 0)),
        ({"layer_idx": 0, "config": SimpleNamespace(sliding_window=1024, layer_types=LAYER_TYPES)}, "x",
         (1024, 0)),
        # no layer_idx: the layer index comes from the path
        ({"config": SimpleNamespace(sliding_window=128, layer_types=LAYER_TYPES * 2)}, "model.layers.2.attn",
         (128, 0)),
        ({"config": SimpleNamespace(sliding_window=128, layer_types=LAYER_TYPES * 2)}, "model.layers.3.attn",
         (0, 0)),
        # Qwen2 with windows on, no layer_types: sliding from max_window_layers on
        ({"layer_idx": 27, "config": SimpleNamespace(sliding_window=4096, use_sliding_window=True,
                                                     max_window_layers=28)}, "x", (0, 0)),
        ({"layer_idx": 28, "config": SimpleNamespace(sliding_window=4096, use_sliding_window=True,
                                                     max_window_layers=28)}, "x", (4096, 0)),
        # Gemma-2 without layer_types: even layers local, odd global
        ({"layer_idx": 4, "config": SimpleNamespace(model_type="gemma2", sliding_window=4096)}, "x", (4096, 0)),
        ({"layer_idx": 5, "config": SimpleNamespace(model_type="gemma2", sliding_window=4096)}, "x", (0, 0)),
        # Gemma-3 style pattern: every 6th layer global
        ({"layer_idx": 4, "config": SimpleNamespace(sliding_window=1024, sliding_window_pattern=6)}, "x",
         (1024, 0)),
        ({"layer_idx": 5, "config": SimpleNamespace(sliding_window=1024, sliding_window_pattern=6)}, "x", (0, 0)),
        # Llama 4: chunked layers, and full (no-rope) ones
        ({"layer_idx": 0, "config": SimpleNamespace(attention_chunk_size=8192, layer_types=[
            "chunked_attention", "full_attention"])}, "x", (0, 8192)),
        ({"layer_idx": 1, "config": SimpleNamespace(attention_chunk_size=8192, layer_types=[
            "chunked_attention", "full_attention"])}, "x", (0, 0)),
        # a layer kind this plugin does not know (linear attention): not its answer
        ({"layer_idx": 0, "config": SimpleNamespace(sliding_window=64, layer_types=["linear_attention"])}, "x",
         None),
        ({}, "x", None),
    ],
)
def test_window_declarations(attrs, path, expected):
    spec = AttentionSpec(arch="gqa", num_heads=8, num_kv_heads=2, head_dim=64, v_head_dim=64)
    answer = sliding_window.rooflinekit_attention_window(module=_module(**attrs), path=path, call=None, spec=spec)
    assert _window(answer) == expected


def _call(k_len, mask_keys):
    return AttentionCall("x", "M", (1, 4, 1, 16), (1, 2, k_len, 16), (1, 2, k_len, 16), True, None, True,
                         mask_keys)


def test_window_from_a_banded_mask_only_below_the_key_length():
    spec = AttentionSpec(arch="gqa", num_heads=4, num_kv_heads=2, head_dim=16, v_head_dim=16)
    ask = sliding_window.rooflinekit_attention_window
    assert _window(ask(module=_module(), path="x", call=_call(256, 64), spec=spec)) == (64, 0)
    assert ask(module=_module(), path="x", call=_call(256, 256), spec=spec) is None  # every key seen
    assert ask(module=_module(), path="x", call=_call(256, None), spec=spec) is None  # no values (meta)
    # a declared window wins over the mask
    assert _window(ask(module=_module(sliding_window=32), path="x", call=_call(256, 64), spec=spec)) == (32, 0)


def test_mask_keys_counts_the_widest_row():
    p = torch.arange(8).unsqueeze(-1)
    j = torch.arange(8).unsqueeze(0)
    band = (j <= p) & (j > p - 3)
    assert mask_keys_max(band, 8) == 3
    additive = torch.zeros(8, 8).masked_fill(~band, float("-inf"))
    assert mask_keys_max(additive, 8) == 3
    lowest = torch.zeros(8, 8, dtype=torch.bfloat16).masked_fill(~band, torch.finfo(torch.bfloat16).min)
    assert mask_keys_max(lowest, 8) == 3  # transformers' additive masks use the dtype's lowest value
    assert mask_keys_max(j <= p, 8) == 8  # causal: the last row sees every key
    assert mask_keys_max(band.to("meta"), 8) is None  # no values
    assert mask_keys_max(band, 16) is None  # does not span the keys


# -- through the pipeline, on a plain model file -------------------------------------------------------


def _row(report):
    (row,) = report["attention"]
    return row


@pytest.mark.parametrize("declare", ["sliding_window", "window_size"])
def test_declared_window_caps_decode(declare):
    b, s, w = 2, 512, 64
    row = _row(profile_dict(WINDOWED, batch=b, context=s, window=w, declare=declare))
    assert (row["arch"], row["window"]) == ("gqa", w)
    assert row["kv_bytes_min"] == kv_min(b, w)
    assert row["flops_model"] == 2 * b * H * w * (D + D)  # QK^T and PV over the window
    assert row["kv_read_bytes"] == kv_min(b, s)  # the code reads its whole cache: 8x the minimum
    assert any("sliding window of 64" in n and "sliding_window" in n for n in row["notes"])


def test_declared_window_prefill_pairs():
    b, s, w = 2, 256, 64
    row = _row(profile_dict(WINDOWED, phase="prefill", batch=b, context=s, window=w, mask=True))
    pairs = w * (w + 1) // 2 + (s - w) * w  # query i sees min(i + 1, w) keys
    assert row["flops_model"] == 2 * b * H * pairs * (D + D)
    assert row["kv_bytes_min"] == kv_min(b, s)  # every new token's K/V is needed by some query
    assert row["flops_executed"] == 2 * b * H * s * s * (D + D)  # a masked fused call computes the square


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_a_window_not_below_the_context_changes_no_number(phase):
    s = 128
    full = _row(profile_dict(WINDOWED, phase=phase, batch=2, context=s))
    for w in (s, 4 * s):
        row = _row(profile_dict(WINDOWED, phase=phase, batch=2, context=s, window=w))
        assert row["window"] == w
        for key in ("kv_bytes_min", "bytes_min", "flops_model", "kv_bytes_executed", "flops_executed"):
            assert row[key] == full[key], key
        assert any("not below the context" in n for n in row["notes"])


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_banded_mask_on_cpu(phase):
    b, s, w = 2, 256, 64
    row = _row(profile_dict(WINDOWED, phase=phase, batch=b, context=s, device="cpu", window=w, declare=None,
                           mask=True))
    assert row["window"] == w
    assert any("attention mask's values" in n for n in row["notes"])
    if phase == "decode":
        assert row["kv_bytes_min"] == kv_min(b, w)
        assert row["flops_model"] == 2 * b * H * w * (D + D)
    else:
        assert row["kv_bytes_min"] == kv_min(b, s)
        assert row["flops_model"] == 2 * b * H * (w * (w + 1) // 2 + (s - w) * w) * (D + D)
    # on meta the same mask holds no values: no window, the full-context minimum
    meta = _row(profile_dict(WINDOWED, phase=phase, batch=b, context=s, window=w, declare=None, mask=True))
    assert meta["window"] is None
    assert meta["kv_bytes_min"] == kv_min(b, s)


def test_chunked_attention_decode_and_prefill():
    b, s, c = 2, 300, 128
    decode = _row(profile_dict(WINDOWED, batch=b, context=s, chunk=c, mask=True))
    # the decode query is at position 299, in the chunk starting at 256: it sees 44 keys
    own = (s - 1) % c + 1
    assert own == 44
    assert decode["window"] is None
    assert decode["kv_bytes_min"] == kv_min(b, own)
    assert decode["flops_model"] == 2 * b * H * own * (D + D)
    assert any("chunked attention, chunks of 128" in n for n in decode["notes"])
    prefill = _row(profile_dict(WINDOWED, phase="prefill", batch=b, context=s, chunk=c, mask=True))
    full_chunks, rest = divmod(s, c)
    pairs = full_chunks * c * (c + 1) // 2 + rest * (rest + 1) // 2  # a triangle per chunk
    assert prefill["flops_model"] == 2 * b * H * pairs * (D + D)
    assert prefill["kv_bytes_min"] == kv_min(b, s)


# -- the hook composes with every architecture -----------------------------------------------------


class FixedWindow:
    """A third-party plugin giving every layer one window (or an AttentionWindow answer)."""

    def __init__(self, answer):
        self.answer = answer

    @hookimpl(tryfirst=True)
    def rooflinekit_attention_window(self, module, path, call, spec):
        return self.answer


def _with(answer) -> PluginHost:
    host = PluginHost()
    host.register(FixedWindow(answer), "fixed_window", "tests", "0")
    return host


def _profile(path, host, phase="decode", batch=1, context=1024, **options):
    workload = Workload(phase, batch, context, "bf16", "meta", tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options, host), workload, Deployment("H800"), host=host).report.to_dict()


def test_a_window_on_mla():
    b, s, w = 2, 1024, 256
    options = dict(layers=1, hidden=512, heads=4, q_lora_rank=64, intermediate=256, vocab=100)
    row = _row(_profile(EXAMPLES / "deepseek_mla.py", _with(w), batch=b, context=s, **options))
    assert (row["arch"], row["window"]) == ("mla", w)
    assert row["kv_bytes_min"] == b * w * (512 + 64) * BF16  # the latent and rope key, per position
    assert any("[plugin 'fixed_window']" in n for n in row["notes"])


def test_a_window_on_mha_and_chunks_from_a_plugin():
    b, s = 2, 1024
    row = _row(_profile(MODELS / "torch_mha.py", _with(AttentionWindow(chunk=100)), batch=b, context=s, layers=1))
    assert row["arch"] == "mha" and row["window"] is None
    heads, d = row["num_heads"], row["head_dim"]
    assert row["kv_bytes_min"] == b * ((s - 1) % 100 + 1) * heads * 2 * d * BF16


def test_full_attention_answer_stops_the_builtin():
    # 0 from a tryfirst plugin: the model's declared window is not applied
    row = _row(_profile(WINDOWED, _with(0), batch=2, context=512, window=64))
    assert row["window"] is None and row["kv_bytes_min"] == kv_min(2, 512)


def test_a_spec_with_a_window_is_not_asked():
    class Recogniser:
        @hookimpl(tryfirst=True)
        def rooflinekit_attention_spec(self, module, path, call):
            if hasattr(module, "q_proj"):
                return AttentionSpec(arch="gqa", num_heads=H, num_kv_heads=H_KV, head_dim=D, v_head_dim=D,
                                     window=16)

    host = _with(1000)
    host.register(Recogniser(), "recogniser", "tests", "0")
    row = _row(_profile(WINDOWED, host, batch=2, context=512, window=64))
    assert row["window"] == 16 and row["kv_bytes_min"] == kv_min(2, 16)


# -- transformers configs ------------------------------------------------------------------------------


def _cfg(name):
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _gemma_closed_form(b, positions):
    c = _cfg("gemma-2-9b")
    return kv_min(b, positions, c["num_key_value_heads"], c["head_dim"], c["head_dim"])


@pytest.mark.hf
@pytest.mark.slow
def test_gemma_2_9b_decode_local_layers_capped_global_not():
    pytest.importorskip("transformers")
    b, s, w = 2, 16384, 4096
    c = _cfg("gemma-2-9b")
    assert (c["num_hidden_layers"], c["sliding_window"], c["head_dim"], c["num_key_value_heads"]) == (42, w, 256, 8)
    rows = profile_dict(CONFIGS / "gemma-2-9b.json", batch=b, context=s)["attention"]
    assert len(rows) == 42
    local = [r for r in rows if r["window"] == w]
    glob = [r for r in rows if r["window"] is None]
    assert len(local) == len(glob) == 21
    assert [int(r["module"].split(".")[2]) % 2 for r in local] == [0] * 21  # even layers are local
    assert all(r["kv_bytes_min"] == _gemma_closed_form(b, w) for r in local)
    assert all(r["kv_bytes_min"] == _gemma_closed_form(b, s) for r in glob)


@pytest.mark.hf
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_gemma_2_alternates_windows(phase):
    pytest.importorskip("transformers")
    b, w = 1, 4096
    s = 16384 if phase == "decode" else 8192
    rows = profile_dict(CONFIGS / "gemma-2-9b.json", phase=phase, batch=b, context=s, layers=2)["attention"]
    assert [r["window"] for r in rows] == [w, None]
    h, d = 16, 256
    if phase == "decode":
        assert [r["kv_bytes_min"] for r in rows] == [_gemma_closed_form(b, w), _gemma_closed_form(b, s)]
        assert [r["flops_model"] for r in rows] == [2 * b * h * n * 2 * d for n in (w, s)]
    else:
        banded = w * (w + 1) // 2 + (s - w) * w
        causal = s * (s + 1) // 2
        assert [r["flops_model"] for r in rows] == [2 * b * h * n * 2 * d for n in (banded, causal)]
        assert [r["kv_bytes_min"] for r in rows] == [_gemma_closed_form(b, s)] * 2


@pytest.mark.hf
def test_mistral_7b_v01_capped_at_its_window():
    pytest.importorskip("transformers")
    b, s, w = 2, 32768, 4096
    c = _cfg("mistral-7b")
    rows = profile_dict(CONFIGS / "mistral-7b.json", batch=b, context=s, layers=2)["attention"]
    d = c["hidden_size"] // c["num_attention_heads"]
    for row in rows:
        assert row["window"] == w
        assert row["kv_bytes_min"] == kv_min(b, w, c["num_key_value_heads"], d, d)


@pytest.mark.hf
def test_qwen2_unused_window_is_not_applied():
    pytest.importorskip("transformers")
    b, s = 2, 4096
    c = _cfg("qwen2.5-7b")
    assert c["use_sliding_window"] is False and c["sliding_window"] == 131072
    # even a window below the context stays off while use_sliding_window is false
    rows = profile_dict(CONFIGS / "qwen2.5-7b.json", batch=b, context=s, layers=2,
                       config={"sliding_window": 1024})["attention"]
    d = c["hidden_size"] // c["num_attention_heads"]
    for row in rows:
        assert row["window"] is None
        assert row["kv_bytes_min"] == kv_min(b, s, c["num_key_value_heads"], d, d)


@pytest.mark.hf
def test_phi_3_and_gpt_oss_configs():
    pytest.importorskip("transformers")
    b, s = 2, 4096
    phi = _cfg("phi-3-mini-4k")
    d = phi["hidden_size"] // phi["num_attention_heads"]
    for row in profile_dict(CONFIGS / "phi-3-mini-4k.json", batch=b, context=s, layers=2)["attention"]:
        assert (row["arch"], row["window"]) == ("mha", 2047)
        assert row["kv_bytes_min"] == kv_min(b, 2047, phi["num_key_value_heads"], d, d)
    oss = _cfg("gpt-oss-20b")
    rows = profile_dict(CONFIGS / "gpt-oss-20b.json", batch=b, context=s, layers=2)["attention"]
    assert [r["window"] for r in rows] == [128, None]
    per = [kv_min(b, n, oss["num_key_value_heads"], oss["head_dim"], oss["head_dim"]) for n in (128, s)]
    assert [r["kv_bytes_min"] for r in rows] == per


@pytest.mark.hf
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_llama_4_chunked_layers(tmp_path, phase):
    pytest.importorskip("transformers")
    config = {"model_type": "llama4_text", "hidden_size": 256, "intermediate_size": 512,
              "intermediate_size_mlp": 512, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
              "num_hidden_layers": 4, "vocab_size": 1000, "attention_chunk_size": 128, "num_local_experts": 4,
              "num_experts_per_tok": 1, "max_position_embeddings": 4096}
    path = tmp_path / "llama4.json"
    path.write_text(json.dumps(config))
    b, s, c = 2, 300, 128
    rows = profile_dict(path, phase=phase, batch=b, context=s)["attention"]
    assert len(rows) == 4  # layers 0-2 chunked, every 4th (no rope) attends fully
    chunked, full = rows[:3], rows[3]
    if phase == "decode":
        own = (s - 1) % c + 1
        assert all(r["kv_bytes_min"] == kv_min(b, own, 2, 32, 32) for r in chunked)
        assert all(r["flops_model"] == 2 * b * 8 * own * 64 for r in chunked)
        assert full["kv_bytes_min"] == kv_min(b, s, 2, 32, 32)
    else:
        pairs = 2 * (c * (c + 1) // 2) + (s - 2 * c) * (s - 2 * c + 1) // 2
        assert all(r["flops_model"] == 2 * b * 8 * pairs * 64 for r in chunked)
        assert full["flops_model"] == 2 * b * 8 * (s * (s + 1) // 2) * 64
    assert all(any("chunked attention, chunks of 128" in n for n in r["notes"]) for r in chunked)


def test_shipped_window_configs_name_their_source():
    for name in ("gemma-2-9b", "phi-3-mini-4k", "gpt-oss-20b"):
        c = _cfg(name)
        assert c["_rooflinekit_source"].startswith(("google/", "microsoft/", "openai/"))
    assert _cfg("gpt-oss-20b")["layer_types"] == ["sliding_attention", "full_attention"] * 12
