"""Capture: one forward under a dispatch mode (every aten op) and a function mode (fused attention).

Each op becomes an OpRecord with its full module path, FLOPs from the formula book, and bytes
read and written. Bytes follow the storage actually touched: views and metadata ops are free,
a broadcast (stride-0) dimension is read once, a tensor passed twice is read once, and an output
that aliases an input (in-place ops, out=) is one write, not two.

Modules:

- records: OpRecord, CaptureResult (what a capture produces), and the shape text of a record.
- forward: capture() and recording(): the hooks, modes and swaps around one forward; the
  active recorder modelled modules emit into.
- recorder: Recorder, the state of one capture; turns each op the modes see into an OpRecord.
- modes: the dispatch mode (every aten op) and the function mode (views skipped, attention and
  matmul heads seen before aten lowers them).
- schema: what an op's schema says of its operands (read, written, aliased), once per op.
- traffic: bytes an op moves (distinct views, stride-0 dims, aliases, gathers, partial writes).
- storages: serial numbers of the storages ops touch.
- matmul_heads: attention heads through matmuls and einsums, and the operand facts of a product.
- sdpa: F.scaled_dot_product_attention as one fused record, and the swap of its module name.
- modules: the model's parameter storages, their owners and names.
- liveness: what the forward allocates and when each allocation dies (activation memory).
- meta_memo: repeated pure meta calls answered from the first one's output layout.
- swap: an attribute swapped for a block and given back exactly as found.
"""

from rooflinekit.stages.capture.forward import active_recorder, call_forward, capture, recording
from rooflinekit.stages.capture.matmul_heads import distinct_heads, einsum_hint
from rooflinekit.stages.capture.recorder import Recorder
from rooflinekit.stages.capture.records import CaptureResult, OpRecord
from rooflinekit.stages.capture.schema import MATMUL_OPS
from rooflinekit.stages.capture.sdpa import SDPA_NAME, mask_keys_max
from rooflinekit.stages.capture.traffic import unique_bytes

__all__ = [
    "MATMUL_OPS", "SDPA_NAME", "CaptureResult", "OpRecord", "Recorder", "active_recorder", "call_forward",
    "capture", "distinct_heads", "einsum_hint", "mask_keys_max", "recording", "unique_bytes",
]
