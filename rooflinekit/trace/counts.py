"""FLOPs and bytes of one op of a torch.profiler trace, from the shapes and types it recorded.

A trace written with `record_shapes=True` keeps, per CPU op, its arguments' dims and types (and,
in newer torch, the values of its scalars: "Concrete Inputs"). The counter rebuilds the call on
the meta device (tensors of the recorded shapes and dtypes, the overload whose schema fits the
recorded types, the recorded scalar values) and runs it under the capture's own recording: the
same formula book (plugins', rooflinekit's, torch's) and the same byte rules (distinct storages
read plus written) as `rooflinekit profile`; nothing is computed.

A count covers the op's whole call: a composite op (aten::linear, aten::matmul, aten::conv2d,
aten::scaled_dot_product_attention) is counted through what it runs, and the trace nests those
same ops under it. Summing a trace therefore takes, on each thread, the outermost op whose status
is "counted" or "no_formula" and skips what is nested under it; "free" ops, autograd nodes and
user ranges ("unsupported", not an aten op) are looked through to their children.

Status: "counted" (FLOPs from a formula, or 0 for a data-movement op), "no_formula" (bytes only:
no FLOP formula, as a capture lists such ops), "free" (views and metadata: nothing moves),
"no_shapes" (the trace has no dims for an argument), "unsupported" (not an aten op, an argument
value the trace did not record, or a failure, named in `reason`).
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.stages.capture import OpRecord, recording
from rooflinekit.stages.capture.sdpa import SDPA_NAME
from rooflinekit.stages.formulas import (
    DATA_MOVEMENT_OPS,
    FREE_OPS,
    FormulaBook,
    formula_book,
    op_key,
)

#: Trace event categories of CPU ops (newer torch, older torch).
CPU_OP_CATEGORIES = ("cpu_op", "Operator")


def _dtypes(names: dict[str, str]) -> dict[str, torch.dtype]:
    """{key: torch dtype} for the dtype names this torch has."""
    return {key: getattr(torch, name) for key, name in names.items() if hasattr(torch, name)}


#: "Input type" of a tensor argument (its C++ element type) -> dtype.
TYPE_DTYPES = _dtypes({
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "int": "int32", "short int": "int16", "short": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool", "short unsigned int": "uint16",
    "unsigned int": "uint32", "long unsigned int": "uint64", "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128", "c10::complex<c10::Half>": "complex32",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::Float8_e8m0fnu": "float8_e8m0fnu", "c10::Float4_e2m1fn_x2": "float4_e2m1fn_x2",
})

#: c10::ScalarType codes, as "Concrete Inputs" writes a dtype argument -> dtype.
SCALAR_TYPE_CODES = {int(code): dtype for code, dtype in _dtypes({
    "0": "uint8", "1": "int8", "2": "int16", "3": "int32", "4": "int64", "5": "float16", "6": "float32",
    "7": "float64", "8": "complex32", "9": "complex64", "10": "complex128", "11": "bool", "15": "bfloat16",
    "23": "float8_e5m2", "24": "float8_e4m3fn", "25": "float8_e5m2fnuz", "26": "float8_e4m3fnuz",
    "27": "uint16", "28": "uint32", "29": "uint64", "44": "float8_e8m0fnu", "45": "float4_e2m1fn_x2",
}).items()}

_MEMORY_FORMATS = {0: torch.contiguous_format, 1: torch.preserve_format, 2: torch.channels_last,
                   3: torch.channels_last_3d}

#: Non-tensor arguments that change FLOPs or output sizes: never guessed when the trace lacks them.
REQUIRED_VALUES = frozenset({
    "stride", "padding", "dilation", "transposed", "output_padding", "groups", "output_mask",
    "bias_sizes", "is_causal", "custom_mask_type", "size", "sizes", "repeats", "equation", "kernel_size",
    "output_size", "split_size", "split_sizes", "chunks",
})

#: Ops that only read a value to the host (aten.item's work is aten._local_scalar_dense, free).
_HOST_READS = {"aten.item"}

#: Backend convolutions, and aten._convolution (no meta kernel in every build or torch release):
#: run as the aten.convolution they compute.
BACKEND_CONVOLUTIONS = {"aten.cudnn_convolution", "aten.cudnn_convolution_transpose", "aten.mkldnn_convolution",
                        "aten.miopen_convolution", "aten.miopen_convolution_transpose", "aten._convolution"}

#: Recorded "Input type"s that are no tensor dtype.
_LIST_TYPES = {"TensorList": "tensors", "GenericList": "tensors", "ScalarList": "list", "Scalar": "scalar",
               "": "none"}


@dataclass(frozen=True)
class RecordedOp:
    """What the trace recorded for one CPU op."""

    name: str  # "aten::mm"
    dims: tuple  # Input Dims as recorded (lists turned into tuples)
    types: tuple  # Input type strings
    concrete: tuple | None  # Concrete Inputs strings, None when the trace has none


@dataclass(frozen=True)
class RecordedCount:
    """One op's counts as a capture would make them, or why there are none."""

    status: str  # "counted" | "no_shapes" | "no_formula" | "unsupported" | "free"
    flops: float = 0.0  # 2 per multiply-add, as the capture counts
    bytes: float = 0.0  # bytes read + written, as the capture counts
    dtype: str = ""  # compute dtype name ("float32", "bfloat16", ...) for the peak lookup
    formula: str = ""  # who gave the FLOPs: "rooflinekit", "torch", a plugin name, "data movement"
    reason: str = ""  # one line when status != "counted" (what is missing)
    assumed: str = ""  # argument values the trace did not record and the count took as defaults


