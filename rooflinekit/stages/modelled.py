"""Modelled modules: plugins replace data-dependent blocks (MoE routing) with analytic models.

During capture, every module for which a plugin's `rooflinekit_module_model` hook answers has its
forward replaced by the model's `forward`, which returns an output of the right shape and emits
OpRecords (kind "modelled") carrying the assumption they rest on.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

import torch

from rooflinekit.core.errors import UserError
from rooflinekit.core.model_facts import cached, fact, module_tree
from rooflinekit.core.request import Deployment
from rooflinekit.core.specs import ModuleModel
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.core.swap import own_attribute
from rooflinekit.stages import collectives
from rooflinekit.stages.capture import OpRecord, active_recorder
from rooflinekit.stages.capture.forward import active


@contextmanager
def suppressed() -> Iterator[None]:
    """Ops run inside are not recorded (shape bookkeeping of a modelled forward)."""
    rec = active_recorder()
    if rec is not None:
        rec.suppress += 1
    try:
        yield
    finally:
        if rec is not None:
            rec.suppress -= 1


@dataclass(frozen=True)
class OpCounts:
    """What one modelled op does: its FLOPs, the bytes it reads and writes, and of those read the
    weight bytes (`param_bytes`). Each must be a finite number >= 0 (checked by `emit`)."""

    flops: float
    bytes_read: float
    bytes_written: float
    param_bytes: float = 0.0


@dataclass(frozen=True)
class Provenance:
    """What the records of one module model's call share: the module's path, the dtype the work
    runs at, and the assumption the numbers rest on (named in the report)."""

    module: str = ""
    dtype: str = "bf16"
    assumption: str = ""


def emit(name: str, counts: OpCounts | None = None, *, at: Provenance | None = None, counted: bool = True,
         shapes: str = "", experts: Mapping[str, float] | None = None, kernel: Mapping[str, object] | None = None,
         **before_0_3) -> OpRecord | None:
    """Add one modelled op to the capture in progress (no-op outside a capture).

    Counts must be finite numbers >= 0: anything else stops the run with one line naming the
    module model and the field (a wrong count would silently corrupt every total). `experts`
    declares that the record's weight bytes (`param_bytes`, also read) are a fixed size per expert
    times the expected distinct experts E*(1-(1-k/E)^T) x share, with {"tokens": T, "k": k,
    "experts": E, "share": share}, and its other counts polynomial: a step model then fits them
    from a few batches (rooflinekit.stages.stepmodel). `kernel` declares the kernel's shape as a
    database of measured kernels is asked for it ({"kind", "dtype", dimensions...}:
    rooflinekit.stages.kernel_times), where an efficiency source names one.

    Deprecated since 0.3, until 0.4 (`before_0_3`): the counts and provenance as keywords
    (`flops=`, `bytes_read=`, `bytes_written=`, `param_bytes=`, `module=`, `dtype=`, `assumption=`),
    with a DeprecationWarning.
    """
    if before_0_3:
        counts, at = _from_keywords("emit", before_0_3, counts, at)
    if counts is None:
        raise TypeError("emit() missing argument 'counts' (an OpCounts)")
    at = at or Provenance()
    rec = active_recorder()
    if rec is None:
        return None
    for field_name in ("flops", "bytes_read", "bytes_written", "param_bytes"):
        _check_count(name, at.module, field_name, getattr(counts, field_name))
    return rec.emit(
        OpRecord(
            index=0, name=name, module=at.module, flops=float(counts.flops), bytes_read=float(counts.bytes_read),
            bytes_written=float(counts.bytes_written), dtype=at.dtype, counted=counted, kind="modelled",
            param_bytes=float(counts.param_bytes), shapes=shapes,
            attrs={"assumption": at.assumption, **({"expected_experts": dict(experts)} if experts else {}),
                   **({"kernel": dict(kernel)} if kernel else {})},
        )
    )


def _from_keywords(function: str, given: dict, counts: OpCounts | None,
                   at: Provenance | None) -> tuple[OpCounts | None, Provenance | None]:
    """`counts` and `at` of a call in the form before 0.3 (the fields as keywords), with a warning."""
    count_fields = ("flops", "bytes_read", "bytes_written", "param_bytes") if function == "emit" else ()
    known = {*count_fields, "module", "dtype", "assumption"}
    unknown = sorted(set(given) - known)
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    if (counts is not None and set(given) & set(count_fields)) or (at is not None and set(given) - set(count_fields)):
        raise TypeError(f"{function}() got both {'counts' if counts is not None else 'at'} and its fields as keywords")
    new = "emit(name, OpCounts(...), at=Provenance(...), ...)" if function == "emit" else \
        "emit_collective(collective, ..., at=Provenance(...))"
    warnings.warn(f"{function}() with {', '.join(f'{k}=' for k in given)} is deprecated since rooflinekit 0.3: "
                  f"call {new}", DeprecationWarning, stacklevel=3)
    if counts is None and count_fields:
        missing = [f for f in count_fields[:3] if f not in given]
        if missing:
            raise TypeError(f"{function}() missing keyword argument {missing[0]!r}")
        counts = OpCounts(**{f: given[f] for f in count_fields if f in given})
    if at is None:
        at = Provenance(**{f: given[f] for f in ("module", "dtype", "assumption") if f in given})
    return counts, at


#: The module model whose forward is running (named in errors about its counts).
_RUNNING: list[str] = []


def _check_count(name: str, module: str, field_name: str, value: object) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if not ok:
        who = f"module model {_RUNNING[-1]}" if _RUNNING else "a module model"
        raise UserError(f"{who} emitted {name} at {module or '(root)'} with {field_name}={value!r}: counts must "
                        "be finite numbers >= 0 (a bug in that plugin; disable it with "
                        "ROOFLINEKIT_DISABLE_PLUGINS=<name>)")


def _answers(model: torch.nn.Module, workload, host, deployment) -> list[tuple]:
    """(path, module, ModuleModel or None, plugin name) for every module of the model."""
    if not host.implemented(host.hook.rooflinekit_module_model):  # no module is asked (1,215 in DeepSeek-V3)
        return []
    with stdout_to_stderr():  # one redirect for the walk (plugins' prints), not one per module
        return [(path, module, *host.first(host.hook.rooflinekit_module_model, module=module, path=path, workload=workload,
                                                deployment=deployment))
                for path, module in module_tree(model)]


@dataclass(frozen=True)
class ModelCall:
    """One call of a modelled module in a capture: its inputs and the records its model emitted
    (indices into the capture's ops), so another deployment's model can be asked again without
    running the model's forward (rerun). Tensors are kept as their shape and dtype, never held:
    holding them would keep them alive past their last use and change the activation peak."""

    path: str
    module: torch.nn.Module
    args: tuple
    kwargs: dict
    records: range

    @classmethod
    def of(cls, path: str, module: torch.nn.Module, args: tuple, kwargs: dict, records: range) -> ModelCall:
        return cls(path, module, tuple(_described(a) for a in args),
                   {k: _described(v) for k, v in kwargs.items()}, records)

    def inputs(self) -> tuple[tuple, dict]:
        """The call's arguments, each tensor an empty one on the meta device of its shape and dtype."""
        return (tuple(_made(a) for a in self.args), {k: _made(v) for k, v in self.kwargs.items()})


@dataclass(frozen=True)
class _TensorLike:
    shape: tuple[int, ...]
    dtype: torch.dtype


def _described(value):
    if isinstance(value, torch.Tensor):
        return _TensorLike(tuple(value.shape), value.dtype)
    if type(value) in (list, tuple):
        return type(value)(_described(v) for v in value)
    return value


def _made(value):
    if isinstance(value, _TensorLike):
        return torch.empty(value.shape, dtype=value.dtype, device="meta")
    if type(value) in (list, tuple):
        return type(value)(_made(v) for v in value)
    return value


def answers_for(model: torch.nn.Module, workload, host, deployment) -> list[tuple]:
    """(path, module, ModuleModel or None, plugin) per module, asked once per model, workload
    less its batch and context, and deployment (a sweep's points share them; model_facts)."""
    key = (*fact("module_models"), id(host), replace(workload, batch=0, context=0), deployment)
    return cached(model, key, lambda: _answers(model, workload, host, deployment))


def modelled_paths(answers: list[tuple]) -> dict[str, type]:
    """path -> the type of the module model in place there."""
    return {path: type(answer) for path, _, answer, _ in answers if answer is not None}


@contextmanager
def module_models(model: torch.nn.Module, workload, host, deployment=None,
                  calls: list[ModelCall] | None = None) -> Iterator[list[ModuleModel]]:
    """Patch the forward of every module a plugin models (asked with the workload and the
    deployment, `rooflinekit.core.request`); restore them afterwards. With `calls`, each modelled
    call is appended to it (ModelCall)."""
    deployment = deployment or Deployment()
    used: list[ModuleModel] = []
    with ExitStack() as patches:
        answers = answers_for(model, workload, host, deployment)
        for path, module, answer, plugin in answers:
            if answer is None:
                continue
            who = f"{type(answer).__name__} (plugin '{plugin}')"

            def forward(*args, _m=answer, _mod=module, _path=path, _who=who, **kwargs):
                _RUNNING.append(_who)
                rec = active_recorder()
                first = len(rec.ops) if rec is not None else 0
                try:
                    output = _m.forward(_mod, _path, args, kwargs)
                    if calls is not None and rec is not None:
                        calls.append(ModelCall.of(_path, _mod, args, kwargs, range(first, len(rec.ops))))
                    return _linked(rec, first, (*args, *kwargs.values()), output)
                except (UserError, KeyboardInterrupt):
                    raise
                except Exception as exc:  # the plugin's code, not the model's: say whose
                    raise UserError(f"{_who} failed modelling module '{_path}': {type(exc).__name__}: "
                                    f"{exc}") from None
                finally:
                    _RUNNING.pop()

            patches.enter_context(own_attribute(module, "forward", forward))
            if not any(type(u) is type(answer) for u in used):
                used.append(answer)
        yield used


#: The fields of a modelled record another deployment's model may change (the rest, the links to
#: the block's input and output and its place, stay the capture's).
RERUN_FIELDS = ("flops", "bytes_read", "bytes_written", "param_bytes", "dtype", "counted", "shapes", "attrs")


def rerun(ops: list[OpRecord], calls: list[ModelCall], answers: list[tuple], recorder) -> list[OpRecord] | None:
    """`ops` with each call's records as `answers`' models emit them (`recorder` a fresh Recorder to
    emit into), or None where a call's model emits records of other names or kinds (a collective
    only under expert parallelism): that deployment needs its own capture."""
    models = {path: answer for path, _, answer, _ in answers if answer is not None}
    out = list(ops)
    for call in calls:
        recorder.ops.clear()
        recorder.stack[:] = [(id(call.module), call.path)]
        _RUNNING.append(f"{type(models[call.path]).__name__}")
        try:
            args, kwargs = call.inputs()
            with active(recorder):
                models[call.path].forward(call.module, call.path, args, kwargs)
        finally:
            _RUNNING.pop()
        fresh = recorder.ops
        if len(fresh) != len(call.records) or any(
                (a.name, a.kind) != (ops[i].name, ops[i].kind) for a, i in zip(fresh, call.records, strict=True)):
            return None
        for a, i in zip(fresh, call.records, strict=True):
            out[i] = copy.copy(ops[i])
            out[i].__dict__.update({f: getattr(a, f) for f in RERUN_FIELDS})
    return out


def _tensors(values) -> list[torch.Tensor]:
    return [t for t in values if isinstance(t, torch.Tensor)]


def _linked(rec, first: int, inputs: tuple, output):
    """`output`, with the records the module model emitted (from index `first`) linked to the data
    the block moves: each reads the block's tensor inputs, the last writes its output. The
    block then sits between its input and its output as an anchor, as the real block would, and the
    fused view does not join the element-wise ops after it to those before it."""
    if rec is None or len(rec.ops) <= first:
        return output
    sid = rec.storages.id
    read = tuple((sid(t), float(t.numel() * t.element_size())) for t in _tensors(inputs))
    for record in rec.ops[first:]:  # each depends on the block's input (none is reordered before it)
        record.reads = tuple(record.reads) + read
    last = rec.ops[-1]
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    last.writes = tuple(last.writes) + tuple((sid(t), float(t.numel() * t.element_size())) for t in _tensors(outputs))
    return output


def emit_collective(collective: str, *, group_size: int, message_bytes: float, at: Provenance | None = None,
                    shapes: str = "", copies: int = 0, experts: int = 0, **before_0_3) -> OpRecord | None:
    """Add one modelled collective (e.g. an expert-parallel all-to-all) to the capture in progress.

    An expert-parallel all-to-all may give its routing: each token's `copies` (top-k) over
    `experts` expert slots spread evenly over the group; the time bound then lets a group that
    spans nodes send each token once per destination node (rooflinekit.stages.collectives).

    `message_bytes` follows rooflinekit.stages.collectives' conventions (all-reduce: the buffer; all-to-all:
    this GPU's send buffer); the record carries 0 FLOPs and 0 HBM bytes, its ring wire bytes in attrs.

    Deprecated since 0.3, until 0.4 (`before_0_3`): `module=`, `dtype=` and `assumption=` as
    keywords instead of `at`, with a DeprecationWarning.
    """
    if before_0_3:
        _, at = _from_keywords("emit_collective", before_0_3, None, at)
    routing = {"copies": int(copies), "experts": int(experts)} if copies and experts else {}
    return _collective(collective, group_size, message_bytes, at or Provenance(), shapes, routing)


@dataclass(frozen=True)
class Dispatch:
    """One expert-parallel all-to-all of a module model: this GPU's `tokens` (the busiest rank's
    under an imbalance), each sent to `top_k` of `experts` expert slots spread over `group_size`
    GPUs, `hidden` elements of `itemsize` bytes per copy; the dispatch before the experts, or with
    `combine` the combine after them."""

    tokens: float
    top_k: int
    hidden: int
    itemsize: int
    group_size: int
    experts: int
    combine: bool = False


def emit_dispatch(d: Dispatch, at: Provenance | None = None) -> OpRecord | None:
    """Add an expert-parallel all-to-all (emit_collective's "all_to_all" with its routing) that
    declares its shape for a database of measured kernels (rooflinekit.stages.kernel_times)."""
    rows = d.tokens * d.top_k
    kernel = {"kind": "all_to_all", "tokens": d.tokens, "hidden": d.hidden, "top_k": d.top_k, "experts": d.experts,
              "ep": d.group_size, "itemsize": d.itemsize, "combine": int(d.combine)}
    return _collective("all_to_all", d.group_size, rows * d.hidden * d.itemsize, at or Provenance(),
                       f"{rows:g}x{d.hidden}", {"copies": d.top_k, "experts": d.experts, "kernel": kernel})


def _collective(collective: str, group_size: int, message_bytes: float, at: Provenance, shapes: str,
                extra: dict) -> OpRecord | None:
    rec = active_recorder()
    if rec is None:
        return None
    return rec.emit(
        OpRecord(
            index=0, name=f"comm.{collective}", module=at.module, flops=0.0, bytes_read=0.0,
            bytes_written=0.0, dtype=at.dtype, counted=True, kind="collective", shapes=shapes,
            attrs=collectives.attrs(collective, group_size, message_bytes, "modelled", assumption=at.assumption,
                                    **extra),
        )
    )
