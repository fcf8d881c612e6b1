"""Keys attended: the cached positions one attention step reads and the query-key pairs it scores.

Pure arithmetic, shared by every architecture's cost: which keys a query sees (full, causal,
sliding window, chunked) does not depend on how the keys are stored (per-head K/V, a latent).

The step's queries are the last `q_len` of `context` positions (decode: one query at position
`context - 1`; prefill from position 0: `q_len == context`).

- full attention: every query sees every key up to the context (causal: up to itself);
- sliding window `w`: a query at position p sees positions p - w + 1 .. p (w keys, itself included,
  as transformers' `sliding_window_overlay` and Mistral's reference code);
- chunked attention `c` (Llama 4's `attention_chunk_size`): a query at position p sees the keys of
  its own chunk, positions (p // c) * c .. p; chunks start at position 0 (no left padding).

A causal step's queries see the keys up to their own positions (the mask aligned to the bottom
right: multi-token decode's new token i of q_len sees context - q_len + i + 1 keys). Prefill from
position 0 (`q_len == context`) is the same triangle as torch's top-left `is_causal=True`, so the
counts agree with the executed FLOPs of a fused causal call there (`causal_pairs` is torch's
convention for any shape, which executed counts use).
"""

from __future__ import annotations


def _active(limit: int | None) -> int:
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else 0


def positions_attended(q_len: int, context: int, window: int | None = None,
                       chunk: int | None = None) -> int:
    """Distinct cached positions some query of the step sees: the K/V read once at minimum.

    A window: the last ``q_len + window - 1`` positions (decode: the window). A chunk: from the
    start of the first query's chunk (decode: ``(context - 1) % chunk + 1`` positions).
    """
    first = max(0, context - q_len)  # position of the step's first query
    lowest = 0
    w, c = _active(window), _active(chunk)
    if w:
        lowest = max(lowest, first - w + 1)
    if c:
        lowest = max(lowest, (first // c) * c)
    return min(context, context - lowest)


def causal_pairs(q_len: int, kv_len: int, is_causal: bool) -> int:
    """Query-key pairs of full attention: all, or the causal (top-left aligned, as torch) triangle."""
    if not is_causal:
        return q_len * kv_len
    full_rows = max(0, q_len - kv_len)  # rows that see every key
    tri = min(q_len, kv_len)
    return tri * (tri + 1) // 2 + full_rows * kv_len


def _capped_sum(k: int, w: int) -> int:
    """sum of min(w, j) for j = 1 .. k (w = 0: no cap)."""
    if not w or k <= w:
        return k * (k + 1) // 2
    return w * (w + 1) // 2 + (k - w) * w


def pairs_attended(q_len: int, context: int, is_causal: bool, window: int | None = None,
                   chunk: int | None = None) -> int:
    """Query-key pairs scored by the step (model FLOPs are proportional to them).

    The queries are the last `q_len` of the `context` positions. A window or chunk at or above the
    context changes nothing. A window: each query sees at most `window` of the keys the full
    pattern shows it. A chunk: each query sees the keys of its own chunk (up to itself when causal,
    to the chunk's end or the context otherwise). Causal without either: a query at position p
    sees p + 1 keys (multi-token decode: q_len * context - q_len * (q_len - 1) / 2 pairs).
    """
    w, c = _active(window), _active(chunk)
    w = w if w and w < context else 0
    c = c if c and c < context else 0
    first = max(0, context - q_len)  # queries at positions first .. context - 1
    if not c:
        if not is_causal:
            return q_len * (w or context)
        if q_len > context:  # more queries than positions: torch's top-left rows past the keys see all
            rows = context
            return _capped_sum(rows, w) + (q_len - rows) * (w or context)
        # a query at position p sees min(w, p + 1) keys (w = 0: p + 1)
        return _capped_sum(context, w) - _capped_sum(first, w)
    if is_causal:
        # a query at p sees (p % c) + 1 keys of its chunk: sum over whole chunks and a remainder

        def upto(n: int) -> int:  # pairs of the queries at positions 0 .. n - 1
            return (n // c) * _capped_sum(c, w) + _capped_sum(n % c, w)

        return upto(context) - upto(first)
    total = 0
    for start in range((first // c) * c, context, c):  # every query sees its whole chunk
        size = min(context, start + c) - start
        rows = min(context, start + c) - max(first, start)
        total += rows * (min(size, w) if w else size)
    return total
