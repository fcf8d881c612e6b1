"""The Recorder: turns the ops the modes see into OpRecords, at the module path they ran in.

It holds one capture's state (module stack, storages, parameters, liveness, meta memo) and the
per-op caches; what it counts comes from the modules beside it (traffic, heads, sdpa).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from rooflinekit.core.compat import disable_torch_function
from rooflinekit.core.limits import limit, over
from rooflinekit.core.model_facts import module_tree
from rooflinekit.stages import collectives
from rooflinekit.stages.capture.liveness import LiveStorages
from rooflinekit.stages.capture.matmul_heads import matmul_operands
from rooflinekit.stages.capture.meta_memo import MetaMemo
from rooflinekit.stages.capture.modules import param_storages
from rooflinekit.stages.capture.records import OpRecord, shape_text
from rooflinekit.stages.capture.schema import OpInfo, direct, schema_info
from rooflinekit.stages.capture.sdpa import record as sdpa_record
from rooflinekit.stages.capture.sdpa import run_fused
from rooflinekit.stages.capture.storages import Storages
from rooflinekit.stages.capture.traffic import outputs, reads, split, unique_bytes, written_args
from rooflinekit.stages.formulas import DATA_MOVEMENT_OPS, FREE_OPS, FormulaBook, op_key
from rooflinekit.stages.hardware import dtype_key

_DTYPE_KEYS: dict[torch.dtype, str] = {}


def _dtype_key(dtype: torch.dtype) -> str:
    """hardware.dtype_key, once per dtype."""
    try:
        return _DTYPE_KEYS[dtype]
    except KeyError:
        key = _DTYPE_KEYS[dtype] = dtype_key(dtype)
        return key


def _op_dtype(inputs: list[torch.Tensor], out_tensors: list[torch.Tensor]) -> torch.dtype:
    """An op's dtype: its first floating-point input's, else its first output's (else float32)."""
    for t in inputs:
        if t.is_floating_point():
            return t.dtype
    return out_tensors[0].dtype if out_tensors else torch.float32


def is_function_wrapper(module: torch.nn.Module) -> bool:
    """Whether a module outside the model's tree holds nothing of its own (no parameters, buffers
    or children): a function wrapped as a module at call time (transformers 5.25's hub-kernel
    functions run inside such `Func` modules), not a layer of the model."""
    return not (module._parameters or module._buffers or module._modules)


