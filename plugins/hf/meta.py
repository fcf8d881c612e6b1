"""transformers models on the meta device: the values their forward reads from tensors, given as
Python numbers the workload already knows.

A meta tensor holds no data, so code that reads one (`.item()`, `int(t)`, `.tolist()`, a tensor
used as a size) fails there. transformers' models read such values from a few places that the
workload fixes in advance; each is answered here from the workload instead:

- the cache length: a StaticCache layer keeps it in a tensor (`cumulative_length`) that OPT,
  BART and their kin turn into sizes (`torch.ones(batch, past + new)`). Here each such layer
  answers `get_seq_length()` with a Python count: the positions the loader wrote (`past`) plus
  those written since. Assumption: every sequence of the batch holds the same `past` positions
  (no padding), as the workload defines them.

- padding masks: a model that makes its own all-ones mask (BART's decoder, RoFormer, and others)
  has transformers' mask code read it to decide whether SDPA can run without a mask (`is_causal`,
  or no mask for bidirectional attention). While the model's forward runs (`answer_on_meta`), a
  meta padding mask is given to that decision as None: the loader passes no mask, so any mask is
  the model's own, without padding (the same assumption). Likewise positions are not searched
  for packed sequences: the loader's positions are one `arange` per sequence.

- value checks (`torch_compilable_check`, e.g. ProphetNet's "positions must be 0..n-1", and
  torch.distributions' argument checks, Gemma-3n's `Normal(0, 1)`) are off on meta, as
  transformers' own TRANSFORMERS_DISABLE_TORCH_CHECK switch does: a check only raises.
- the padding warning of transformers' encoders (`warn_if_padding_and_no_attention_mask`) reads
  the input ids; with no padding by construction it has nothing to say, and is skipped.

Its patches of transformers and torch for a block are `rooflinekit.plugin`'s, each put back as
found (the one name it imports from rooflinekit).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import torch

from rooflinekit.plugin import environment, setting, swapped

from .values import KnownValues

#: transformers' switch for its `torch_compilable_check` value checks.
CHECK_VARIABLE = "TRANSFORMERS_DISABLE_TORCH_CHECK"
#: The note a source adds when a cache length was answered from the workload.
MASK_NOTE = ("meta device: a padding mask the model makes for itself is taken as all ones (no padding) where "
             "transformers' mask code would read its values")
PACKING_NOTE = ("meta device: positions are taken as one sequence per row (no packed sequences) where "
                "transformers' mask code would read them")
KNOWN_LENGTH_NOTE = ("meta device: cache lengths are answered from the workload (every sequence holds the same "
                     "earlier positions, no padding) where transformers would read them from a tensor")


def _layers(cache: Any) -> list:
    """The cache layers of a transformers Cache, an EncoderDecoderCache's two caches included."""
    found = []
    for part in (cache, getattr(cache, "self_attention_cache", None), getattr(cache, "cross_attention_cache", None)):
        found.extend(getattr(part, "layers", None) or ())
    return found


def _counted_update(layer: Any, update):
    """`update` that adds the new positions to the layer's Python count first."""

    def counted(key_states, value_states, *args, **kwargs):
        layer._rooflinekit_length += key_states.shape[-2]
        return update(key_states, value_states, *args, **kwargs)

    return counted


def known_lengths(cache: Any, past: int, notes: list[str]) -> None:
    """Make every layer whose length is a meta tensor answer `get_seq_length()` with a Python int
    (`past`, then counting what `update` writes); the first answer adds KNOWN_LENGTH_NOTE to `notes`."""

    def seq_length(layer) -> int:
        if KNOWN_LENGTH_NOTE not in notes:
            notes.append(KNOWN_LENGTH_NOTE)
        return layer._rooflinekit_length

    for layer in _layers(cache):
        length = getattr(layer, "cumulative_length", None)
        if not (isinstance(length, torch.Tensor) and length.is_meta) or hasattr(layer, "_rooflinekit_length"):
            continue
        layer._rooflinekit_length = past if getattr(layer, "is_initialized", True) else 0
        layer.get_seq_length = types.MethodType(seq_length, layer)
        layer.update = _counted_update(layer, layer.update)


#: transformers' mask helpers that read a padding mask (their first argument) to decide whether
#: SDPA can run without one: a meta mask is passed to them as None (no padding).
PADDING_DECISIONS = ("_ignore_causal_mask_sdpa", "_ignore_bidirectional_mask_sdpa")


def _without_meta_padding(original, notes: list[str]):
    @functools.wraps(original)
    def decide(padding_mask, *args, **kwargs):
        if isinstance(padding_mask, torch.Tensor) and padding_mask.is_meta:
            _note(notes, MASK_NOTE)
            padding_mask = None
        return original(padding_mask, *args, **kwargs)

    return decide


def _without_meta_packing(original, notes: list[str]):
    @functools.wraps(original)
    def find(position_ids, *args, **kwargs):
        if isinstance(position_ids, torch.Tensor) and position_ids.is_meta:
            _note(notes, PACKING_NOTE)
            return None  # one sequence per row, as the loader's positions are
        return original(position_ids, *args, **kwargs)

    return find


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


@contextmanager
def answer_on_meta(notes: list[str]) -> Iterator[None]:
    """While it is open, transformers' mask helpers take a meta padding mask as no padding and meta
    positions as one sequence per row (notes say so when they are asked)."""
    from transformers import masking_utils

    with ExitStack() as patches:
        for name in PADDING_DECISIONS + ("find_packed_sequence_indices",):
            original = getattr(masking_utils, name, None)
            if original is None:
                continue
            wrap = _without_meta_packing if name == "find_packed_sequence_indices" else _without_meta_padding
            patches.enter_context(swapped(masking_utils, name, wrap(original, notes)))
        yield


@contextmanager
def unchecked_values() -> Iterator[None]:
    """transformers' value checks (`torch_compilable_check`: ProphetNet's positions) off while it is
    open, as its TRANSFORMERS_DISABLE_TORCH_CHECK does, and torch.distributions' argument checks
    (Gemma-3n's Normal(0, 1)): on meta there are no values to check, and a check only raises, it
    changes no count."""
    distributions = torch.distributions.Distribution
    with (environment(CHECK_VARIABLE, "1"),
          # Gemma-3n's Normal(0, 1): its scale > 0 check
          setting(lambda: distributions._validate_args, distributions.set_default_validate_args, False)):
        yield


def meta_forward(model: torch.nn.Module, notes: list[str]) -> None:
    """Run `model`'s forward with `answer_on_meta` in effect, and on meta without transformers'
    value checks and with the values the inputs determine answered (`values.KnownValues`) (an
    instance attribute: the class and other instances are untouched; the signature is the
    forward's own)."""
    forward = model.forward

    @functools.wraps(forward)
    def wrapped(*args, **kwargs):
        on_meta = next((p.is_meta for p in model.parameters()), False)
        with answer_on_meta(notes), (unchecked_values() if on_meta else nullcontext()), \
                (KnownValues(notes) if on_meta else nullcontext()):
            return forward(*args, **kwargs)

    model.forward = wrapped
    for module in model.modules():
        # a warning's check (`pad_token_id in input_ids[:, [-1, 0]]`) reads the ids: the loader
        # passes no padding, so there is nothing to warn about
        if callable(getattr(module, "warn_if_padding_and_no_attention_mask", None)):
            module.warn_if_padding_and_no_attention_mask = _no_padding_warning


def _no_padding_warning(*args, **kwargs) -> None:
    return None
