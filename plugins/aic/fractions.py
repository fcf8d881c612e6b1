"""Achievable fractions from measured latencies: time at the entry's datasheet peak (or bandwidth)
over AIConfigurator's measured time, at shapes stated here and named in every value's source.

The FLOPs and bytes are counted as rooflinekit counts the kernel's record: a GEMM's 2MNK FLOPs and
its operands and output once each (fp8 operands, a bf16 output); attention's 2 x pairs x (E + Ev)
FLOPs per head (the causal triangle in prefill) and, in decode, its query, K and V and output once.
"""

from __future__ import annotations

from dataclasses import dataclass

#: GEMMs: N = K = 8192 (a 70B-class hidden size); decode rows (memory-bound), prefill rows (compute-bound).
GEMM_N = GEMM_K = 8192
SMALL_ROWS = (1, 2, 4, 8, 16, 32, 64, 128)
SMALL_AT = 32
LARGE_ROWS = (256, 512, 1024, 2048, 4096, 8192, 16384)
LARGE_AT = 4096
#: Attention: 64 query heads, 8 KV heads, head size 128 (Llama 3 70B on one GPU).
HEADS, KV_HEADS, HEAD_DIM = 64, 8, 128
DECODE_BATCH, DECODE_KV = 64, 4096
PREFILL_BATCH = 1
PREFILL_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
PREFILL_AT = 4096
#: Grouped expert GEMMs: DeepSeek-V3's experts (hidden 7168, intermediate 2048, 256 experts, top-8) in
#: block-scaled fp8 at 128 tokens (every expert read), split TP ways, as the published [experts] curve.
MOE_HIDDEN, MOE_INTER, MOE_TOPK, MOE_EXPERTS, MOE_TOKENS = 7168, 2048, 8, 256, 128
MOE_TPS = (8, 4, 2, 1)
#: rooflinekit's dtype -> (AIConfigurator's format name, bytes per element).
FORMATS = {"bf16": ("bfloat16", 2), "fp8": ("fp8", 1)}


@dataclass(frozen=True)
class Point:
    """One fraction and its source."""

    value: float
    source: str


@dataclass(frozen=True)
class Entry:
    """The datasheet figures a fraction is taken of, and a note said with every source."""

    peaks: dict[str, float]
    bandwidth: float
    note: str = ""


def _point(ideal_s: float, how: str, timed, label: str, what: str, note: str) -> Point:
    share = ideal_s / timed.seconds
    held = " (above 1: held at 1)" if share > 1 else ""
    text = (f"{label}, {what}: {timed.seconds * 1e3:.4g} ms measured ({timed.kind}); {how} = "
            f"{ideal_s * 1e3:.4g} ms; {ideal_s * 1e3:.4g} / {timed.seconds * 1e3:.4g} = {min(share, 1.0):.3f}{held}")
    return Point(round(min(share, 1.0), 4), text + (f" [{note}]" if note else ""))


def _peak_how(flops: float, peak: float) -> tuple[float, str]:
    return flops / peak, f"{flops:.4g} FLOP at the datasheet {peak / 1e12:.6g} TFLOP/s"


def _bytes_how(nbytes: float, bandwidth: float) -> tuple[float, str]:
    return nbytes / bandwidth, f"{nbytes / 1e6:.5g} MB at the datasheet {bandwidth / 1e12:.4g} TB/s"


def gemm_counts(m: int, dtype: str) -> tuple[float, float]:
    """(FLOPs, bytes) of an M x 8192 x 8192 GEMM in `dtype` (a bf16 output)."""
    size = FORMATS[dtype][1]
    return 2.0 * m * GEMM_N * GEMM_K, float((m * GEMM_K + GEMM_K * GEMM_N) * size + m * GEMM_N * 2)


def gemm(db, entry: Entry, m: int, dtype: str, term: str) -> Point | None:
    """The `term` ("compute" or "bandwidth") fraction of an M x 8192 x 8192 GEMM in `dtype`."""
    if dtype not in entry.peaks:
        return None
    timed = db.gemm(m, GEMM_N, GEMM_K, FORMATS[dtype][0])
    if timed is None:
        return None
    flops, nbytes = gemm_counts(m, dtype)
    ideal, how = _peak_how(flops, entry.peaks[dtype]) if term == "compute" else _bytes_how(nbytes, entry.bandwidth)
    return _point(ideal, how, timed, db.label, f"GEMM {FORMATS[dtype][0]} at M={m}, N={GEMM_N}, K={GEMM_K}",
                  entry.note)


