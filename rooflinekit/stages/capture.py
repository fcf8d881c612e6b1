"""Capture: one forward under a dispatch mode (every aten op) and a function mode (fused attention).

Each op becomes an OpRecord with its full module path, FLOPs from the formula book, and bytes
read and written. Bytes follow the storage actually touched: views and metadata ops are free,
a broadcast (stride-0) dimension is read once, a tensor passed twice is read once, and an output
that aliases an input (in-place ops, out=) is one write, not two.
"""

from __future__ import annotations

import gc
import itertools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch._ops import OpOverload
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

try:  # the mode torch.device(...) enters, and the functions it gives a device to
    from torch.utils._device import DeviceContext as _DeviceContext
    from torch.utils._device import _device_constructors
except ImportError:  # pragma: no cover - a torch without them: calls go through it as they come
    _DeviceContext = None

from rooflinekit.core import compat
from rooflinekit.core.limits import limit, over
from rooflinekit.core.model_facts import cached, module_tree
from rooflinekit.stages import collectives
from rooflinekit.stages.formulas import (
    DATA_MOVEMENT_OPS,
    FREE_OPS,
    FormulaBook,
    op_key,
    sdpa_flops,
)
from rooflinekit.stages.hardware import dtype_key
from rooflinekit.stages.liveness import LiveStorages
from rooflinekit.stages.meta_memo import MetaMemo, memoisable

#: Matrix-multiply ops whose non-parameter operands can carry K/V (attention sinks).
MATMUL_OPS = {"aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.matmul", "aten.dot"}

#: The op name given to a function-level attention call.
SDPA_NAME = "F.scaled_dot_product_attention"

#: Ops that overwrite their mutated argument without reading it.
_OVERWRITES = {"aten.copy_", "aten.fill_", "aten.zero_", "aten.uniform_", "aten.normal_", "aten.random_",
               "aten.bernoulli_", "aten.resize_"}
#: Ops that write part of `self`: (argument holding what is written, whether self is read there).
_PARTIAL_WRITES = {
    "aten.index_put_": ("values", False),
    "aten.index_copy_": ("source", False),
    "aten.scatter_": ("src", False),
    "aten.index_add_": ("source", True),
    "aten.scatter_add_": ("src", True),
    "aten.index_fill_": ("index", False),
    "aten.masked_scatter_": ("source", False),
}
#: Gathers: the source argument is read only where the output takes from it.
_GATHERS = {"aten.embedding": "weight", "aten.index_select": "self", "aten.index": "self",
            "aten.gather": "self", "aten.take": "self", "aten._embedding_bag": "weight"}


@dataclass
class OpRecord:
    """One executed op (or fused call, or modelled block) with its counts and where it ran."""

    index: int
    name: str
    module: str
    flops: float
    bytes_read: float
    bytes_written: float
    dtype: str
    counted: bool
    kind: str = "op"  # "op" | "fused" | "modelled"
    param_bytes: float = 0.0
    reads: tuple[tuple[int, float], ...] = ()
    writes: tuple[tuple[int, float], ...] = ()
    sinks: tuple[int, ...] = ()  # storages of K/V-carrying operands (SDPA k, v; matmul candidates)
    shapes: str = ""
    attrs: dict = field(default_factory=dict)
    time_s: float | None = None

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True)
class _OpInfo:
    name: str
    args: tuple[tuple[str, bool], ...]  # (argument name, written by the op)
    returns_alias: tuple[bool, ...]  # return i aliases an input
    # derived from the above, once per op overload (record_aten's per-call work stays small)
    any_alias: bool = False  # some return aliases an input
    partial: tuple[str, bool] | None = None  # _PARTIAL_WRITES[name]
    gather_arg: str | None = None  # _GATHERS[name]
    reads_written: bool = True  # a written argument is also read (not in _OVERWRITES)
    matmul: bool = False  # in MATMUL_OPS
    #: (position, name, written) of the arguments whose schema type can hold a tensor, in order
    operands: tuple[tuple[int, str, bool], ...] = ()
    formula: Callable | None = None  # the FLOP formula (the recorder's FormulaBook)
    counted: bool = False  # a formula, or a data-movement op (0 FLOPs by definition)
    memo: bool = False  # its meta outputs may come from the capture's MetaMemo (meta_memo.memoisable)


@dataclass
class CaptureResult:
    """Everything one forward produced, plus what the attribute stage needs to know of the model."""

    ops: list[OpRecord]
    modules: dict[str, str]  # path -> class name, in registration order
    param_storages: set[int]
    param_bytes_total: float
    wall_s: float
    notes: list[str] = field(default_factory=list)
    param_owners: dict[int, str] = field(default_factory=dict)  # parameter storage -> module path
    param_names: dict[int, str] = field(default_factory=dict)  # parameter storage -> its parameter's name
    #: (storage, end) per storage the forward allocated, in order (rooflinekit.stages.liveness)
    live: list[tuple[int, int | None]] = field(default_factory=list)
    #: (calls answered from the meta memo, meta kernels run for memoisable calls)
    memo_counts: tuple[int, int] = (0, 0)


