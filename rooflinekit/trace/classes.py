"""Kernel classes: one regular expression per class over kernel names, one over the names of the ops
that launch them, first match wins. A kernel no pattern names is `unknown` and is listed as such."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

UNKNOWN = "unknown"


@dataclass(frozen=True)
class KernelClass:
    """A class with the kernel names and launching-op names it takes."""

    name: str
    kernel: re.Pattern
    op: re.Pattern | None = None


def _re(text: str) -> re.Pattern:
    return re.compile(text, re.IGNORECASE)


#: In the order they are tried: the specific before the general (a cuDNN convolution with a fused
#: ReLU is a convolution, an embedding backward with a fused Adagrad update is an embedding).
CLASSES: tuple[KernelClass, ...] = (
    KernelClass("communication", _re(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
                                     r"sendrecv|cross_device_reduce"),
                _re(r"^nccl:|c10d|record_param_comms|all_reduce|all_gather|reduce_scatter|broadcast")),
    KernelClass("memcpy", _re(r"^memcpy|\bmemcpy\b")),
    KernelClass("memset", _re(r"^memset|\bmemset\b")),
    KernelClass("triton", _re(r"^triton_|^triton\b")),
    KernelClass("attention", _re(r"flash|fmha|attention|sdpa|_attn_|mha_|paged_?attention|cutlass.*mha"),
                _re(r"attention|sdpa|flash")),
    KernelClass("embedding", _re(r"embedding|embs|embed|bounds_check_indices|linearize_index|"
                                 r"permute_(2d|1d|indices|lengths|data|sparse)|recat_copy|index_select|"
                                 r"indexselect|index_put|indexing_backward|gather|scatter|jagged|dense_representation|lookup"),
                _re(r"embedding|index|gather|scatter|permute_|jagged|fbgemm")),
    KernelClass("optimizer", _re(r"multi_tensor_apply|foreach|adam|adagrad|\blamb\b|lamb_|sgd|momentum|optimizer"),
                _re(r"optimizer|_foreach|adam|sgd")),
    KernelClass("convolution", _re(r"conv|scudnn|winograd|dgrad|wgrad|fprop|implicit_?gemm|im2col|col2im|"
                                   r"depthwise|cudnn::ops::|cask_cudnn|nchwtonhwc|nhwctonchw"),
                _re(r"conv")),
    KernelClass("gemm", _re(r"(?<!fb)gemm|gemv|cutlass|cublas|^Cijk_|matmul|splitkreduce|dot_kernel|"
                            r"epilogue::|xmma|nvjet|wgmma|hgmma|tensorop"),
                _re(r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|_scaled_mm)\b")),
    KernelClass("softmax", _re(r"softmax"), _re(r"softmax")),
    KernelClass("reduction", _re(r"reduce|norm|bn_|welford|gammabeta|cub::devicereduce|pool|"
                                 r"mean|moments|_sum_|sum_kernel|argmax|topk|cumsum|scan"),
                _re(r"norm|sum|mean|max|min|amax|argmax|topk|pool|cumsum|reduce|mse_loss|loss")),
    KernelClass("elementwise", _re(r"elementwise|vectorized|unrolled|functor|fill|copy|cat_?array|clamp|"
                                   r"relu|gelu|silu|sigmoid|tanh|threshold|dropout|where|masked|quantize|"
                                   r"to_float|hfp8|fp8|cast|unary|binary|pointwise|distribution"),
                _re(r"aten::(add|sub|mul|div|copy_|to|_to_copy|fill_|zero_|relu|gelu|silu|sigmoid|tanh|"
                    r"threshold|clamp|where|cat|stack|dropout|native_dropout|exp|log|neg|pow|sqrt|rsqrt|"
                    r"abs|sign|masked_fill|lerp|addcmul|addcdiv|clone|contiguous)")),
    KernelClass("other", _re(r"sort|radix|unique|nonzero|arange|randperm|histogram|compact|"
                             r"cub::|thrust::|segment|range|rng|curand|philox"),
                _re(r"sort|unique|nonzero|arange|randperm|rand|bucketize|histc")),
)

NAMES: tuple[str, ...] = tuple(c.name for c in CLASSES) + (UNKNOWN,)


@lru_cache(maxsize=4096)
def class_of_kernel(name: str) -> str:
    """The class a kernel's name belongs to, or `unknown`."""
    for cls in CLASSES:
        if cls.kernel.search(name):
            return cls.name
    return UNKNOWN


@lru_cache(maxsize=4096)
def class_of_op(name: str) -> str:
    """The class an op's name says its kernels belong to, or `unknown`."""
    for cls in CLASSES:
        if cls.op is not None and cls.op.search(name):
            return cls.name
    return UNKNOWN


def classify(kernel: str, ops: tuple[str, ...] = ()) -> str:
    """A kernel's class: by its own name, else by the names of the ops that launched it, innermost
    first (a kernel named after nothing known, launched by aten::mm, is a gemm)."""
    found = class_of_kernel(kernel)
    for op in ops:
        if found != UNKNOWN:
            break
        found = class_of_op(op)
    return found
