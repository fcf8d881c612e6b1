"""Differences between torch releases, in one place; each entry names the version that needs it."""

from __future__ import annotations

import gc
import inspect
import sys
import types
from functools import cache

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn.modules import module as nn_module
from torch.utils import flop_counter

TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])

#: The CPU flash-attention kernel that CPU SDPA dispatches to (torch >= 2.3); torch's flop
#: registry has no entry for it, so torch 2.13 counts 0 FLOPs for CPU SDPA.
CPU_FLASH_SDPA = "aten._scaled_dot_product_flash_attention_for_cpu"


#: Before torch 2.8, destroying a gloo process group holds the GIL while it joins the group's
#: worker threads, and a worker that is still dropping the last reference to a tensor of a
#: collective that just finished needs the GIL to do so: destroy_process_group right after a
#: collective can deadlock (seen on 2.5.1 within a few dozen one-rank groups). 2.8 releases the
#: GIL in the destructor.
GLOO_TEARDOWN_NEEDS_IDLE_WORKERS = TORCH_VERSION < (2, 8)


@cache
def torch_flop_registry() -> dict:
    """torch.utils.flop_counter.flop_registry (present since torch 2.1)."""

    return dict(getattr(flop_counter, "flop_registry", {}))


@cache
def sdpa_accepts_enable_gqa() -> bool:
    """F.scaled_dot_product_attention(enable_gqa=...) exists from torch 2.5."""
    return TORCH_VERSION >= (2, 5)


def register_global_forward_hooks(pre, post):
    """Global module forward hooks; `always_call=True` (torch >= 2.1) runs `post` on exceptions too."""

    h1 = nn_module.register_module_forward_pre_hook(pre)
    params = inspect.signature(nn_module.register_module_forward_hook).parameters
    if "always_call" in params:
        h2 = nn_module.register_module_forward_hook(post, always_call=True)
    else:  # pragma: no cover - torch < 2.1 is unsupported; kept for clarity
        h2 = nn_module.register_module_forward_hook(post)
    return h1, h2


def storage_ref(tensor: torch.Tensor):
    """A weak reference to a tensor's storage (StorageWeakRef moved around; stable since 2.0)."""

    return StorageWeakRef(tensor.untyped_storage())


def storage_expired(ref) -> bool:
    """Whether the storage a `storage_ref` points to is gone: StorageWeakRef.expired() without its
    detour through TypedStorage (same answer, a fraction of the cost on the capture's hot path)."""

    return torch.UntypedStorage._expired(ref.cdata)


def force_eager():
    """A context in which torch.compile compiles nothing: torch.compiler.set_stance("force_eager")
    (torch >= 2.6); None where torch has no stances, or has not loaded its compiler (loading it
    takes a second, and nothing can have been compiled without it)."""

    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None or not dynamo_loaded():
        return None
    return set_stance("force_eager")



_defer_dynamo = False
_dynamo_scans = 0


def defer_dynamo_import() -> None:
    """For a command-line process: let torch's own meta kernels and refs run without importing
    torch._dynamo (see mark_not_compiled). Never for a library call inside the user's process."""
    global _defer_dynamo
    _defer_dynamo = True
    mark_not_compiled()  # those torch made at import, before the model is built


def dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


def mark_not_compiled() -> None:
    """torch wraps its Python meta kernels and elementwise refs in `torch._disable_dynamo`, which
    imports torch._dynamo (over a second) at the first call only to mark them as never compiled.
    In a process that has not loaded dynamo nothing is being compiled: once per process (after
    defer_dynamo_import), give every such function the mark it would get, itself, so the import
    is not needed. A later compile in the same process may trace into them: command line only.
    Twice per process at most (at defer_dynamo_import, and at the first capture for those made
    since): finding them costs about 20 ms."""
    global _dynamo_scans
    if not _defer_dynamo or _dynamo_scans >= 2 or dynamo_loaded():
        return
    _dynamo_scans += 1
    wrap = getattr(torch, "_disable_dynamo", None)
    if wrap is None:
        return
    code = wrap(lambda: None).__code__  # the wrapper's own code: every wrapped function shares it
    for obj in gc.get_referrers(code):  # the functions made from it (a C walk: a third of a Python one)
        if type(obj) is types.FunctionType and obj.__code__ is code and obj.__closure__:
            cells = dict(zip(code.co_freevars, obj.__closure__, strict=True))
            fn = cells["fn"].cell_contents if "fn" in cells else None
            if fn is not None and getattr(fn, "__dynamo_disable", None) is None:
                fn.__dynamo_disable = fn
