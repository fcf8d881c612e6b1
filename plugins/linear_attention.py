"""Built-in plugin: linear attention and short convolutions, layers whose cache is a fixed state.

Recognised by module class and attributes (transformers' names):

- "gated_deltanet": a gated delta rule (class name with "Delta": Qwen3-Next's and Qwen3.5's
  GatedDeltaNet with `num_v_heads`, `num_k_heads`, `head_k_dim`, `head_v_dim`; Kimi-Linear's delta
  attention with `num_heads`, `head_dim`, mode "kda" for its per-channel gate). State per
  sequence: v-heads x d_k x d_v, plus the convolution state (d_conv - 1) x `conv_dim` (q, k, v
  convolved). Model FLOPs per head and token: 7 per state element (decay, S^T k, the rank-1 write
  and the readout S^T q as multiply-adds), 2 per value channel (the delta and its beta) and the
  gate's exponentials.
- "lightning": MiniMax's lightning attention (class name with "Lightning"): state heads x d x d
  (S = decay S + k^T v), no convolution; 5 FLOPs per state element and token (decay, write, readout).
- "short_conv": a gated short convolution (class name with "ShortConv", LFM2): no recurrent state,
  the convolution state (L - 1) x channels; model FLOPs are its two gates (B*x, C*y, 1 per
  channel each); the convolution's own FLOPs are counted where it runs (its Conv1d op in a
  prefill; at decode transformers computes it inline with elementwise ops no formula counts).

Projections and convolutions are counted where they run; `rooflinekit.plugin.state_cost` turns the
numbers into the layer's cost.
"""

from __future__ import annotations

import importlib
from dataclasses import replace

from rooflinekit.plugin import StateCounts, hookimpl, int_attr, state_spec, with_kept_state

DELTANET, LIGHTNING, SHORT_CONV = "gated_deltanet", "lightning", "short_conv"
PROVIDES = (DELTANET, LIGHTNING, SHORT_CONV)

DELTA_NOTE = ("model FLOPs of the gated delta rule in its recurrent form: 7 per state element per token "
              "(decay, S^T k, the rank-1 write and the readout as multiply-adds at 2 each); a chunked "
              "prefill kernel executes more")
LIGHTNING_NOTE = ("model FLOPs of the linear-attention recurrence: 5 per state element per token (decay, "
                  "the k^T v write and the readout q S at 2 per multiply-add)")
CONV_NOTE = ("model FLOPs are the two gates (B*x, C*y); the convolution is counted where it runs: its Conv1d "
             "op in a prefill; at decode transformers computes it with elementwise ops (listed as uncounted)")


def _int(module, *names: str) -> int | None:
    return int_attr(module, names)


def _conv_kernel(module) -> int | None:
    """The layer's convolution width: `conv_kernel_size`, else its Conv1d's kernel."""
    kernel = _int(module, "conv_kernel_size")
    if kernel is None:
        torch = importlib.import_module("torch")
        conv = next((m for m in module.children() if isinstance(m, torch.nn.Conv1d)), None)
        kernel = conv.kernel_size[0] if conv is not None else None
    return kernel


def _deltanet(module):
    kernel = _conv_kernel(module) or 1
    hv, hk = _int(module, "num_v_heads"), _int(module, "num_k_heads")
    dk, dv = _int(module, "head_k_dim"), _int(module, "head_v_dim")
    mode = None
    if None in (hv, hk, dk, dv):  # Kimi-Linear: one head count and size for q, k and v
        heads, dim = _int(module, "num_heads"), _int(module, "head_dim")
        if heads is None or dim is None:
            return None
        hv = hk = heads
        dk = dv = dim
        mode = "kda"  # a per-channel forget gate (d_k exponentials per head)
    conv = _int(module, "conv_dim") or 2 * hk * dk + hv * dv
    gate = hv * dk if mode else hv  # the decay's exponentials: per channel (KDA) or per head
    counts = StateCounts(state_elements=hv * dk * dv, conv_elements=conv * (kernel - 1),
                         flops_per_token=7 * hv * dk * dv + 2 * hv * dv + gate,
                         io_per_token=2 * hk * dk + 2 * hv * dv + hv + gate)
    spec = state_spec(DELTANET, hv, hk, dk, dv, counts, d_conv=kernel, conv_channels=conv, notes=(DELTA_NOTE,))
    return spec if mode is None else replace(spec, mode=mode)


def _lightning(module):
    heads = _int(module, "num_attention_heads", "num_heads")
    dim = _int(module, "head_dim")
    if heads is None or dim is None:
        return None
    counts = StateCounts(state_elements=heads * dim * dim, conv_elements=0, flops_per_token=5 * heads * dim * dim,
                         io_per_token=4 * heads * dim)
    return state_spec(LIGHTNING, heads, heads, dim, dim, counts, notes=(LIGHTNING_NOTE,))


def _short_conv(module):
    kernel = _conv_kernel(module)
    torch = importlib.import_module("torch")
    conv = next((m for m in module.children() if isinstance(m, torch.nn.Conv1d)), None)
    if kernel is None or conv is None:
        return None
    channels = conv.in_channels
    counts = StateCounts(state_elements=0, conv_elements=channels * (kernel - 1), flops_per_token=2 * channels,
                         io_per_token=4 * channels)
    return state_spec(SHORT_CONV, channels, channels, 1, 1, counts, d_conv=kernel, conv_channels=channels,
                      notes=(CONV_NOTE,))


def recognise(module):
    """The spec of a linear-attention or short-convolution module, or None; its state at the shapes
    and dtypes the code keeps where the module declares them (`with_kept_state`)."""
    name = type(module).__name__
    spec = None
    if "Delta" in name:
        spec = _deltanet(module)
    elif "Lightning" in name:
        spec = _lightning(module)
    elif "ShortConv" in name:
        spec = _short_conv(module)
    return with_kept_state(spec, module) if spec is not None else None


@hookimpl
def rooflinekit_mixer_sites(model):
    return [path for path, module in model.named_modules() if recognise(module) is not None]


@hookimpl
def rooflinekit_attention_spec(module, path, call):
    return recognise(module)