def prefill_flops(length: int) -> float:
    """Causal attention FLOPs over `length` tokens: 2 x pairs x (E + Ev) per head."""
    pairs = length * (length + 1) / 2
    return 2.0 * PREFILL_BATCH * HEADS * pairs * 2 * HEAD_DIM


def prefill(db, entry: Entry, length: int, dtype: str) -> Point | None:
    """The compute fraction of causal prefill attention over `length` tokens in `dtype`."""
    if dtype not in entry.peaks:
        return None
    timed = db.prefill_attention(PREFILL_BATCH, length, HEADS, KV_HEADS, HEAD_DIM, FORMATS[dtype][0])
    if timed is None:
        return None
    ideal, how = _peak_how(prefill_flops(length), entry.peaks[dtype])
    what = (f"context attention {FORMATS[dtype][0]} at batch {PREFILL_BATCH}, {length} tokens, {HEADS} heads, "
            f"{KV_HEADS} KV heads, head size {HEAD_DIM}, causal")
    return _point(ideal, how, timed, db.label, what, entry.note)


def decode_bytes(dtype: str) -> float:
    """Decode attention's bytes: the query, the K and V caches and the output, once each."""
    size = FORMATS[dtype][1]
    cache = 2.0 * DECODE_BATCH * KV_HEADS * DECODE_KV * HEAD_DIM * size
    return cache + 2.0 * DECODE_BATCH * HEADS * HEAD_DIM * 2


def decode(db, entry: Entry, dtype: str = "bf16") -> Point | None:
    """The bandwidth fraction of decode attention over a `dtype` cache at the stated shape."""
    timed = db.decode_attention(DECODE_BATCH, DECODE_KV, HEADS, KV_HEADS, HEAD_DIM, FORMATS[dtype][0])
    if timed is None:
        return None
    ideal, how = _bytes_how(decode_bytes(dtype), entry.bandwidth)
    what = (f"generation attention at batch {DECODE_BATCH}, {DECODE_KV} cached tokens, {HEADS} heads, "
            f"{KV_HEADS} KV heads, head size {HEAD_DIM}, {FORMATS[dtype][0]} KV cache")
    return _point(ideal, how, timed, db.label, what, entry.note)


def moe_touched() -> float:
    """Distinct experts MOE_TOKENS tokens choosing MOE_TOPK of MOE_EXPERTS touch under uniform routing."""
    return MOE_EXPERTS * (1 - (1 - MOE_TOPK / MOE_EXPERTS) ** MOE_TOKENS)


def experts_curve(db, entry: Entry) -> dict | None:
    """The [experts] bandwidth curve (key expert_bytes): per TP degree, the gate-up matrix's bytes and the
    fraction that, with down (half the bytes) at the next point down, prices AIConfigurator's measured
    MoE layer at the entry's bandwidth (the widest TP first, both matrices at one fraction); None where
    a TP degree is not measured."""
    at, values, sources = [], [], []
    touched, below = moe_touched(), None
    for tp in MOE_TPS:
        timed = db.moe(MOE_TOKENS, MOE_HIDDEN, MOE_INTER, MOE_TOPK, MOE_EXPERTS, tp, "fp8_block")
        if timed is None:
            return None
        down = MOE_HIDDEN * MOE_INTER / tp  # fp8: one byte per weight
        gate_up = 2 * down
        ideal = touched * (gate_up + down) / entry.bandwidth
        rest = timed.seconds - (0.0 if below is None else touched * down / (below * entry.bandwidth))
        share = touched * gate_up / (rest * entry.bandwidth) if below is not None and rest > 0 else ideal / timed.seconds
        share = min(share, 1.0)
        below = share
        at.append(int(gate_up))
        values.append(round(share, 4))
        sources.append(f"{db.label}, MoE layer fp8_block at {MOE_TOKENS} tokens, hidden {MOE_HIDDEN}, intermediate "
                       f"{MOE_INTER} / TP {tp}, {MOE_EXPERTS} experts, top-{MOE_TOPK}, balanced: "
                       f"{timed.seconds * 1e6:.5g} us measured ({timed.kind}); {touched:.1f} experts' "
                       f"{(gate_up + down) / 1e6:.4g} MB at the datasheet {entry.bandwidth / 1e12:.4g} TB/s = "
                       f"{ideal * 1e6:.5g} us; gate-up {gate_up / 1e6:.4g} MB at {share:.4f}"
                       + (f" [{entry.note}]" if entry.note else ""))
    return {"key": "expert_bytes", "at": at, "bandwidth": values, "sources": sources}
