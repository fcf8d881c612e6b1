"""Each event's counted work rolled up to the module path its op ran in and to the phase of the
step (forward, backward, optimizer), as `rooflinekit profile` rolls its ops up to modules."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.trace.attribution import Attributed
from rooflinekit.trace.events import CpuOp, Trace
from rooflinekit.trace.modules import backward_paths, hierarchy_paths, op_paths
from rooflinekit.trace.naming import Path, attribute_names, row_name
from rooflinekit.trace.report import Row
from rooflinekit.trace.rows import grouped

BACKWARD = "autograd::engine::evaluate_function"
OPTIMIZER = ("Optimizer.step#", "Optimizer.zero_grad#")
#: Phase of events no op launched (NCCL, library kernels, replays).
NO_PHASE = "(no launching op)"
#: Row of events whose op ran in no recorded module (or directly in the top-level one).
NO_MODULE = "(top level)"
#: The report's one line for a trace without module ranges.
NO_HIERARCHY = ("the trace records no module hierarchy (no nn.Module ranges or Module Hierarchy; record "
                "with with_stack=True, with_modules=True): no module roll-up")


def phase_of(item: Attributed) -> str:
    """forward, backward (under an autograd engine call, or an op of the backward thread) or
    optimizer (under an Optimizer.step#/zero_grad# range), from the ops around the launch."""
    ops = item.launched.ops
    if not ops:
        return NO_PHASE
    if any(op.name.startswith(OPTIMIZER) for op in ops):
        return "optimizer"
    if any(op.name.startswith(BACKWARD) or op.fwd_tid for op in ops):
        return "backward"
    return "forward"


@dataclass
class ModuleIndex:
    """Each CPU op's recorded module path, and the model's names for the paths when given."""

    paths: dict[CpuOp, Path]
    names: dict[Path, str] | None = None

    @classmethod
    def of(cls, trace: Trace, model: nn.Module | None = None) -> ModuleIndex:
        """The index of a trace: module ranges, else Module Hierarchy; backward ops by sequence."""
        paths = op_paths(trace) or hierarchy_paths(trace)
        paths.update(backward_paths(trace, paths))
        names = attribute_names(list(dict.fromkeys(paths.values())), model) if model is not None else None
        return cls(paths, names)

    def path(self, item: Attributed) -> Path | None:
        """The recorded path of the op an event is charged to (else of the innermost op around it)."""
        ops: list[CpuOp] = [item.op] if item.op is not None else []
        ops += [op for op in item.launched.ops if op is not item.op]
        return next((self.paths[op] for op in ops if op in self.paths), None)

    def row(self, item: Attributed, depth: int | None) -> str:
        """The module row of an event: its path cut to `depth` levels below the top-level module."""
        path = self.path(item)
        return (row_name(path, depth, self.names) if path is not None else "") or NO_MODULE


def phase_rows(items: list[Attributed], hw: HardwareSpec) -> list[Row]:
    """Time, FLOPs and achieved rates per phase, most time first."""
    return grouped(items, hw, phase_of)


def module_rows(items: list[Attributed], hw: HardwareSpec, index: ModuleIndex, depth: int | None = 2,
                top: int | None = None) -> list[Row]:
    """Time, FLOPs and achieved rates per module path cut to `depth` levels, most time first."""
    return grouped(items, hw, lambda i: index.row(i, depth), top)
