"""Built-in plugin: selective state-space layers (Mamba, Mamba-2), alone or in hybrids.

Recognises a module declaring `ssm_state_size`, `conv_kernel_size` and `intermediate_size` (as
transformers' Mamba, FalconMamba, Jamba, Zamba mixers do: arch "mamba"), and with `num_heads` and
`n_groups` as well the Mamba-2 form (Mamba2, Bamba, Nemotron-H, GraniteMoeHybrid, Zamba2,
Falcon-H1: arch "mamba2"), and Griffin's RG-LRU block (RecurrentGemma's recurrent block, with
`lru_width` and `conv1d_width`: arch "rglru"). The layer's cache is a fixed state per sequence, not a per-token K/V
cache (`rooflinekit.plugin.state_cost`):

- mamba: the SSM state d_inner x d_state, and the convolution state (d_conv - 1) x d_inner;
- mamba2: heads x head_dim x d_state (head_dim = d_inner / heads), and the convolution state
  (d_conv - 1) x (d_inner + 2 x groups x d_state) (x, B and C are convolved);
- rglru: the recurrent state, one per channel of the LRU width, in float32 (as the model keeps it),
  and the convolution state (conv1d_width - 1) x width.

Model FLOPs count the recurrence as its recurrent form computes it, 2 per multiply-add and 1 per
other arithmetic op, per state element and token: Mamba 7 (dt*A, exp, decay, dt*x*B, add, C.h
as a multiply-add) plus 3 per channel (dt*x, the D skip); Mamba-2 5 (decay, x*B write, C.h) plus 3
per channel and 2 per head (exp(dt*A)); RG-LRU 12 per channel (the gate a = exp(-8 r softplus(L)),
sqrt(1 - a^2), the gated input and a*h + x) plus 1 for the output gate. Projections and the
convolution are counted where they run.
"""

from __future__ import annotations

from rooflinekit.plugin import StateCounts, hookimpl, int_attr, state_spec, with_kept_state

MAMBA, MAMBA2, RGLRU = "mamba", "mamba2", "rglru"
PROVIDES = (MAMBA, MAMBA2, RGLRU)

FLOPS_NOTE = ("model FLOPs of the selective scan in its recurrent form (2 per multiply-add, 1 per other "
              "op: {per} per state element per token); projections and the convolution counted where "
              "they run")


def _int(module, name: str) -> int | None:
    return int_attr(module, (name,))


def _rglru(module):
    """The spec of a Griffin recurrent block (RG-LRU with its convolution), or None."""
    width, kernel = _int(module, "lru_width"), _int(module, "conv1d_width")
    if width is None or kernel is None:
        return None
    return state_spec(
        RGLRU, width, width, 1, 1,
        StateCounts(state_elements=width, conv_elements=width * (kernel - 1), flops_per_token=13 * width,
                    io_per_token=5 * width, state_itemsize=4),
        lru_width=width, d_conv=kernel,
        notes=("RG-LRU state in float32 as the model keeps it; model FLOPs 12 per channel per token for the "
               "recurrence and its gate, 1 for the output gate",),
    )


def recognise(module):
    """The spec of a Mamba, Mamba-2 or RG-LRU mixer module, or None; its state at the shapes and
    dtypes the code keeps where the module declares them (`with_kept_state`)."""
    spec = _recognise(module)
    return with_kept_state(spec, module) if spec is not None else None


def _recognise(module):
    if hasattr(module, "lru_width"):
        return _rglru(module)
    state, kernel, inner = (_int(module, n) for n in ("ssm_state_size", "conv_kernel_size", "intermediate_size"))
    if state is None or kernel is None or inner is None:
        return None
    heads, groups = _int(module, "num_heads"), _int(module, "n_groups")
    if heads is not None and groups is not None and inner % heads == 0:
        p = inner // heads  # the per-head width the state holds (d_inner / heads)
        conv = _int(module, "conv_dim") or inner + 2 * groups * state
        return state_spec(
            MAMBA2, heads, groups, state, p,
            StateCounts(state_elements=heads * p * state, conv_elements=conv * (kernel - 1),
                        flops_per_token=heads * (5 * p * state + 3 * p + 2),
                        io_per_token=3 * heads * p + heads + 2 * groups * state),
            d_inner=inner, d_state=state, d_conv=kernel, conv_channels=conv, n_groups=groups,
            notes=(FLOPS_NOTE.format(per=5),),
        )
    groups = _int(module, "n_mamba_heads") or 1  # Zamba: B and C per head
    return state_spec(
        MAMBA, inner, groups, state, 1,
        StateCounts(state_elements=inner * state, conv_elements=inner * (kernel - 1),
                    flops_per_token=7 * inner * state + 3 * inner, io_per_token=4 * inner + 2 * groups * state),
        d_inner=inner, d_state=state, d_conv=kernel, conv_channels=inner, n_heads=groups,
        notes=(FLOPS_NOTE.format(per=7),),
    )


#: Attributes one of which a mixer module holds as a plain int (a cheap filter before `recognise`).
MARKERS = ("ssm_state_size", "lru_width")


@hookimpl
def rooflinekit_mixer_sites(model):
    return [path for path, module in model.named_modules()
            if any(m in vars(module) for m in MARKERS) and recognise(module) is not None]


@hookimpl
def rooflinekit_attention_spec(module, path, call):
    return recognise(module)
