"""A pipeline stage's share of a step: the layer stack cut into `--pp N` stages (`Layout`), which
op and module each stage holds, and `PipelineStage`, the transform that keeps one stage's ops and
attention rows (docs/parallel.md, Pipeline parallelism).

The stages are contiguous ranges of the model's largest layer stack
(rooflinekit.stages.repeated_layers.layer_repeats), split as evenly as possible
(rooflinekit.stages.pipeline_parallel.split_layers); an op outside the stack belongs to the stage of
the last layer that ran before it (the embedding to the first stage, the final norm and the head to
the last). The profile's annotate step (rooflinekit.analyses.pipeline_parallel) prices each stage's
share and composes the pipelined step from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rooflinekit.core.errors import UserError
from rooflinekit.stages.capture import OpRecord
from rooflinekit.stages.pipeline_parallel import split_layers
from rooflinekit.stages.repeated_layers import layer_repeats
from rooflinekit.transforms.base import Counted, TransformContext, rebuild_ops


@dataclass
class Layout:
    """The layer stack a pipeline cuts: its path, its layers' paths in order, each stage's range."""

    stack: str
    layers: list[str]
    ranges: list[range]

    def layer_index(self, path: str) -> int | None:
        """The index of the stack's layer that module `path` lies in (itself included), or None."""
        try:
            return self._paths[path]
        except KeyError:
            pass
        prefix = f"{self.stack}." if self.stack else ""
        index = None
        if path.startswith(prefix):
            head = path[len(prefix):].split(".", 1)[0]
            index = self._index.get(f"{prefix}{head}")
        self._paths[path] = index
        return index

    def stage_of_layer(self, index: int) -> int:
        return next(i for i, r in enumerate(self.ranges) if index in r)

    def __post_init__(self):
        self._index = {p: i for i, p in enumerate(self.layers)}
        self._paths: dict[str, int | None] = {}  # module path -> layer_index, as asked


def layout_of(model: torch.nn.Module, pp: int) -> Layout:
    """The stages of `model` under `pp`: its largest layer stack split evenly. Refuses a pp the
    stack cannot take (more stages than layers, or no stack)."""
    stacks: dict[str, list[str]] = {}
    for child in layer_repeats(model).modules:
        stacks.setdefault(child.rpartition(".")[0], []).append(child)
    if not stacks:
        raise UserError(f"--pp {pp}: the model has no stack of repeated layers (a ModuleList or Sequential) "
                        "to cut into stages")
    stack, layers = max(stacks.items(), key=lambda kv: len(kv[1]))
    if pp > len(layers):
        raise UserError(f"--pp {pp} exceeds the {len(layers)} layers of the layer stack '{stack}': every "
                        f"stage needs a layer (give at most --pp {len(layers)})")
    return Layout(stack, layers, split_layers(len(layers), pp))


def op_stages(ops: list[OpRecord], layout: Layout) -> list[int]:
    """The stage of each op: its layer's, else the stage of the last layer that ran before it (the
    first stage before any)."""
    out, current = [], 0
    for op in ops:
        index = layout.layer_index(op.module)
        if index is not None:
            current = layout.stage_of_layer(index)
        out.append(current)
    return out


def module_stages(ops: list[OpRecord], stages: list[int]) -> dict[str, int]:
    """The stage each module path ran on (its first op's)."""
    out: dict[str, int] = {}
    for op, stage in zip(ops, stages, strict=True):
        out.setdefault(op.module, stage)
    return out


def stage_of_path(path: str, layout: Layout, modules: dict[str, int]) -> int:
    """The stage holding module `path`: its layer's, the stage its ops (or an ancestor's) ran on,
    else the first."""
    index = layout.layer_index(path)
    if index is not None:
        return layout.stage_of_layer(index)
    while True:
        if path in modules:
            return modules[path]
        if not path:
            return 0
        path = path.rpartition(".")[0]


@dataclass(frozen=True)
class PipelineStage:
    """One stage's share of a pipelined step: `apply` keeps the ops `op_stages` puts on `stage` of
    `layout`, renumbered (`rebuild_ops`), and the attention rows of the modules the stage holds
    (`stage_of_path`), their op indices renumbered with them, and says so in a note. The capture's
    other fields (module classes, parameters, liveness) stay the step's."""

    layout: Layout
    stage: int
    name: str = "pipeline stage"

    def applies(self, ctx: TransformContext) -> bool:
        """A pipelined request: `--pp` above 1."""
        return ctx.deployment.pp > 1

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        cap = counted.capture
        stages = op_stages(cap.ops, self.layout)
        drop = {op.index for op, s in zip(cap.ops, stages, strict=True) if s != self.stage}
        ops, index, _ = rebuild_ops(cap.ops, drop, {})
        modules = module_stages(cap.ops, stages)
        rows = [replace(row, op_indices=[index[i] for i in row.op_indices if i in index],
                        kv_op_indices=[index[i] for i in row.kv_op_indices if i in index])
                for row in counted.attention if stage_of_path(row.module, self.layout, modules) == self.stage]
        span = self.layout.ranges[self.stage]
        note = (f"pipeline stage {self.stage} of {len(self.layout.ranges)}: layers {span.start}-{span.stop - 1} "
                f"of the stack '{self.layout.stack}', {len(ops)} of the step's {len(cap.ops)} ops")
        return replace(counted, capture=replace(cap, ops=ops), attention=rows).with_notes(note)