class Skip(Exception):
    """An op the counter answers without running: its status and the reason."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _frozen(value: Any) -> Any:
    """Lists as tuples, all the way down (a RecordedOp is a memo key)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def recorded_op(event: dict) -> RecordedOp | None:
    """The RecordedOp of a trace event, or None when it is no CPU op."""
    if event.get("cat") not in CPU_OP_CATEGORIES or "name" not in event:
        return None
    args = event.get("args") or {}
    concrete = args.get("Concrete Inputs")
    return RecordedOp(event["name"], _frozen(args.get("Input Dims", [])), _frozen(args.get("Input type", [])),
                      None if concrete is None else _frozen(concrete))


# -- which op and overload ------------------------------------------------------------------------------


def packet_of(name: str):
    """The op overload packet a recorded name denotes; Skip when it is none."""
    namespace, sep, op = name.partition("::")
    if not sep or not namespace.isidentifier() or not op.isidentifier():
        raise Skip("unsupported", "not an aten op (an autograd node, a compiled graph, a module or user range): its ops nest under it")
    if namespace == "c10d":
        raise Skip("unsupported", "a collective: it moves data between GPUs, not counted from shapes")
    try:
        return getattr(getattr(torch.ops, namespace), op)
    except (AttributeError, RuntimeError):
        raise Skip("unsupported", f"no op {name} is registered in this process") from None


def _real_type(argument) -> str:
    """The schema type as written ("Optional[ScalarType]", not the "Optional[int]" it is held as)."""
    return str(getattr(argument, "real_type", argument.type))


def _kind(type_text: str) -> str:
    """What an argument of this schema type is: tensor, tensors, list, str or scalar."""
    inner = type_text.removeprefix("Optional[").removesuffix("]") if type_text.startswith("Optional[") \
        else type_text
    if inner == "Tensor":
        return "tensor"
    if inner.startswith("List[") and "Tensor" in inner:
        return "tensors"
    if inner.startswith("List["):
        return "list"
    return "str" if inner == "str" else "scalar"


def _fit(type_text: str, recorded: str) -> int | None:
    """How well a recorded type fits a schema type: 2 exactly, 0 or 1 loosely, None not at all."""
    kind, got = _kind(type_text), _LIST_TYPES.get(recorded, "tensor")
    optional = type_text.startswith("Optional[")
    if kind == got:
        return 2
    if got == "none":  # None, a string, or (older traces) a list the profiler did not write
        # an undefined tensor is recorded so too (attention backward's attn_bias)
        return 1 if optional or kind == "str" else (0 if kind in ("list", "scalar", "tensor") else None)
    return None


