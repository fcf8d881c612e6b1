"""Tiny Llama-style GQA decoder: ``examples/llama_gqa.py`` with small default dims.

Same code (loaded from ``../../examples/llama_gqa.py`` by path), so module names,
the ``GQAAttention`` class and the forward signature
``model(input_ids, kv_caches=None, start_pos=0)`` are identical.

Options: layers=2, heads=8, kv_heads=2, head_dim=32, hidden=256,
intermediate=512, vocab=1000, rope_theta=10000.0
"""

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "examples" / "llama_gqa.py"
_spec = importlib.util.spec_from_file_location("_rooflinekit_example_llama_gqa", _PATH)
_llama = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_llama)

GQAAttention = _llama.GQAAttention


def build_model(*, layers=2, heads=8, kv_heads=2, head_dim=32, hidden=256,
                intermediate=512, vocab=1000, rope_theta=10000.0):
    return _llama.build_model(layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                              hidden=hidden, intermediate=intermediate, vocab=vocab,
                              rope_theta=rope_theta)


def make_inputs(batch, context, phase, *, layers=2, kv_heads=2, head_dim=32, vocab=1000):
    return _llama.make_inputs(batch, context, phase, layers=layers, kv_heads=kv_heads,
                              head_dim=head_dim, vocab=vocab)
