"""Built-in plugin: xLSTM's matrix memory (mLSTM, transformers' `xlstm`), a fixed state per head.

Recognises a module whose class name holds "LSTM" and whose `config` declares `num_heads`,
`qk_head_dim` and `v_head_dim` and which has no submodules (transformers' xLSTMBackend, where
the recurrence runs, not the layer or block around it). Its cache
is a fixed state per sequence (`rooflinekit.plugin.state_cost`): per head the matrix memory
C (d_qk x d_v), the normaliser n (d_qk) and the stabiliser m (1).

Model FLOPs per head and token: 5 per memory element (the forget decay, the rank-1 write v k^T
and the readout C q as multiply-adds at 2) and 5 per key channel (n's decay and write, n.q).
Projections are counted where they run.
"""

from __future__ import annotations

from rooflinekit.plugin import StateCounts, hookimpl, int_attr, state_spec

ARCH = "xlstm"
PROVIDES = (ARCH,)

NOTE = ("mLSTM state per head: matrix memory d_qk x d_v, normaliser d_qk, stabiliser 1; model FLOPs: 5 per "
        "memory element and 5 per key channel per token")


def recognise(module):
    """The spec of an mLSTM module, or None."""
    config = getattr(module, "config", None)
    if "LSTM" not in type(module).__name__ or config is None or next(module.children(), None) is not None:
        return None  # the module that runs the recurrence has no submodules (not its layer or block)
    heads = int_attr(config, ("num_heads",))
    dk, dv = int_attr(config, ("qk_head_dim",)), int_attr(config, ("v_head_dim",))
    if heads is None or dk is None or dv is None:
        return None
    counts = StateCounts(state_elements=heads * (dk * dv + dk + 1), conv_elements=0,
                         flops_per_token=heads * (5 * dk * dv + 5 * dk), io_per_token=heads * (2 * dk + 2 * dv + 2))
    return state_spec(ARCH, heads, heads, dk, dv, counts, notes=(NOTE,))


@hookimpl
def rooflinekit_mixer_sites(model):
    return [path for path, module in model.named_modules() if recognise(module) is not None]


@hookimpl
def rooflinekit_attention_spec(module, path, call):
    return recognise(module)
