"""What an op's schema says about its operands: which it reads, writes or returns an alias of.

Computed once per op overload and process (schema_info); the recorder adds the formula.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rooflinekit.core.compat import OpOverload
from rooflinekit.stages.capture.meta_memo import memoisable

#: Matrix-multiply ops whose non-parameter operands can carry K/V (attention sinks).
MATMUL_OPS = {"aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.matmul", "aten.dot"}

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

#: Schema types (as str(argument.type) spells them, containers unwrapped) that never hold a tensor.
_SCALAR_TYPES = {"int", "float", "bool", "str", "number", "complex", "Device", "Layout", "ScalarType",
                 "MemoryFormat", "SymInt", "SymFloat", "SymBool", "Generator", "Dimname", "QScheme"}


@dataclass(frozen=True)
class OpInfo:
    """Per-op facts that do not change between calls, so the recorder's per-call work stays small."""

    name: str
    args: tuple[tuple[str, bool], ...]  # (argument name, written by the op)
    returns_alias: tuple[bool, ...]  # return i aliases an input
    # derived from the above, once per op overload
    any_alias: bool = False  # some return aliases an input
    partial: tuple[str, bool] | None = None  # _PARTIAL_WRITES[name]
    gather_arg: str | None = None  # _GATHERS[name]
    reads_written: bool = True  # a written argument is also read (not in _OVERWRITES)
    matmul: bool = False  # in MATMUL_OPS
    #: (position, name, written) of the arguments whose schema type can hold a tensor, in order
    operands: tuple[tuple[int, str, bool], ...] = ()
    #: names of the out= arguments of an `.out` overload (schema `is_out`): written whole, never
    #: read, and not handed to a FLOP formula, whose `out=` is the op's output
    out_args: frozenset[str] = frozenset()
    formula: Callable | None = None  # the FLOP formula (the recorder's FormulaBook)
    counted: bool = False  # a formula, or a data-movement op (0 FLOPs by definition)
    memo: bool = False  # its meta outputs may come from the capture's MetaMemo (meta_memo.memoisable)


def _may_hold_tensors(schema_type) -> bool:
    """Whether an argument of this schema type can be (or hold) a tensor: anything but scalars and
    lists of them ("Optional[List[int]]")."""
    text = str(schema_type)
    for wrapper in ("Optional[", "List[", "]"):
        text = text.replace(wrapper, "")
    return text not in _SCALAR_TYPES


def _is_out(argument) -> bool:
    """Whether a schema argument is an out= argument: keyword-only and written (`is_out`)."""
    return bool(getattr(argument, "is_out", argument.kwarg_only and argument.alias_info is not None
                        and argument.alias_info.is_write))


def direct(func) -> Callable:
    """What calling an op overload calls: its C++ op, without OpOverload.__call__'s Python frame
    (one per op, 10^4 ops); anything else (TorchBindOpOverload's own __call__) as it is."""
    return func._op if type(func) is OpOverload else func


#: id(op overload) -> (the overload, held so that its id stays its own; its OpInfo without a
#: formula): what an op's schema says, the same for every capture of the process.
_SCHEMA_INFOS: dict[int, tuple[object, OpInfo]] = {}


def schema_info(func, name: str) -> OpInfo:
    """The OpInfo of op overload `func` (key `name`) from its schema, computed once per process."""
    entry = _SCHEMA_INFOS.get(id(func))
    if entry is not None:
        return entry[1]
    schema = func._schema
    returns_alias = tuple(r.alias_info is not None for r in schema.returns)
    args_info = tuple((a.name, a.alias_info is not None and a.alias_info.is_write) for a in schema.arguments)
    info = OpInfo(
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
        out_args=frozenset(a.name for a in schema.arguments if _is_out(a)),
        memo=memoisable(func, any(returns_alias) or any(written for _, written in args_info)),
    )
    _SCHEMA_INFOS[id(func)] = (func, info)
    return info