def unique_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor view addresses: stride-0 dims count once."""
    try:
        if t.is_contiguous():  # every element once (the common case, without walking the strides)
            return t.nbytes  # numel * element size
        strides = t.stride()
    except RuntimeError:  # sparse, nested: fall back to numel
        return t.numel() * t.element_size()
    n = 1
    for size, stride in zip(t.shape, strides, strict=False):
        if size == 0:
            return 0
        if stride != 0:
            n *= size
    return n * t.element_size()


def distinct_heads(t: torch.Tensor) -> int | None:
    """Distinct heads of a [..., H, L, E] attention operand: 1 when H is a stride-0 expand of one
    head (MQA written with .expand), H otherwise; None below 4 dims (heads folded into batch)."""
    if t.dim() < 4:
        return None
    try:
        return 1 if t.stride(-3) == 0 else t.shape[-3]
    except RuntimeError:
        return t.shape[-3]


def _tensors(value) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                yield v


_DTYPE_KEYS: dict[torch.dtype, str] = {}


#: Schema types (as str(argument.type) spells them, containers unwrapped) that never hold a tensor.
_SCALAR_TYPES = {"int", "float", "bool", "str", "number", "complex", "Device", "Layout", "ScalarType",
                 "MemoryFormat", "SymInt", "SymFloat", "SymBool", "Generator", "Dimname", "QScheme"}


def _may_hold_tensors(schema_type) -> bool:
    """Whether an argument of this schema type can be (or hold) a tensor: anything but scalars and
    lists of them ("Optional[List[int]]")."""
    text = str(schema_type)
    for wrapper in ("Optional[", "List[", "]"):
        text = text.replace(wrapper, "")
    return text not in _SCALAR_TYPES


def _dtype_key(dtype: torch.dtype) -> str:
    """hardware.dtype_key, once per dtype."""
    try:
        return _DTYPE_KEYS[dtype]
    except KeyError:
        key = _DTYPE_KEYS[dtype] = dtype_key(dtype)
        return key


def _shape(t: torch.Tensor) -> str:
    return "x".join(str(s) for s in t.shape) or "scalar"


def _direct(func) -> Callable:
    """What calling an op overload calls: its C++ op, without OpOverload.__call__'s Python frame
    (one per op, 10^4 ops); anything else (TorchBindOpOverload's own __call__) as it is."""
    return func._op if type(func) is OpOverload else func


#: id(op overload) -> (the overload, held so that its id stays its own; its _OpInfo without a
#: formula): what an op's schema says, the same for every capture of the process.
_SCHEMA_INFOS: dict[int, tuple[object, _OpInfo]] = {}


def _schema_info(func, name: str) -> _OpInfo:
    """The _OpInfo of op overload `func` (key `name`) from its schema, computed once per process."""
    entry = _SCHEMA_INFOS.get(id(func))
    if entry is not None:
        return entry[1]
    schema = func._schema
    returns_alias = tuple(r.alias_info is not None for r in schema.returns)
    args_info = tuple((a.name, a.alias_info is not None and a.alias_info.is_write) for a in schema.arguments)
    info = _OpInfo(
        name=name,
        args=args_info,
        returns_alias=returns_alias,
        any_alias=any(returns_alias),
        partial=_PARTIAL_WRITES.get(name),
        gather_arg=_GATHERS.get(name),
        reads_written=name not in _OVERWRITES,
        matmul=name in MATMUL_OPS,
        operands=tuple((i, a.name, written) for i, (a, (_, written))
                       in enumerate(zip(schema.arguments, args_info, strict=True))
                       if _may_hold_tensors(a.type)),
        memo=memoisable(func, any(returns_alias) or any(written for _, written in args_info)),
    )
    _SCHEMA_INFOS[id(func)] = (func, info)
    return info


def _view_key(t: torch.Tensor) -> tuple:
    """What makes two views of one storage the same view."""
    return t.storage_offset(), tuple(t.shape), t.stride()


class _Storages:
    """Stable serial numbers for storages, robust to address reuse after a storage dies.

    A storage is known by its StorageImpl's address (what a weak reference's cdata holds). A
    storage with memory is held weakly, and a dead one's address, once reused, gets a new number.
    A meta storage owns no memory: it is held (until the capture ends), so its address cannot be
    reused and a lookup needs no liveness check (the same numbers, at a fraction of the cost).
    """

    def __init__(self) -> None:
        self._refs: dict[int, tuple[object, int, bool]] = {}  # address -> (ref or storage, number, held)
        self._next = itertools.count(1)

    def id(self, t: torch.Tensor) -> int:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return -1
        key = storage._cdata
        entry = self._refs.get(key)
        if entry is not None and (entry[2] or not compat.storage_expired(entry[0])):
            return entry[1]
        if t.is_meta:
            entry = (storage, next(self._next), True)
        else:
            entry = (compat.storage_ref(t), next(self._next), False)
        self._refs[key] = entry
        return entry[1]

    def release(self) -> None:
        """Forget every storage (and let go of the meta ones held): the capture is over."""
        self._refs.clear()


class Recorder:
    """Turns dispatched ops into OpRecords; shared by the dispatch and function modes."""

    #: Give SDPA's output on real tensors the fused kernels' layout (see fused_sdpa), so counts
    #: match meta; a timed run sets it False and keeps the backend's own output.
    canonical_sdpa_layout = True
    #: Answer repeated pure meta calls from a memo (rooflinekit.stages.meta_memo).
    memo_meta = True

    def __init__(self, formulas: FormulaBook, module_names: dict[int, str]):
        self.formulas = formulas
        self.module_names = module_names
        self.stack: list[tuple[int, str]] = []
        self.ops: list[OpRecord] = []
        self.storages = _Storages()
        self.param_storages: set[int] = set()
        self.suppress = 0
        # Operand shapes of a tensor-level matmul in progress: at the aten level a [B, H, L, E]
        # product is a bmm over [B*H, L, E], which has lost the heads.
        self.matmul_hint: tuple[list, list] | None = None
        self.on_record: Callable[[OpRecord], None] | None = None
        #: id(op overload) -> (the op overload, held so that its id stays its own; its _OpInfo;
        #: what calling it calls): keyed by identity, which is the overloads' equality, without
        #: their Python __hash__.
        self._infos: dict[int, tuple[object, _OpInfo | None, Callable]] = {}
        self._kinds: dict[int, tuple[object, object]] = {}
        #: run_op is Recorder's own (a subclass that wraps the call is always asked)
        self.plain_run = type(self).run_op is Recorder.run_op
        self._shape_texts: dict[tuple, str] = {}
        self.param_owners: dict[int, str] = {}
        self.param_names: dict[int, str] = {}  # parameter storage -> the first parameter name holding it
        self.saw_subclass = False
        #: The model, and the inputs of its call (a recording started without a model adopts the
        #: first module called at top level: rooflinekit.capture()).
        self.root: torch.nn.Module | None = None
        self.root_inputs: tuple[tuple, dict] = ((), {})
        self.param_total = 0.0
        #: Ops one forward may record (rooflinekit.core.limits): an absurd model stops here.
        self.max_ops = int(limit("ops"))
        #: Storages the forward allocates and when each dies (activation memory).
        self.live = LiveStorages()
        self._written: dict[int, tuple[tuple[int, str], ...]] = {}  # id(_OpInfo) -> its written operands
        #: Outputs of repeated meta calls (rooflinekit.stages.meta_memo); None runs every kernel.
        self.memo: MetaMemo | None = MetaMemo() if self.memo_meta else None

    def adopt(self, model: torch.nn.Module) -> None:
        """Take `model` as the one recorded: its module names, parameter storages and owners."""
        self.root = model
        tree = module_tree(model)
        self.module_names.update({id(m): n for n, m in tree})
        # Metadata reads only: past the torch function modes in effect (the workload's device),
        # which would otherwise see every one of them in Python (10^3 parameters).
        with torch._C.DisableTorchFunction():
            self.param_storages, self.param_total = _storage_ids(self, model, tree)

    def run_op(self, func, args, kwargs):
        """Run an op the dispatch mode is about to record (a subclass can wrap the call)."""
        return _direct(func)(*args, **kwargs)

    # -- module tracking (global forward hooks, the mechanism torch's ModuleTracker uses) --
    def pre_hook(self, module, args):
        if self.root is None and not self.stack:
            self.adopt(module)
            self.root_inputs = (tuple(args), {})
            with torch._C.DisableTorchFunction():
                self.live.existing(args)  # passed in: not allocations of the forward
        name = self.module_names.get(id(module))
        if name is None:
            parent = self.stack[-1][1] if self.stack else ""
            name = f"{parent}.{type(module).__name__}" if parent else type(module).__name__
        self.stack.append((id(module), name))

    def post_hook(self, module, args, output):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == id(module):
                del self.stack[i:]
                break

    @property
    def module(self) -> str:
        return self.stack[-1][1] if self.stack else ""

    # -- records --
    def emit(self, record: OpRecord) -> OpRecord:
        """Append a record made elsewhere (fused calls, modelled blocks from plugins)."""
        record.index = len(self.ops)
        if record.index >= self.max_ops:
            raise over("ops", f"the model's forward ran more than {self.max_ops:,} ops (the last in "
                              f"'{record.module or self.module or '(top level)'}'): analyse a model this large "
                              "at fewer layers (e.g. -O layers=N), the per-layer figures are the same")
        if not record.module:
            record.module = self.module
        self.ops.append(record)
        if self.on_record is not None:
            self.on_record(record)
        return record

    def _reads(self, tensors, cap: dict[int, int] | None = None):
        """(storage, bytes) read from each distinct view among `tensors`, and the parameter bytes."""
        reads: list[tuple[int, float]] = []
        param = 0.0
        sid_of = self.storages.id
        params = self.param_storages
        views: dict[int, list[torch.Tensor]] = {}  # storage -> the views of it read so far
        others: set[int] | None = None  # tensors without a storage, by identity
        for t in tensors:
            sid = sid_of(t)
            if sid >= 0:
                same = views.get(sid)
                if same is None:
                    views[sid] = [t]
                else:  # a storage read twice: the same view (offset, shape, strides) counts once
                    key = _view_key(t)
                    if any(_view_key(o) == key for o in same):
                        continue
                    same.append(t)
            else:
                if others is None:
                    others = set()
                elif id(t) in others:
                    continue
                others.add(id(t))
            nbytes = float(unique_bytes(t))
            if cap is not None and id(t) in cap:
                nbytes = min(nbytes, cap[id(t)])
            reads.append((sid, nbytes))
            if sid in params:
                param += nbytes
        return reads, param

    def _info(self, func) -> _OpInfo | None:
        """Per-op facts that do not change between calls (schema, formula), computed once."""
        entry = self._infos.get(id(func))
        if entry is not None:
            return entry[1]
        name = op_key(func)
        if func.is_view or name in FREE_OPS:
            info = None
        else:
            info = _schema_info(func, name)
            fn = self.formulas.lookup(name)
            info = replace(info, formula=fn, counted=fn is not None or name in DATA_MOVEMENT_OPS)
        self._infos[id(func)] = (func, info, _direct(func))
        return info

    def record_aten(self, func, args, kwargs, out) -> None:
        entry = self._infos.get(id(func))
        info = entry[1] if entry is not None else self._info(func)
        if info is None:
            return
        name = info.name
        sid_of = self.storages.id
        nargs = len(args)
        if isinstance(out, torch.Tensor):
            out_tensors = [out]
        elif isinstance(out, (list, tuple)):
            out_tensors = [t for t in out if isinstance(t, torch.Tensor)]
        else:
            out_tensors = []
        if info.any_alias:
            aliases = info.returns_alias
            new_outputs = [t for i, t in enumerate(out_tensors) if i >= len(aliases) or not aliases[i]]
        else:
            new_outputs = out_tensors
        out_sizes = [unique_bytes(t) for t in new_outputs]

        # Operands in schema order: positional, then keyword by name.
        inputs: list[torch.Tensor] = []  # tensors of the arguments the op does not write
        read_tensors: list[torch.Tensor] = []
        writes: list[tuple[int, float]] = []
        cap: dict[int, int] | None = None
        partial, gather_arg = info.partial, info.gather_arg
        values = None
        if partial is not None:
            values = {n: (args[i] if i < nargs else kwargs[n]) for i, (n, _) in enumerate(info.args)
                      if i < nargs or n in kwargs}
        for i, arg_name, written in info.operands:
            if i < nargs:
                value = args[i]
            elif arg_name in kwargs:
                value = kwargs[arg_name]
            else:
                continue
            if isinstance(value, torch.Tensor):
                tensors = (value,)
            elif isinstance(value, (list, tuple)):
                tensors = [v for v in value if isinstance(v, torch.Tensor)]
            else:
                continue
            for t in tensors:
                if not written:
                    read_tensors.append(t)
                    inputs.append(t)
                    if arg_name == gather_arg:
                        if cap is None:
                            cap = {}
                        cap[id(t)] = sum(out_sizes)
                elif partial is not None:
                    src = values.get(partial[0])
                    nbytes = (
                        math.prod(src.shape) * t.element_size()
                        if isinstance(src, torch.Tensor)
                        else unique_bytes(t)
                    )
                    writes.append((sid_of(t), float(nbytes)))
                    if partial[1]:
                        read_tensors.append(t)
                        if cap is None:
                            cap = {}
                        cap[id(t)] = nbytes
                else:
                    writes.append((sid_of(t), float(unique_bytes(t))))
                    if info.reads_written:
                        read_tensors.append(t)
        for t, size in zip(new_outputs, out_sizes, strict=True):
            writes.append((sid_of(t), float(size)))
        reads, param = self._reads(read_tensors, cap)
        written = self._written.get(id(info))
        if written is None:  # the operands this op writes (in place, out=), once per op
            written = self._written[id(info)] = tuple((i, n) for i, n, w in info.operands if w)
        self.live.written(_written_args(written, args, kwargs, new_outputs) if written else new_outputs,
                          sid_of, self.param_storages)
        module = self.stack[-1][1] if self.stack else ""

        fn = info.formula
        counted = info.counted
        flops = 0.0
        attrs: dict = {}
        if fn is not None:  # a formula that fails or answers no count is reported, not fatal
            flops, error = self.formulas.evaluate(name, fn, args, kwargs, out)
            if error is not None:
                counted = False
                attrs["formula_error"] = error

        sinks: tuple[int, ...] = ()
        if info.matmul and len(inputs) >= 2:
            a, b = inputs[-2], inputs[-1]
            sids = [sid_of(a), sid_of(b)]
            sinks = tuple(s for s in sids if s not in self.param_storages)
            attrs["operand_sids"] = sids
            attrs["operand_bytes"] = [float(unique_bytes(a)), float(unique_bytes(b))]
            attrs["free_dims"] = [a.shape[-2] if a.dim() >= 2 else 1, b.shape[-1] if b.dim() >= 2 else 1]
            if len(sinks) == 2:  # two activations (QK^T, PV?): shapes for rooflinekit.stages.attribute
                if self.matmul_hint is not None:  # the first product of a tensor-level matmul
                    attrs["operand_shapes"], attrs["operand_heads"] = self.matmul_hint
                else:
                    attrs["operand_shapes"] = [list(a.shape), list(b.shape)]
                    attrs["operand_heads"] = [distinct_heads(a), distinct_heads(b)]
            self.matmul_hint = None
            attrs["rows"] = math.prod(a.shape[:-1])  # tokens (or positions) the product processes
        dt = None
        for t in inputs:
            if t.is_floating_point():
                dt = t.dtype
                break
        if dt is None:
            dt = out_tensors[0].dtype if out_tensors else torch.float32
        self.emit(OpRecord(  # positionally: index, name, module, flops, bytes read, written, dtype, ...
            0, name, module, flops, sum([b for _, b in reads]), sum([b for _, b in writes]), _dtype_key(dt),
            counted, "op", param, tuple(reads), tuple(writes), sinks, self._shapes(inputs), attrs,
        ))

    def _shapes(self, tensors: list[torch.Tensor]) -> str:
        """The first three operands' shapes as the report shows them ("48x1x7168,...")."""
        texts = self._shape_texts  # formatted once per distinct shape
        parts = []
        for t in tensors[:3]:
            shape = t.shape
            try:
                text = texts.get(shape)
            except TypeError:  # a symbolic size is not hashable
                text = _shape(t)
            if text is None:
                text = texts[shape] = _shape(t)
            parts.append(text)
        return ",".join(parts)

    def record_collective(self, func, args, kwargs, kind) -> None:
        """One record for a c10d collective: 0 FLOPs, 0 HBM bytes, its link traffic in attrs
        (rooflinekit.stages.collectives: message bytes, group size, ring wire bytes)."""
        d = collectives.describe(func, args, kwargs, kind)
        self.emit(
            OpRecord(
                index=0, name=op_key(func), module=self.module, flops=0.0, bytes_read=0.0,
                bytes_written=0.0, dtype=dtype_key(d["dtype"]), counted=True, kind="collective",
                shapes=d["shapes"],
                attrs=collectives.attrs(d["collective"], d["group_size"], d["message_bytes"], "captured"),
            )
        )

    def fused_sdpa(self, func, args, kwargs):
        """Run SDPA with op recording suppressed, then record it as one fused call.

        The output takes the memory layout fused kernels (flash, CPU flash) return, [B, L, H, E]
        in memory, so that later ops' traffic (a transpose(1, 2).reshape is then free) does not
        depend on the backend picked on CPU or meta (unless canonical_sdpa_layout is False). On
        meta nothing is computed at all.

        The bookkeeping (shapes, storages, the meta output) runs past the torch function modes:
        called from the model's code (the patched F.scaled_dot_product_attention), every tensor
        attribute read there would otherwise go through each mode in Python.
        """
        self.suppress += 1
        try:
            with torch._C.DisableTorchFunction():
                q, v = args[0] if args else kwargs["query"], (args[2] if len(args) > 2 else kwargs["value"])
                shape = tuple(q.shape[:-1]) + (v.shape[-1],)
                out = _fused_layout(shape, q) if q.is_meta else None
            if out is None:
                out = func(*args, **kwargs)
                if self.canonical_sdpa_layout and len(shape) == 4 and not _is_fused_layout(out):
                    out = _fused_layout(shape, q).copy_(out)
        finally:
            self.suppress -= 1
        with torch._C.DisableTorchFunction():
            self.record_sdpa(args, kwargs, out)
        return out

    def record_sdpa(self, args, kwargs, out) -> None:
        """One fused record for F.scaled_dot_product_attention, independent of the backend chosen."""
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
        bound = dict(zip(names, args, strict=False))
        bound.update(kwargs)
        q, k, v = bound["query"], bound["key"], bound["value"]
        mask = bound.get("attn_mask")
        is_causal = bool(bound.get("is_causal", False))
        read_tensors = [q, k, v] + ([mask] if isinstance(mask, torch.Tensor) else [])
        reads, param = self._reads(read_tensors)
        out_t = out[0] if isinstance(out, (tuple, list)) else out
        writes = [(self.storages.id(out_t), float(unique_bytes(out_t)))]
        self.live.written((out_t,), self.storages.id, self.param_storages)
        flops = sdpa_flops(tuple(q.shape), tuple(k.shape), tuple(v.shape), is_causal)
        self.suppress += 1  # reading the mask's values is not the model's traffic
        try:
            mask_keys = mask_keys_max(mask, k.shape[-2]) if isinstance(mask, torch.Tensor) else None
        finally:
            self.suppress -= 1
        self.emit(
            OpRecord(
                index=0,
                name=SDPA_NAME,
                module=self.module,
                flops=float(flops),
                bytes_read=sum(b for _, b in reads),
                bytes_written=sum(b for _, b in writes),
                dtype=dtype_key(q.dtype),
                counted=True,
                kind="fused",
                param_bytes=param,
                reads=tuple(reads),
                writes=tuple(writes),
                sinks=tuple(s for s in (self.storages.id(k), self.storages.id(v)) if s not in self.param_storages),
                shapes=",".join(_shape(t) for t in (q, k, v)),
                attrs={
                    "q_shape": list(q.shape),
                    "k_shape": list(k.shape),
                    "v_shape": list(v.shape),
                    "is_causal": is_causal,
                    "enable_gqa": bool(bound.get("enable_gqa", False)),
                    "has_mask": isinstance(mask, torch.Tensor),
                    "mask_keys": mask_keys,
                    "kv_read_bytes": float(unique_bytes(k) + unique_bytes(v)),
                    "k_heads_distinct": distinct_heads(k),
                },
            )
        )


def mask_keys_max(mask: torch.Tensor, kv_len: int) -> int | None:
    """The most keys any query row of an attention mask lets through, or None without values.

    Boolean masks attend where True; floating masks are additive (a position is masked by -inf or
    the dtype's lowest value, as transformers writes them). A mask on meta (or a fake tensor) holds
    no values, and one that does not span the `kv_len` keys is not read: both give None. Below
    `kv_len`, no query sees every key: the mask is banded (a sliding window written into it).
    """
    if mask.dim() < 1 or mask.shape[-1] != kv_len or mask.is_meta or mask.numel() == 0:
        return None
    try:
        if mask.dtype == torch.bool:
            visible = mask
        elif mask.is_floating_point():
            visible = mask > torch.finfo(mask.dtype).min / 2
        else:
            return None
        return int(visible.sum(dim=-1).max())
    except Exception:  # a fake tensor, or a tensor subclass without data: values unknown
        return None


def _fused_layout(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An empty tensor of `shape` laid out as [B, L, H, E] in memory when 4-D."""
    if len(shape) != 4:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    b, h, seq, e = shape
    return torch.empty((b, seq, h, e), dtype=like.dtype, device=like.device).transpose(1, 2)


def _is_fused_layout(t: torch.Tensor) -> bool:
    return t.dim() == 4 and t.transpose(1, 2).is_contiguous()


def _written_args(operands: tuple[tuple[int, str], ...], args, kwargs,
                  new_outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors an op wrote: its new outputs, then its written `operands` (in place, out=)."""
    written = new_outputs
    for i, arg_name in operands:
        value = args[i] if i < len(args) else kwargs.get(arg_name)
        if isinstance(value, torch.Tensor):
            written = [*written, value]
        elif isinstance(value, (list, tuple)):
            written = [*written, *(v for v in value if isinstance(v, torch.Tensor))]
    return written


def _dispatch(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    rec = self.recorder
    entry = rec._infos.get(id(func))  # (op, _OpInfo or None, its C++ callable) once recorded before
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
        elif entry[1].memo and rec.memo is not None:  # a pure op: on meta, its outputs from the memo
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


class _DispatchRecorder(TorchDispatchMode):
    """Records every aten op. Recent torch releases wrap a dispatch mode's handler so that dynamo
    never compiles it: about a microsecond on every op."""

    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder

    __torch_dispatch__ = _dispatch


class _EagerDispatchRecorder(_DispatchRecorder):
    """_DispatchRecorder for a capture where nothing is compiled (under compat.force_eager(), or
    before torch._dynamo is loaded): the handler needs no such wrapper (torch's own hook for
    opting out: _should_skip_dynamo)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    __torch_dispatch__ = _dispatch


class _FunctionRecorder(TorchFunctionMode):
    """Intercepts attention at the function level, so CPU/meta backend choices cannot distort it."""

    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder
        #: The functions that need a look (views, SDPA, matmuls, einsum as torch names it now);
        #: every other one goes straight on.
        self.special = {**dict.fromkeys(_VIEW_FUNCS, "view"), **dict.fromkeys(_MATMULS, "matmul"),
                        torch.einsum: "einsum", _SDPA: "sdpa"}
        self.constructors = _device_constructors() if _DeviceContext is not None else set()

    def _below(self, func, args, kwargs):
        """func(*args, **kwargs) as the modes below this one take it. When the only one is the
        workload's device context and func constructs nothing, that mode would pass the call on
        unchanged, popped while it runs: the call goes past it the same way, without its Python."""
        if (torch._C._len_torch_function_stack() == 1 and func not in self.constructors
                and type(torch._C._get_function_stack_at(0)) is _DeviceContext):
            below = torch._C._pop_torch_function_stack()
            try:
                return func(*args, **kwargs)
            finally:
                torch._C._push_on_torch_function_stack(below)
        return func(*args, **kwargs)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = self.special.get(func)
        if kind is None:
            return self._below(func, args, kwargs)
        if kind == "view":
            if _plain_view(func, args) and torch._C._len_torch_dispatch_stack() == 1:
                # Nothing to record (views only): the dispatch mode is skipped, a few microseconds
                # for each of the thousands of views a forward takes.
                with torch._C._DisableTorchDispatch():
                    return self._below(func, args, kwargs)
            return func(*args, **kwargs)
        rec = self.recorder
        if rec.suppress:
            return func(*args, **kwargs)
        if kind == "sdpa":
            return rec.fused_sdpa(func, args, kwargs)
        hint = None
        if kind == "matmul":
            if len(args) >= 2:
                a, b = args[0], args[1]
                if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and min(a.dim(), b.dim()) >= 4:
                    hint = ([list(a.shape), list(b.shape)], [distinct_heads(a), distinct_heads(b)])
        else:
            hint = einsum_hint(args)
        if hint is not None:
            rec.matmul_hint = hint
            try:
                return func(*args, **kwargs)
            finally:
                rec.matmul_hint = None
        return func(*args, **kwargs)


_SDPA = F.scaled_dot_product_attention

#: Tensor methods and functions that only ever dispatch views of their first argument (no data
#: moves: nothing recorded).
_VIEW_FUNCS = {torch.Tensor.view, torch.Tensor.transpose, torch.Tensor.unsqueeze, torch.Tensor.expand,
               torch.Tensor.permute, torch.Tensor.squeeze, torch.Tensor.t, torch.Tensor.split,
               torch.Tensor.chunk, torch.Tensor.narrow, torch.Tensor.unbind, torch.Tensor.view_as,
               torch.Tensor.expand_as, torch.Tensor.__getitem__, torch.split, torch.chunk, torch.unbind,
               torch.transpose, torch.unsqueeze, torch.permute, torch.squeeze, torch.t, torch.narrow}
_BASIC_INDEX = (int, slice, type(None), type(Ellipsis))


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
_MATMULS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}


def einsum_hint(args) -> tuple[list, list] | None:
    """A two-operand einsum product as a matmul hint: operand shapes in the [..., H, L, c] @
    [..., H, c, S] form (batch-like indices first, then the free index, the contracted one last
    or first), and the distinct heads of each operand.

    Only the plain attention products are read: one contracted index, one free index per operand,
    and at least two indices shared by both operands and the output (batch, heads: heads is the
    last of them in the output). Anything else gives None, and heads stay unknown.
    """
    if len(args) != 3 or not isinstance(args[0], str):
        return None
    equation, a, b = args
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or "..." in equation:
        return None
    try:
        inputs, out = equation.replace(" ", "").split("->")
        ia, ib = inputs.split(",")
    except ValueError:
        return None
    if len(ia) != a.dim() or len(ib) != b.dim():
        return None
    shared = [i for i in out if i in ia and i in ib]
    contracted = [i for i in ia if i in ib and i not in out]
    free_a = [i for i in ia if i not in ib]
    free_b = [i for i in ib if i not in ia]
    if len(contracted) != 1 or len(free_a) != 1 or len(free_b) != 1 or len(shared) < 2:
        return None
    if len(shared) + 2 != len(ia) or len(shared) + 2 != len(ib):
        return None
    (c,), (fa,), (fb,) = contracted, free_a, free_b
    size_a = dict(zip(ia, a.shape, strict=True))
    size_b = dict(zip(ib, b.shape, strict=True))
    shape_a = [size_a[i] for i in shared] + [size_a[fa], size_a[c]]
    shape_b = [size_b[i] for i in shared] + [size_b[c], size_b[fb]]
    heads = shared[-1]

    def distinct(t, letters, size):
        return 1 if t.stride(letters.index(heads)) == 0 else size[heads]

    return [shape_a, shape_b], [distinct(a, ia, size_a), distinct(b, ib, size_b)]


@contextmanager
def _patched_sdpa(recorder: Recorder) -> Iterator[None]:
    """Also catch SDPA called from inside other torch functions (nn.MultiheadAttention's
    F.multi_head_attention_forward), where function modes are switched off: those call the
    module-level name, which is swapped for a recording wrapper for the duration."""

    def wrapper(*args, **kwargs):
        if recorder.suppress:
            return _SDPA(*args, **kwargs)
        return recorder.fused_sdpa(_SDPA, args, kwargs)

    F.scaled_dot_product_attention = wrapper
    try:
        yield
    finally:
        F.scaled_dot_product_attention = _SDPA


#: What the model's own parameter and buffer walks are, when nothing overrides them.
_MEMBER_WALKS = ("named_parameters", "parameters", "named_buffers", "buffers", "_named_members")


def _params_and_buffers(model: torch.nn.Module, tree: list[tuple[str, torch.nn.Module]]):
    """(name, parameter) as model.named_parameters() gives them, then (None, buffer) as
    model.buffers() does, from `tree` (list(model.named_modules())): one walk of the modules,
    not three."""
    if any(getattr(type(model), walk) is not getattr(torch.nn.Module, walk) for walk in _MEMBER_WALKS):
        return list(itertools.chain(model.named_parameters(), ((None, b) for b in model.buffers())))
    out: list[tuple[str | None, torch.Tensor]] = []
    for members, named in (("_parameters", True), ("_buffers", False)):
        memo: set[torch.Tensor] = set()
        for prefix, module in tree:
            for key, value in getattr(module, members).items():
                if value is None or value in memo:
                    continue
                memo.add(value)
                out.append(((f"{prefix}.{key}" if prefix else key) if named else None, value))
    return out


def _storage_ids(recorder: Recorder, model: torch.nn.Module,
                 tree: list[tuple[str, torch.nn.Module]]) -> tuple[set[int], float]:
    """The storages of the model's parameters and buffers, their bytes (each storage once), and
    the owner of each parameter storage (recorder.param_owners: the first module path holding it)."""
    ids: set[int] = set()
    total = 0.0
    owners = recorder.param_owners
    for pname, t in cached(model, "params_and_buffers", lambda: _params_and_buffers(model, tree)):
        t = getattr(t, "_local_tensor", t)  # a DTensor: this rank's shard is what its ops read
        sid = recorder.storages.id(t)
        if sid not in ids:
            ids.add(sid)
            total += t.numel() * t.element_size()
        if pname is not None:
            owners.setdefault(sid, pname.rpartition(".")[0])
            recorder.param_names.setdefault(sid, pname)
    return ids, total


_ACTIVE: list[Recorder] = []


def active_recorder() -> Recorder | None:
    """The recorder of the capture in progress (for modelled modules that emit records)."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def recording(model: torch.nn.Module | None, formulas: FormulaBook) -> Iterator[Recorder]:
    """Activate module tracking, the function mode and the dispatch mode around a forward.

    Without a `model`, the first module called at top level is adopted as the model.
    """
    recorder = Recorder(formulas, {})
    if model is not None:
        recorder.adopt(model)
    hooks = compat.register_global_forward_hooks(recorder.pre_hook, recorder.post_hook)
    _ACTIVE.append(recorder)
    compat.mark_not_compiled()  # a command-line run: torch's meta kernels need no dynamo import
    eager = compat.force_eager()  # torch.compile'd code runs eagerly under a dispatch mode anyway
    # The handler needs torch's no-compile wrapper only where something could compile it.
    mode = _EagerDispatchRecorder if eager is not None or not compat.dynamo_loaded() else _DispatchRecorder
    try:
        with (_patched_sdpa(recorder), _FunctionRecorder(recorder), nullcontext() if eager is None else eager,
              mode(recorder)):
            yield recorder
    finally:
        _ACTIVE.remove(recorder)
        for h in hooks:
            h.remove()


def call_forward(model: torch.nn.Module, inputs):
    """Call the model with positional (tuple/list) or keyword (dict) inputs."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def capture(model: torch.nn.Module, inputs, formulas: FormulaBook | None = None) -> CaptureResult:
    """Run one forward of `model` on `inputs` and record every op."""
    formulas = formulas or FormulaBook()
    start = time.perf_counter()
    # The records are long-lived small objects: cyclic GC passes over them (and over the model's
    # thousands of modules) cost more than the capture itself on large models.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.no_grad(), recording(model, formulas) as rec:
            with torch._C.DisableTorchFunction():
                rec.live.existing(inputs)
            call_forward(model, inputs)
            live = rec.live.finish()
            rec.storages.release()  # freed now, not traversed by the collection that re-enabling starts
    finally:
        if gc_was_enabled:
            gc.enable()
    modules = cached(model, "module_classes", lambda: {n: type(m).__name__ for n, m in model.named_modules()})
    return CaptureResult(
        ops=rec.ops,
        modules=modules,
        param_storages=rec.param_storages,
        param_bytes_total=rec.param_total,
        wall_s=time.perf_counter() - start,
        param_owners=dict(rec.param_owners),
        param_names=dict(rec.param_names),
        live=live,
        memo_counts=(rec.memo.hits, rec.memo.misses) if rec.memo is not None else (0, 0),
    )
