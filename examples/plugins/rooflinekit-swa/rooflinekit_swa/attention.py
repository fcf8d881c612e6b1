"""Sliding windows, overridden: a what-if window for every attention layer, ahead of the built-in.

rooflinekit (0.2+) recognises sliding windows itself: its built-in `sliding_window` plugin answers
the `rooflinekit_attention_window` hook from module attributes (``sliding_window``,
``window_size``, ...), a transformers ``config`` (``layer_types``, ``use_sliding_window``, ...)
and banded masks, for layers of any architecture. This plugin shows how a third party *overrides*
such a built-in answer: it implements the same hook with ``tryfirst=True``, so pluggy asks it
first, and whatever it returns (other than None) is the answer.

What it answers comes from the environment, a what-if lever for any model:

  * ``ROOFLINEKIT_SWA_WINDOW=N`` (N > 0): every recognised attention layer attends a window of N
    positions ("what would this model cost with a 1024 window?"); the KV minimum of a decode
    step becomes ``B * min(context, N) * cache_bytes_per_token``;
  * ``ROOFLINEKIT_SWA_WINDOW=0`` (or ``full``): every layer attends fully, windows the model
    declares ignored ("what do Mistral's windows save?"); returning 0 stops the built-in;
  * unset or empty: None, and the built-in answers as usual.

A layer whose spec already carries a window (set by its recognising plugin) is never asked.
"""

from __future__ import annotations

import os

from rooflinekit.plugin import AttentionWindow, UserError, hookimpl

PROVIDES = ("what-if sliding windows (ROOFLINEKIT_SWA_WINDOW)",)
ENV = "ROOFLINEKIT_SWA_WINDOW"


def what_if_window() -> int | None:
    """The window ROOFLINEKIT_SWA_WINDOW asks for: N > 0, 0 for full attention, None when unset."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return None
    if value in ("0", "full", "none", "off"):
        return 0
    try:
        window = int(value)
    except ValueError:
        raise UserError(f"{ENV}={value!r}: give a window in positions (an int), or 0/full") from None
    if window < 0:
        raise UserError(f"{ENV}={window}: a window is at least 1 position (0/full: full attention)")
    return window


@hookimpl(tryfirst=True)
def rooflinekit_attention_window(module, path, call, spec):
    window = what_if_window()
    if window is None:
        return None  # no override: the built-in `sliding_window` plugin answers
    if window == 0:
        return 0  # full attention, whatever the model declares
    return AttentionWindow(window=window, notes=(
        f"what-if sliding window of {window} positions ({ENV}, rooflinekit-swa): overrides any "
        "window the model declares",))
