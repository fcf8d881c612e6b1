"""FLOPs of ``aten._grouped_mm``, the MoE grouped matrix multiply torch's flop registry lacks.

Schema (torch 2.8+): ``_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None,
ScalarType? out_dtype=None) -> Tensor``. ``offs`` holds the cumulative end of each group along
the jagged dimension; rows (or columns) past ``offs[-1]`` are not computed. FLOPs are
2 * sum over groups of m_g * k_g * n_g:

===========  ==============================  ==========================  =====================
self         mat2                            jagged dimension            FLOPs
===========  ==============================  ==========================  =====================
[M, K]       [G, K, N]  (MoE forward)        M, split by offs            2 * offs[-1] * K * N
[G, M, K]    [G, K, N]  (batched, no offs)   none                        2 * G * M * K * N
[M, K]       [K, N]     (weight gradients)   K, split by offs            2 * M * offs[-1] * N
[G, M, K]    [K, N]                          N, split by offs            2 * M * K * offs[-1]
===========  ==============================  ==========================  =====================

On the meta device ``offs`` has no values, so ``offs[-1]`` is unknown: the formula then assumes
the groups cover the whole jagged dimension (offs[-1] == M), which holds when the caller sizes
``self`` to exactly the routed token-expert pairs (transformers' grouped_mm experts and
rooflinekit_swa.model.GroupedMoE do). With real tensors (``--device cpu`` or ``cuda``) the
formula reads offs[-1] and is exact. The per-group split does not change the total: the sum of
m_g is what counts, so expert imbalance moves no FLOPs (it moves time, which this formula does
not claim).
"""

from __future__ import annotations

from rooflinekit.plugin import hookimpl

OP = "aten._grouped_mm"
PROVIDES = ("aten._grouped_mm FLOPs",)


def _covered(offs, full: int) -> int:
    """offs[-1] when it has a value, else `full` (meta / fake tensors hold none)."""
    if offs is None or offs.numel() == 0 or offs.is_meta or type(offs).__name__ == "FakeTensor":
        return full
    return min(full, int(offs[-1]))


def grouped_mm_flops(a, b, offs=None, bias=None, out_dtype=None, *args, out=None, **kwargs) -> int:
    if a.dim() == 2 and b.dim() == 3:
        return 2 * _covered(offs, a.shape[0]) * a.shape[1] * b.shape[2]
    if a.dim() == 3 and b.dim() == 3:
        return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    if a.dim() == 2 and b.dim() == 2:
        return 2 * a.shape[0] * _covered(offs, a.shape[1]) * b.shape[1]
    if a.dim() == 3 and b.dim() == 2:
        return 2 * a.shape[1] * a.shape[2] * _covered(offs, b.shape[1])
    raise ValueError(f"grouped_mm operands must be 2D or 3D, got {a.dim()}D and {b.dim()}D")


@hookimpl
def rooflinekit_op_formulas():
    return {OP: grouped_mm_flops}
