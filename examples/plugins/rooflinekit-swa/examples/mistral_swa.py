"""Model file: a Mistral-style decoder with sliding-window attention (needs rooflinekit-swa installed).

    rooflinekit profile examples/mistral_swa.py --phase decode --context 32768 -H "H100 NVL"

Options: those of rooflinekit_swa.model.build_model / make_inputs (layers, hidden, heads, kv_heads,
head_dim, intermediate, vocab, sliding_window, rope_theta, experts, top_k).
"""

from rooflinekit_swa.model import build_model, make_inputs

__all__ = ["build_model", "make_inputs"]