class Recorder:
    """Turns dispatched ops into OpRecords; shared by the dispatch and function modes."""

    #: Give SDPA's output on real tensors the fused kernels' layout (see fused_sdpa), so counts
    #: match meta; a timed run sets it False and keeps the backend's own output.
    canonical_sdpa_layout = True
    #: Answer repeated pure meta calls from a memo (rooflinekit.stages.capture.meta_memo).
    memo_meta = True

    def __init__(self, formulas: FormulaBook, module_names: dict[int, str]):
        self.formulas = formulas
        self.module_names = module_names
        self.stack: list[tuple[int, str]] = []
        self.ops: list[OpRecord] = []
        self.storages = Storages()
        self.param_storages: set[int] = set()
        self.suppress = 0
        # Operand shapes of a tensor-level matmul in progress: at the aten level a [B, H, L, E]
        # product is a bmm over [B*H, L, E], which has lost the heads.
        self.matmul_hint: tuple[list, list] | None = None
        self.on_record: Callable[[OpRecord], None] | None = None
        #: id(op overload) -> (the op overload, held so that its id stays its own; its OpInfo;
        #: what calling it calls): keyed by identity, which is the overloads' equality, without
        #: their Python __hash__.
        self._infos: dict[int, tuple[object, OpInfo | None, Callable]] = {}
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
        self._written: dict[int, tuple[tuple[int, str], ...]] = {}  # id(OpInfo) -> its written operands
        #: Outputs of repeated meta calls (rooflinekit.stages.capture.meta_memo); None runs every kernel.
        self.memo: MetaMemo | None = MetaMemo() if self.memo_meta else None

    def adopt(self, model: torch.nn.Module) -> None:
        """Take `model` as the one recorded: its module names, parameter storages and owners."""
        self.root = model
        tree = module_tree(model)
        self.module_names.update({id(m): n for n, m in tree})
        # Metadata reads only: past the torch function modes in effect (the workload's device),
        # which would otherwise see every one of them in Python (10^3 parameters).
        with disable_torch_function():
            self.param_storages, self.param_total = param_storages(
                model, tree, self.storages.id, self.param_owners, self.param_names)

    def run_op(self, func, args, kwargs):
        """Run an op the dispatch mode is about to record (a subclass can wrap the call)."""
        return direct(func)(*args, **kwargs)

    # -- module tracking (global forward hooks, the mechanism torch's ModuleTracker uses) --
    def pre_hook(self, module, args):
        if self.root is None and not self.stack:
            self.adopt(module)
            self.root_inputs = (tuple(args), {})
            with disable_torch_function():
                self.live.existing(args)  # passed in: not allocations of the forward
        name = self.module_names.get(id(module))
        if name is None:
            parent = self.stack[-1][1] if self.stack else ""
            if parent and is_function_wrapper(module):
                name = parent  # a function in a module's clothing: its ops are its caller's
            else:
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

    def _info(self, func) -> OpInfo | None:
        """Per-op facts that do not change between calls (schema, formula), computed once."""
        entry = self._infos.get(id(func))
        if entry is not None:
            return entry[1]
        name = op_key(func)
        if func.is_view or name in FREE_OPS:
            info = None
        else:
            info = schema_info(func, name)
            fn = self.formulas.lookup(name)
            info = replace(info, formula=fn, counted=fn is not None or name in DATA_MOVEMENT_OPS)
        self._infos[id(func)] = (func, info, direct(func))
        return info

    def record_aten(self, func, args, kwargs, out) -> None:
        """One OpRecord for an aten op: its FLOPs, the storages it reads and writes, their bytes."""
        entry = self._infos.get(id(func))
        info = entry[1] if entry is not None else self._info(func)
        if info is None:
            return
        sid_of = self.storages.id
        out_tensors, new_outputs = outputs(info, out)
        out_sizes = [unique_bytes(t) for t in new_outputs]
        operands = split(info, args, kwargs, sum(out_sizes), sid_of)
        writes = operands.writes
        for t, size in zip(new_outputs, out_sizes, strict=True):
            writes.append((sid_of(t), float(size)))
        read, param = reads(operands.read_tensors, sid_of, self.param_storages, operands.cap)
        if info.matmul and out_sizes and not any(out_sizes):
            read, param = [], 0.0  # a product over no rows (an expert no token chose) launches no work
        self._allocated(info, args, kwargs, new_outputs)
        module = self.stack[-1][1] if self.stack else ""
        flops, counted, attrs = self._flops(info, args, kwargs, out)
        inputs = operands.inputs
        sinks: tuple[int, ...] = ()
        if info.matmul and len(inputs) >= 2:
            sinks = matmul_operands(inputs[-2], inputs[-1], sid_of, self.param_storages, self.matmul_hint, attrs)
            self.matmul_hint = None
        self.emit(OpRecord(  # positionally: index, name, module, flops, bytes read, written, dtype, ...
            0, info.name, module, flops, sum([b for _, b in read]), sum([b for _, b in writes]),
            _dtype_key(_op_dtype(inputs, out_tensors)), counted, "op", param, tuple(read), tuple(writes),
            sinks, self._shapes(inputs), attrs,
        ))

    def _allocated(self, info: OpInfo, args, kwargs, new_outputs: list[torch.Tensor]) -> None:
        """Tell the liveness tracker what an op wrote: its new outputs and written operands."""
        written = self._written.get(id(info))
        if written is None:  # the operands this op writes (in place, out=), once per op
            written = self._written[id(info)] = tuple((i, n) for i, n, w in info.operands if w)
        self.live.written(written_args(written, args, kwargs, new_outputs) if written else new_outputs,
                          self.storages.id, self.param_storages)

    def _flops(self, info: OpInfo, args, kwargs, out) -> tuple[float, bool, dict]:
        """(FLOPs, counted, attrs) from the op's formula: one that fails or answers no count is
        reported in attrs["formula_error"] and leaves the op uncounted, not fatal. An `.out`
        overload answers to its op's formula (op_key is the overload packet) without its out=
        arguments, which the formula gets as `out`."""
        attrs: dict = {}
        if info.formula is None:
            return 0.0, info.counted, attrs
        if info.out_args:  # mm.out and the like: the formula's out= is the output, the same tensor
            kwargs = {k: v for k, v in kwargs.items() if k not in info.out_args}
        flops, error = self.formulas.evaluate(info.name, info.formula, args, kwargs, out)
        if error is None:
            return flops, info.counted, attrs
        attrs["formula_error"] = error
        return flops, False, attrs

    def _shapes(self, tensors: list[torch.Tensor]) -> str:
        """The first three operands' shapes as the report shows them ("48x1x7168,...")."""
        texts = self._shape_texts  # formatted once per distinct shape
        parts = []
        for t in tensors[:3]:
            shape = t.shape
            try:
                text = texts.get(shape)
            except TypeError:  # a symbolic size is not hashable
                text = shape_text(t)
            if text is None:
                text = texts[shape] = shape_text(t)
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
        """Run SDPA unrecorded, its output in the fused kernels' layout, and record it as one
        fused call (sdpa.run_fused)."""
        return run_fused(self, func, args, kwargs)

    def record_sdpa(self, args, kwargs, out) -> None:
        """One fused record for F.scaled_dot_product_attention, independent of the backend chosen."""
        sdpa_record(self, args, kwargs, out)