def _score(schema, types: tuple) -> int | None:
    """The fit of an overload's schema to the recorded types, None when it does not take them."""
    if len(schema.arguments) != len(types):
        return None
    total = 0
    for argument, recorded in zip(schema.arguments, types, strict=True):
        type_text = _real_type(argument)
        fit = None if "Dimname" in type_text else _fit(type_text, recorded)
        if fit is None:
            return None
        total += fit
    return total


def choose_overload(packet, types: tuple):
    """The overload whose schema fits the recorded argument types best (the default one on a tie)."""
    best, best_key = None, None
    for name in packet.overloads():
        overload = getattr(packet, name)
        score = _score(overload._schema, types)
        if score is not None and (best_key is None or (score, name == "default") > best_key):
            best, best_key = overload, (score, name == "default")
    if best is None:
        raise Skip("unsupported", f"no overload of {op_key(packet)} takes ({', '.join(types)})")
    return best


# -- the call rebuilt on meta -----------------------------------------------------------------------------


def _parse(text: str) -> Any:
    """A Concrete Inputs string as a Python value ("[2, 2]", "False", "0.", "-inf", "6")."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            return float(text)
        except ValueError:
            return text


def _dtype_value(value: Any) -> torch.dtype:
    """A dtype argument's recorded code as a dtype."""
    if isinstance(value, int) and value in SCALAR_TYPE_CODES:
        return SCALAR_TYPE_CODES[value]
    raise Skip("unsupported", f"dtype code {value!r} is not known here")


def _converted(type_text: str, value: Any) -> Any:
    """A parsed value as the schema type takes it; devices are always meta (nothing runs)."""
    inner = type_text.removeprefix("Optional[").removesuffix("]") if type_text.startswith("Optional[") \
        else type_text
    if inner == "ScalarType":
        return _dtype_value(value)
    if inner == "MemoryFormat":
        return _MEMORY_FORMATS.get(value, torch.contiguous_format)
    if inner == "Layout":
        return torch.strided
    simple = {"int": int, "SymInt": int, "float": float, "bool": bool}
    if inner in simple:
        return simple[inner](value)
    if inner.startswith("List[") and isinstance(value, (list, tuple)):
        element = simple.get(inner[5:-1])
        return [element(v) for v in value] if element else list(value)
    return value


def _filler(argument, type_text: str) -> Any:
    """A stand-in for a number the trace did not record and no count depends on (a dtype, layout
    or memory format stays the default: None, the input's)."""
    if any(word in type_text for word in ("ScalarType", "Layout", "MemoryFormat", "str")):
        return None
    if _kind(type_text) == "list":
        return []
    if "bool" in type_text:
        return False
    if "float" in type_text or "Scalar" in type_text:
        return 1.0
    return 0 if "dim" in argument.name else 1


