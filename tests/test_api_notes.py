"""What the tool cannot see, said in the report (issue 26, item 3): a cache transformers fills inside
the profiled step is counted apart with a note, and attention no plugin recognised is a warning
naming its layers, with the memory line saying whose cache it leaves out."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import rooflinekit

#: A small llama (GQA: 8 query heads, 2 K/V heads) for the lazily filled cache.
LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}


@pytest.mark.hf
def test_a_static_cache_the_user_passes_is_filled_apart_from_the_step(tmp_path):
    """transformers' StaticCache allocates and zeroes each layer's slots at its first update, inside
    the forward: counted as the step's, it doubled the KV bytes (amplification 2) and the time. The
    step's figures now equal profile_file's for the same config (which preallocates the cache), and a
    note says what was set aside."""
    transformers = pytest.importorskip("transformers")
    batch, context = 2, 1024
    config = transformers.LlamaConfig(**{k: v for k, v in LLAMA.items() if k != "model_type"})
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = transformers.LlamaForCausalLM(config)
            cache = transformers.StaticCache(config=config, max_cache_len=context)
            ids = torch.zeros(batch, 1, dtype=torch.long)
            positions = torch.arange(context - 1, context).unsqueeze(0).expand(batch, -1)
        # the inputs the config loader gives the same step (plugins/hf/loader.py, make_inputs)
        inputs = {"position_ids": positions, "past_key_values": cache, "use_cache": True, "logits_to_keep": 1}
        report = rooflinekit.profile(model, ids, inputs=inputs, phase="decode", context=context, hardware="H800")
    finally:
        torch.set_default_dtype(default)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    from_file = rooflinekit.profile_file(str(path), batch=batch, context=context, hardware="H800")

    got, expected = report.totals, from_file.totals
    for field in ("bytes", "weight_bytes", "kv_bytes_executed", "kv_bytes_min", "other_bytes", "flops",
                  "time_bound_s", "predicted_step_s"):
        assert getattr(got, field) == pytest.approx(getattr(expected, field), rel=1e-9, abs=1e-9), field
    assert report.attention_totals.amplification == pytest.approx(from_file.attention_totals.amplification,
                                                                  rel=1e-9)
    assert report.attention_totals.amplification < 1.1
    assert not any(op.name == "aten.zeros" for op in report.ops)
    (note,) = [n for n in report.notes if "filled lazily by transformers" in n]
    assert "StaticCache" in note and "counted apart" in note and "2 of its layers" in note
    kv_slots = 2 * 2 * batch * 2 * context * 32 * 2  # layers x (K, V) x batch x K/V heads x slots x head_dim x bf16
    assert f"{kv_slots / 1e6:,.3f} MB" in note
    assert [layer.is_initialized for layer in cache.layers] == [True, True]  # the cache is the user's, filled


class ShortNamedAttention(nn.Module):
    """Attention that keeps its heads as `h` and `hd` and folds them into the batch of bmm: no
    plugin reads its spec."""

    def __init__(self, d: int = 256, h: int = 4, hd: int = 64):
        super().__init__()
        self.h, self.hd = h, hd
        self.qkv = nn.Linear(d, 3 * h * hd, bias=False)
        self.o = nn.Linear(h * hd, d, bias=False)

    def forward(self, x, k_cache, v_cache):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.hd).unbind(2)
        k = torch.cat([k_cache, k.transpose(1, 2)], 2)
        v = torch.cat([v_cache, v.transpose(1, 2)], 2)
        s = k.shape[2]
        q = q.transpose(1, 2).reshape(b * self.h, t, self.hd)
        scores = torch.bmm(q, k.reshape(b * self.h, s, self.hd).transpose(1, 2)) / self.hd ** 0.5
        y = torch.bmm(F.softmax(scores, -1), v.reshape(b * self.h, s, self.hd)).view(b, self.h, t, self.hd)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class ShortNamedNet(nn.Module):
    def __init__(self, layers: int = 2):
        super().__init__()
        self.layers = nn.ModuleList(ShortNamedAttention() for _ in range(layers))

    def forward(self, x, caches):
        for layer, (k, v) in zip(self.layers, caches, strict=True):
            x = x + layer(x, k, v)
        return x


def _short_named(batch: int = 4, context: int = 4096):
    with torch.device("meta"):
        model = ShortNamedNet().to(torch.bfloat16)
        x = torch.empty(batch, 1, 256, dtype=torch.bfloat16)
        caches = [tuple(torch.empty(batch, 4, context - 1, 64, dtype=torch.bfloat16) for _ in range(2))
                  for _ in range(2)]
    return model, x, caches


def test_unrecognised_attention_is_a_warning_naming_its_layers():
    """Its cache was left out of memory (KV cache 0 B, a max batch far too large) with no warning."""
    model, x, caches = _short_named()
    report = rooflinekit.profile(model, x, caches, phase="decode", context=4096, hardware="H800")
    assert {row.arch for row in report.attention} == {"unrecognised"}
    (warning,) = [w for w in report.warnings if "attention not recognised" in w]
    assert "layers.0.attn" not in warning  # the layers are the modules themselves here
    assert "layers.0, layers.1" in warning and "ShortNamedAttention" in warning
    assert "left out of the memory section" in warning
    data = report.to_dict()
    assert warning in data["warnings"]
    assert any("layers.0, layers.1" in n and "not counted" in n for n in data["memory"]["notes"])
    text = report.table()
    memory = text[text.index("memory (one GPU)"):].split("\n\n")[0]
    assert "KV cache 0 B" in memory
    assert "KV cache of layers.0, layers.1 not counted" in " ".join(memory.split())
    assert "warning: attention not recognised in layers.0, layers.1" in " ".join(text.split())


def test_recognised_attention_has_no_such_warning():
    with torch.device("meta"):
        mha = nn.MultiheadAttention(256, 4, batch_first=True, dtype=torch.bfloat16)
        q = torch.empty(2, 64, 256, dtype=torch.bfloat16)
    report = rooflinekit.profile(mha, q, q, q, hardware="H800")
    assert report.attention and not any("attention not recognised" in w for w in report.warnings)
    assert "not counted" not in report.table()
