"""Built-in plugin: RWKV's time mixing (RWKV-4, transformers' `rwkv`), a recurrence over channels.

Recognises a module with `time_decay`, `time_first` and `time_mix_key` (transformers'
RwkvSelfAttention). Its cache is a fixed state per sequence (`rooflinekit.plugin.state_cost`):
the wkv state (numerator, denominator and running maximum per channel, 3 x d_attention, kept in
float32 as the model keeps it: its exponentials overflow a 16-bit state) and the token shift (the
previous token's hidden state, d_model at the model's dtype). The channel mixing's own token shift
(d_model more per sequence) belongs to the feed-forward block and is not in this row.

Model FLOPs per token: 25 per channel for the wkv recurrence (as its recurrent form computes it, 1
per elementwise op, exponentials and maxima included), 9 per model channel for the three token-shift
mixes and 1 per channel for the receptance gate; projections are counted where they run.
"""

from __future__ import annotations

from rooflinekit.plugin import StateCounts, hookimpl, state_spec

ARCH = "rwkv"
PROVIDES = (ARCH,)

NOTE = ("wkv state (numerator, denominator, maximum per channel) in float32 as the model keeps it, plus the "
        "time-mix token shift; the channel-mix token shift ({hidden} per sequence) is the feed-forward "
        "block's, not in this row; model FLOPs: 25 per channel per token for the wkv recurrence, 9 per model "
        "channel for the token-shift mixes, 1 for the receptance gate")


def _width(param) -> int | None:
    numel = getattr(param, "numel", None)
    return int(numel()) if callable(numel) else None


def recognise(module):
    """The spec of an RWKV time-mixing module, or None."""
    if not all(hasattr(module, n) for n in ("time_decay", "time_first", "time_mix_key")):
        return None
    channels = _width(module.time_decay)  # d_attention
    hidden = _width(module.time_mix_key)  # d_model
    if not channels or not hidden:
        return None
    counts = StateCounts(state_elements=3 * channels, conv_elements=hidden,
                         flops_per_token=26 * channels + 9 * hidden, io_per_token=3 * channels + hidden,
                         state_itemsize=4)
    return state_spec(ARCH, channels, channels, 1, 1, counts, d_attention=channels, d_model=hidden,
                      notes=(NOTE.format(hidden=hidden),))


@hookimpl
def rooflinekit_mixer_sites(model):
    return [path for path, module in model.named_modules()
            if "time_decay" in getattr(module, "_parameters", {}) and recognise(module) is not None]


@hookimpl
def rooflinekit_attention_spec(module, path, call):
    return recognise(module)