class CallBuilder:
    """The args and kwargs of one recorded call, meta tensors for its tensors."""

    def __init__(self, op: RecordedOp, overload) -> None:
        self.op = op
        self.overload = overload
        self.assumed: list[str] = []
        self.tensors: list[torch.Tensor] = []
        self.list_dtype = next((TYPE_DTYPES[t] for t in op.types if t in TYPE_DTYPES), None)

    def build(self) -> tuple[list, dict]:
        """(args, kwargs) in the schema's order: positional, then keyword-only by name."""
        args: list = []
        kwargs: dict = {}
        for i, argument in enumerate(self.overload._schema.arguments):
            value = self.value(i, argument)
            if argument.kwarg_only:
                kwargs[argument.name] = value
            else:
                args.append(value)
        return args, kwargs

    def value(self, i: int, argument) -> Any:
        """Argument i: a meta tensor (or list of them), its recorded value, or a stated stand-in."""
        op = self.op
        type_text, recorded = _real_type(argument), op.types[i]
        dims = op.dims[i] if i < len(op.dims) else ()
        text = op.concrete[i] if op.concrete is not None and i < len(op.concrete) else None
        kind = _kind(type_text)
        if "Device" in type_text:
            return torch.device("meta")
        if kind == "tensor":
            return None if recorded == "" else self.tensor(dims, TYPE_DTYPES.get(recorded), recorded)
        if kind == "tensors":
            return self.tensor_list(argument, dims)
        if text:
            return _converted(type_text, _parse(text))
        if argument.name == "pin_memory" or "Generator" in type_text:
            return None if type_text.startswith("Optional[") else False
        if text == "" and type_text.startswith("Optional["):
            return None  # the profiler writes None as ""
        return self.unrecorded(argument, type_text, given=recorded != "")

    def unrecorded(self, argument, type_text: str, given: bool) -> Any:
        """A value the trace did not record (`given`: it recorded that there was one): refused when
        counts depend on it, else derived from the other arguments, else its default (noted)."""
        derived = self.derived(argument)
        if derived is not None:
            return derived
        if argument.name in REQUIRED_VALUES:
            raise Skip("no_shapes", f"needs the value of '{argument.name}', which the trace did not record "
                                    "(newer torch records it in Concrete Inputs)")
        self.assumed.append(argument.name)
        if argument.has_default_value() and not (given and argument.default_value is None):
            return argument.default_value
        if type_text.startswith("Optional[") and not given:
            return None
        return _filler(argument, type_text)

    def derived(self, argument) -> Any:
        """A value the other arguments fix: a norm's shape is its weight's; which gradients a
        backward other than a convolution's writes (all of them, stated: bytes only)."""
        name = argument.name
        if name == "normalized_shape":
            weights = [d for a, d in zip(self.overload._schema.arguments, self.op.dims, strict=False)
                       if a.name == "weight" and d]
            return list(weights[0]) if weights else None
        if name == "output_mask" and "convolution" not in self.overload._schema.name:
            self.assumed.append("output_mask all True")
            return [True] * (getattr(argument, "N", None) or 3)
        return None

    def tensor(self, dims, dtype: torch.dtype | None, recorded: str) -> torch.Tensor:
        """A meta tensor of the recorded shape and dtype."""
        if dtype is None:
            raise Skip("unsupported", f"tensor type '{recorded}' is not known here")
        if not all(isinstance(d, int) for d in dims):
            raise Skip("no_shapes", f"a tensor's dims are not a shape: {dims!r:.60}")
        t = torch.empty(dims, dtype=dtype, device="meta")
        self.tensors.append(t)
        return t

    def tensor_list(self, argument, dims) -> list:
        """A TensorList argument: one meta tensor per recorded shape (their dtype is not recorded)."""
        if not dims or not all(isinstance(d, tuple) for d in dims):
            raise Skip("no_shapes", f"the list '{argument.name}' was recorded without its tensors' shapes")
        dtype = torch.int64 if argument.name == "indices" else self.list_dtype
        if dtype is None:
            dtype = torch.float32
            self.assumed.append(f"{argument.name} dtype float32")
        return [self.tensor(d, dtype, "TensorList") for d in dims]

    def compute_dtype(self, out: Any) -> str:
        """The op's dtype as a capture takes it: its first floating input's, else its output's."""
        for t in self.tensors:
            if t.is_floating_point():
                return str(t.dtype).removeprefix("torch.")
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        if isinstance(first, torch.Tensor):
            return str(first.dtype).removeprefix("torch.")
        return str(self.tensors[0].dtype).removeprefix("torch.") if self.tensors else ""


# -- counting ---------------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    """An exception as one short line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:200]


