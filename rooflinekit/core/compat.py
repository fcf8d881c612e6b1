"""Differences between torch releases, and the torch internals rooflinekit relies on, in one place;
each entry names the version that needs it, or the private torch name it stands for."""

from __future__ import annotations

import gc
import inspect
import sys
import types
from functools import cache

import torch
from torch._ops import OpOverload as _OpOverload
from torch.distributed import distributed_c10d
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn.modules import module as nn_module
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode

#: `DeviceContext` (torch.utils._device): the torch function mode `torch.device(...)` enters; with
#: `device_constructors()`, the functions it gives its device to. None on a torch without them.
try:
    from torch.utils._device import DeviceContext, _device_constructors
except ImportError:  # pragma: no cover - a torch without them: calls go through it as they come
    DeviceContext = None

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


# ----------------------------------------------------------------------------------------------
# torch internals with no public name: each is named once here, so a torch release that moves one
# is one change in this module. Aliases (not wrappers) where they sit on the capture's hot path.
# ----------------------------------------------------------------------------------------------

#: `TorchDispatchMode` (torch.utils._python_dispatch): the base class of a mode that sees every
#: aten op as it dispatches; torch has no public path to it.
TorchDispatchMode = _TorchDispatchMode

#: `OpOverload` (torch._ops): the type of one overload of an op (`aten.mm.default`); its `_op` is
#: the C++ callable without `__call__`'s Python frame.
OpOverload = _OpOverload

#: `torch._C.DisableTorchFunction`: a context in which no torch function mode (the workload's
#: device context, the capture's) sees the calls made inside: metadata reads, bookkeeping.
disable_torch_function = torch._C.DisableTorchFunction

#: `torch._C._DisableTorchDispatch`: a context in which no dispatch mode or tensor subclass sees
#: the ops run inside (ops a mode runs for itself, views it need not record).
disable_torch_dispatch = torch._C._DisableTorchDispatch

#: `torch._C._len_torch_dispatch_stack`: how many dispatch modes are active.
dispatch_mode_depth = torch._C._len_torch_dispatch_stack

#: The torch function mode stack (torch._C): its depth, the mode at a position, and popping and
#: pushing the top one, to run a call past a mode that would pass it on unchanged.
function_mode_depth = torch._C._len_torch_function_stack
function_mode_at = torch._C._get_function_stack_at
pop_function_mode = torch._C._pop_torch_function_stack
push_function_mode = torch._C._push_on_torch_function_stack

#: `torch._C._storage_Use_Count`: the reference count of a storage by its `_cdata`, the liveness
#: test on meta (a meta storage has no memory whose release a weak reference could see).
storage_use_count = torch._C._storage_Use_Count

#: `torch.UntypedStorage._expired`: whether a storage is gone, by the `cdata` of a StorageWeakRef.
untyped_storage_expired = torch.UntypedStorage._expired


try:  # a C++ range: no op is dispatched, so no dispatch mode sees it (torch >= 2.2)
    #: `torch._C._profiler._RecordFunctionFast`: a profiler range by name (record_function before 2.2).
    RecordFunctionFast = torch._C._profiler._RecordFunctionFast
except AttributeError:  # pragma: no cover - older torch
    RecordFunctionFast = torch.autograd.profiler.record_function


def device_constructors() -> set:
    """The functions a `torch.device(...)` context gives its device to (torch.utils._device's
    `_device_constructors`); empty on a torch without them."""
    return _device_constructors() if DeviceContext is not None else set()


def fake_mode_active() -> bool:
    """True inside a FakeTensorMode (DTensor's sharding propagation runs ops on fake tensors):
    torch._C._get_dispatch_mode(_TorchDispatchModeKey.FAKE); False on a torch without them."""
    getter = getattr(torch._C, "_get_dispatch_mode", None)
    key = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), "FAKE", None)
    if getter is None or key is None:
        return False
    return getter(key) is not None


def resolve_process_group(name: str):
    """The process group of a group name, as functional collectives carry it (c10d_functional ops
    name their group): torch.distributed.distributed_c10d._resolve_process_group."""
    return distributed_c10d._resolve_process_group(name)


def default_store():
    """The default process group's key-value store, which the ranks of a distributed run share:
    torch.distributed.distributed_c10d._get_default_store."""
    return distributed_c10d._get_default_store()


def c10d_has_meta_kernels() -> bool:
    """Whether this torch has meta kernels for c10d collectives (a meta-device run needs them):
    torch._C._dispatch_has_kernel_for_dispatch_key; True where that cannot tell."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key("c10d::allreduce_", "Meta"))
    except Exception:
        return True  # cannot tell: let the forward say
