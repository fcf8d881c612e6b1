"""The module model of BLT's entropy patcher (`BltPatcher`), whose patch boundaries depend on values.

BLT groups bytes into patches where its small entropy model is unsure of the next byte: the
patcher runs that model (a transformer of its own) over the bytes, then starts a patch wherever
the entropy passes a threshold (`entropies > threshold`, then a boolean index): values of the
model's own output, which the meta device does not hold. `EntropyPatches` runs the patcher's
forward as written with its thresholding off (`patch_size=None`: its layers, head and entropy are
counted as they run) and gives the patch lengths under a stated assumption: a patch starts every
`patch_size` bytes (the config's average patch size) after the code's two first patches, so S bytes
make 2 + len(range(1 + p, S, p)) patches. Only their number shapes the counts downstream (the
global transformer runs over the patches); the lengths are given as values (`values.declare`).

Imports rooflinekit.plugin (for `ModuleModel`), unlike the loader's modules; `rooflinekit_plugins.hf`
imports it when its `rooflinekit_module_model` hook first meets a patcher.
"""

from __future__ import annotations

import torch

from rooflinekit.plugin import ModuleModel

from .values import declare

#: Patchers modelled, by class name.
PATCHERS = ("BltPatcher",)


def patch_lengths(sequence: int, patch_size: int) -> list[int]:
    """Patch lengths of `sequence` bytes with a patch starting at 0, 1 and every `patch_size` bytes
    after 1 (BLT's code always starts patches at tokens 0 and 1; S=1 gives [1, 0], as its code does)."""
    starts = [0, 1, *range(1 + patch_size, sequence, patch_size)]
    ends = [s - 1 for s in starts[1:]] + [sequence - 1]
    return [end - start + 1 for start, end in zip(starts, ends, strict=True)]


class EntropyPatches(ModuleModel):
    """BltPatcher under fixed-size patches (module docstring)."""

    def __init__(self, patch_size: int):
        self.patch_size = patch_size
        self.assumption = (f"BLT's entropy patcher: its entropy model runs as written; the patch boundaries, which "
                           f"depend on the entropies it computes, are taken every {patch_size} bytes (the config's "
                           f"patch_size) after the code's two first patches: S bytes make "
                           f"2 + len(range({1 + patch_size}, S, {patch_size})) patches")

    def forward(self, module, path, args, kwargs):
        kwargs = dict(kwargs)
        size = kwargs.pop("patch_size", None) or self.patch_size
        kwargs.pop("threshold", None)
        entropies, _, logits = type(module).forward(module, *args, patch_size=None, **kwargs)
        batch, sequence = entropies.shape[:2]
        lengths = patch_lengths(sequence, size)

        def made() -> torch.Tensor:
            return torch.tensor([lengths] * batch, dtype=torch.long, device="cpu")

        out = torch.empty((batch, len(lengths)), dtype=torch.long, device=entropies.device)
        return entropies, declare(out, made) if out.is_meta else made().to(out.device), logits


def patcher_model(module) -> EntropyPatches | None:
    """EntropyPatches for a patcher of PATCHERS, else None."""
    if type(module).__name__ not in PATCHERS:
        return None
    size = getattr(getattr(module, "config", None), "patch_size", None)
    parent_size = size if isinstance(size, int) and size > 0 else 4
    return EntropyPatches(parent_size)