class ShapeCounter:
    """Counts recorded ops with the project's formula registry and byte rules; memoised per op."""

    def __init__(self, host: PluginHost | None = None) -> None:
        self.book: FormulaBook = formula_book(host or get_host())
        self._memo: dict[RecordedOp, RecordedCount] = {}
        self._overloads: dict[tuple[str, tuple], Any] = {}

    def count(self, op: RecordedOp) -> RecordedCount:
        """The op's FLOPs and bytes, or a status and reason; never raises."""
        known = self._memo.get(op)
        if known is None:
            try:
                known = self._count(op)
            except Skip as skip:
                known = RecordedCount(skip.status, reason=skip.reason)
            except Exception as exc:  # a failure of one op's resolution or formula is that op's answer
                known = RecordedCount("unsupported", reason=_one_line(exc))
            self._memo[op] = known
        return known

    def overload(self, op: RecordedOp):
        """The op overload a recorded op called (Skip when it is free or has no shapes)."""
        key = (op.name, op.types)
        if key not in self._overloads:
            try:
                self._overloads[key] = self._resolve(op)
            except Skip as skip:
                self._overloads[key] = skip
        found = self._overloads[key]
        if isinstance(found, Skip):
            raise found
        return found

    def _resolve(self, op: RecordedOp):
        packet = packet_of(op.name)
        if op_key(packet) in FREE_OPS or op_key(packet) in _HOST_READS:
            raise Skip("free", "")
        if not op.types and all(getattr(packet, n)._schema.arguments for n in packet.overloads()):
            raise Skip("no_shapes", "the trace recorded no Input Dims (profile with record_shapes=True)")
        overload = choose_overload(packet, op.types)
        if overload.is_view:
            raise Skip("free", "")
        return overload

    def _count(self, op: RecordedOp) -> RecordedCount:
        overload = self.overload(op)
        builder = CallBuilder(op, overload)
        args, kwargs = builder.build()
        records, out = self.run(overload, args, kwargs)
        return summarise(records, self.book, builder.compute_dtype(out), ", ".join(builder.assumed))

    def run(self, overload, args: list, kwargs: dict) -> tuple[list[OpRecord], Any]:
        """Call the op on meta tensors under the capture's recording: its records and output."""
        with warnings.catch_warnings(), torch.no_grad(), recording(None, self.book) as rec:
            warnings.simplefilter("ignore")  # deprecations of arguments as recorded (is_pinned's device)
            if op_key(overload) == "aten.scaled_dot_product_attention":  # the capture's fused record
                out = F.scaled_dot_product_attention(*args, **kwargs)
            elif op_key(overload) in BACKEND_CONVOLUTIONS:
                out = torch.ops.aten.convolution.default(*as_convolution(overload, args, kwargs))
            else:
                out = overload(*args, **kwargs)
        return rec.ops, out


def as_convolution(overload, args: list, kwargs: dict) -> list:
    """A backend convolution's arguments as aten.convolution takes them."""
    given = dict(zip([a.name for a in overload._schema.arguments], args, strict=False)) | kwargs
    stride = list(given["stride"])
    transposed = given.get("transposed", overload._schema.name.endswith("_transpose"))
    return [given["self"] if "self" in given else given["input"], given["weight"], given.get("bias"), stride,
            given["padding"], given["dilation"], transposed, given.get("output_padding", [0] * len(stride)),
            given["groups"]]


def _source(record: OpRecord, book: FormulaBook) -> str:
    """Who gave a record's FLOPs: a plugin's name, "rooflinekit", "torch" or "data movement"."""
    if record.name == SDPA_NAME:
        return "rooflinekit"
    if record.name in DATA_MOVEMENT_OPS:
        return "data movement"
    return book.owners.get(record.name) or book.sources.get(record.name, "")


def summarise(records: list[OpRecord], book: FormulaBook, dtype: str, assumed: str) -> RecordedCount:
    """One count from the records a call made: their sums, and the first thing left uncounted."""
    if not records:
        return RecordedCount("free", dtype=dtype, assumed=assumed)
    flops = sum(r.flops for r in records)
    nbytes = sum(r.bytes for r in records)
    formula = "+".join(dict.fromkeys(s for s in (_source(r, book) for r in records if r.counted) if s))
    failed = next((r for r in records if "formula_error" in r.attrs), None)
    if failed is not None:
        return RecordedCount("unsupported", flops, nbytes, dtype, formula,
                             f"{failed.name}'s FLOP formula failed: {failed.attrs['formula_error']}"[:200], assumed)
    missing = sorted({r.name for r in records if not r.counted})
    if missing:
        return RecordedCount("no_formula", flops, nbytes, dtype, formula,
                             f"no FLOP formula for {', '.join(missing)} (bytes counted)", assumed)
    return RecordedCount("counted", flops, nbytes, dtype, formula, "", assumed)
