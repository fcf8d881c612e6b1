"""The torch modes a capture runs under: a dispatch mode that sees every aten op, and a function
mode that sees attention (and the heads of matmuls) before aten lowers them."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from rooflinekit.core.compat import (
    DeviceContext,
    TorchDispatchMode,
    device_constructors,
    disable_torch_dispatch,
    dispatch_mode_depth,
    function_mode_at,
    function_mode_depth,
    pop_function_mode,
    push_function_mode,
)
from rooflinekit.stages import collectives
from rooflinekit.stages.capture.matmul_heads import einsum_hint, matmul_hint
from rooflinekit.stages.capture.recorder import Recorder
from rooflinekit.stages.capture.sdpa import SDPA


def _dispatch(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    rec = self.recorder
    entry = rec._infos.get(id(func))  # (op, OpInfo or None, its C++ callable) once recorded before
    if not types:
        if entry is not None and entry[1] is None:  # a view or free op: nothing to decide
            return entry[2](*args, **kwargs)
    elif collectives.defer_to_subclass(types):
        rec.saw_subclass = True
        return NotImplemented  # DTensor runs its local ops and collectives: those are recorded
    if rec.suppress:
        return func(*args, **kwargs)
    known = rec._kinds.get(id(func))  # collectives.classify, by identity (as _infos)
    if known is None:
        known = rec._kinds[id(func)] = (func, collectives.classify(func))
    kind = known[1]
    if kind is None:
        if rec.saw_subclass and collectives.faking():  # DTensor shape propagation
            return func(*args, **kwargs)
        if entry is None or not rec.plain_run:
            out = rec.run_op(func, args, kwargs)
        elif entry[1] is not None and entry[1].memo and rec.memo is not None:  # a pure op: from the memo
            # (entry[1] is None for a view or free op reached with tensor subclass types: torch 2.6
            # dispatches Reformer's detach in an autograd Function so)
            out = rec.memo.call(func, entry[2], args, kwargs)
        else:
            out = entry[2](*args, **kwargs)
        rec.record_aten(func, args, kwargs, out)
    elif kind is True:  # waits and autograd wrappers of collectives move nothing
        return func(*args, **kwargs)
    else:
        out = rec.run_op(func, args, kwargs)
        rec.record_collective(func, args, kwargs, kind)
    return out


class DispatchRecorder(TorchDispatchMode):
    """Records every aten op. Recent torch releases wrap a dispatch mode's handler so that dynamo
    never compiles it: about a microsecond on every op."""

    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder

    __torch_dispatch__ = _dispatch


class EagerDispatchRecorder(DispatchRecorder):
    """DispatchRecorder for a capture where nothing is compiled (under compat.force_eager(), or
    before torch._dynamo is loaded): the handler needs no such wrapper (torch's own hook for
    opting out: _should_skip_dynamo)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    __torch_dispatch__ = _dispatch


#: Tensor methods and functions that only ever dispatch views of their first argument (no data
#: moves: nothing recorded).
_VIEW_FUNCS = {torch.Tensor.view, torch.Tensor.transpose, torch.Tensor.unsqueeze, torch.Tensor.expand,
               torch.Tensor.permute, torch.Tensor.squeeze, torch.Tensor.t, torch.Tensor.split,
               torch.Tensor.chunk, torch.Tensor.narrow, torch.Tensor.unbind, torch.Tensor.view_as,
               torch.Tensor.expand_as, torch.Tensor.__getitem__, torch.split, torch.chunk, torch.unbind,
               torch.transpose, torch.unsqueeze, torch.permute, torch.squeeze, torch.t, torch.narrow}
_BASIC_INDEX = (int, slice, type(None), type(Ellipsis))
_MATMULS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}


def _plain_view(func, args) -> bool:
    """Whether a _VIEW_FUNCS call views a plain tensor (not a subclass, which dispatches itself) and,
    for indexing, indexes it basically (ints, slices, None, ...: a tensor or list index gathers)."""
    if not args or type(args[0]) is not torch.Tensor:
        return False
    if func is not torch.Tensor.__getitem__:
        return True
    index = args[1] if len(args) > 1 else None
    if type(index) is tuple:
        return all(type(i) in _BASIC_INDEX for i in index)
    return type(index) in _BASIC_INDEX


class FunctionRecorder(TorchFunctionMode):
    """Intercepts attention at the function level, so CPU/meta backend choices cannot distort it."""

    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder
        #: The functions that need a look (views, SDPA, matmuls, einsum as torch names it now);
        #: every other one goes straight on.
        self.special = {**dict.fromkeys(_VIEW_FUNCS, "view"), **dict.fromkeys(_MATMULS, "matmul"),
                        torch.einsum: "einsum", SDPA: "sdpa"}
        self.constructors = device_constructors()

    def _below(self, func, args, kwargs):
        """func(*args, **kwargs) as the modes below this one take it. When the only one is the
        workload's device context and func constructs nothing, that mode would pass the call on
        unchanged, popped while it runs: the call goes past it the same way, without its Python."""
        if (function_mode_depth() == 1 and func not in self.constructors
                and type(function_mode_at(0)) is DeviceContext):
            below = pop_function_mode()
            try:
                return func(*args, **kwargs)
            finally:
                push_function_mode(below)
        return func(*args, **kwargs)

    def _view(self, func, args, kwargs):
        if _plain_view(func, args) and dispatch_mode_depth() == 1:
            # Nothing to record (views only): the dispatch mode is skipped, a few microseconds
            # for each of the thousands of views a forward takes.
            with disable_torch_dispatch():
                return self._below(func, args, kwargs)
        return func(*args, **kwargs)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = self.special.get(func)
        if kind is None:
            return self._below(func, args, kwargs)
        if kind == "view":
            return self._view(func, args, kwargs)
        rec = self.recorder
        if rec.suppress:
            return func(*args, **kwargs)
        if kind == "sdpa":
            return rec.fused_sdpa(func, args, kwargs)
        hint = matmul_hint(args) if kind == "matmul" else einsum_hint(args)
        if hint is None:
            return func(*args, **kwargs)
        rec.matmul_hint = hint
        try:
            return func(*args, **kwargs)
        finally:
            rec.matmul_hint = None
