"""The memory line of the text report: what one GPU holds, whether it fits, and by how much not."""

from __future__ import annotations

from rooflinekit.core.attention_layers import layer_names, uncounted_layers
from rooflinekit.core.report import Memory, Report
from rooflinekit.core.units import si


def memory_line(m: Memory) -> str:
    """'memory: 32.8 GB of 72 GB usable (0.9 x 80 GB): fits; max batch 13 at this context'."""
    held = (f"weights {si(m.weights_bytes, 'B')} + KV cache {si(m.kv_cache_bytes, 'B')} + activations "
            f"{si(m.activation_peak_bytes, 'B') if m.activation_peak_bytes is not None else 'not measured'}")
    who = f"per GPU of {m.gpus}" if m.gpus > 1 else "one GPU"
    if m.capacity_bytes is None or m.usable_bytes is None:
        return f"memory ({who}): {si(m.total_bytes, 'B')} ({held}); capacity unknown: fit not judged"
    usable = f"{si(m.usable_bytes, 'B')} usable ({m.fraction:g} x {si(m.capacity_bytes, 'B')})"
    batch = "" if m.max_batch is None else f"; max batch {m.max_batch:,} at this context"
    if m.fits:
        verdict = f"fits, {si(m.headroom_bytes, 'B')} to spare"
    else:
        verdict = f"DOES NOT FIT: short by {si(-(m.headroom_bytes or 0.0), 'B')}"
    return f"memory ({who}): {si(m.total_bytes, 'B')} of {usable}: {verdict} ({held}){batch}"


def memory_lines(report: Report) -> list[str]:
    """The header's memory line, where the report has a memory section."""
    if report.memory is None:
        return []
    uncounted = uncounted_layers(report)
    left_out = f"; KV cache of {layer_names(uncounted)} not counted (attention not recognised)" if uncounted else ""
    return [memory_line(report.memory) + left_out]
