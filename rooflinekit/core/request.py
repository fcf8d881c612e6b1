"""The request: what runs (`Workload`) and how it is deployed (`Deployment`), both frozen and torch-free.

A workload is the step the model's code executes: phase, batch, context, new tokens per sequence,
activation dtype, device and the model's own `-O` options. A deployment is everything about how
that step is served that the model's code does not know: the hardware entry, tensor / expert /
pipeline parallel degrees and replicas, stored weight and KV cache formats, the kernels view and
the share of memory usable. Model options never carry deployment knobs; every output names a
non-default deployment in words (`Deployment.words`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

from rooflinekit.core import settings
from rooflinekit.core.settings import (  # noqa: F401 -- the constants' old home, still imported from here
    DEFAULT_FRACTION,
    DEFAULT_GROUP_SIZE,
    KERNELS,
    KV_BYTES,
    OVERLAPS,
    WEIGHT_BITS,
    Setting,
)

PHASES = ("prefill", "decode")
#: The phase of a mixed step (decode groups and a chunked-prefill slice, the weights read once).
MIXED = "mixed"
#: The dtype keys of the activation dtypes (as the hardware tables name them).
DTYPE_KEYS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
              "fp32": "fp32", "float32": "fp32", "float": "fp32", "fp8": "fp8"}


@dataclass(frozen=True)
class Workload:
    """What runs: phase, batch, context, new tokens per sequence, dtype, device, model options."""

    phase: str
    batch: int
    context: int
    dtype: str = "bf16"
    device: str = "meta"
    #: The model's own options (`-O KEY=VALUE`), sorted pairs; never a deployment knob.
    options: tuple[tuple[str, object], ...] = ()
    #: New tokens per sequence in decode (multi-token decode: speculative or MTP verify).
    decode_q_len: int = 1
    #: A mixed step's decode groups: (context, sequences) pairs; empty for a plain step.
    mix: tuple[tuple[int, int], ...] = ()
    #: A mixed step's chunked-prefill slice: `chunk` new tokens after `chunk_offset` cached ones (0: none).
    chunk: int = 0
    chunk_offset: int = 0

    @property
    def mixed(self) -> bool:
        """A mixed step (phase "mixed"): decode groups and/or a prefill chunk, the weights read once."""
        return bool(self.mix or self.chunk)

    def segments(self) -> list[Segment]:
        """The parts of the step, each a plain step of its own (`segment_workload`): every decode
        group at its context, then the prefill chunk; a plain step is its one segment."""
        if not self.mixed:
            q = self.q_len
            return [Segment(self.phase, self.batch, self.context, q, self.context - q)]
        q = self.decode_q_len
        parts = [Segment("decode", n, c, q, c - q) for c, n in self.mix]
        if self.chunk:
            end = self.chunk_offset + self.chunk
            parts.append(Segment("prefill", 1, end, self.chunk, self.chunk_offset))
        return parts

    def segment_workload(self, segment: Segment) -> Workload:
        """The plain workload one segment runs as: a decode group as decode; a chunk at offset 0 as a
        prefill of `chunk` tokens, after P cached positions as a decode step of q_len `chunk` over a
        cache of P + chunk slots (causal among the new tokens, aligned to the bottom right)."""
        phase, batch, context, q, offset = segment
        if phase == "prefill" and offset == 0:
            return Workload("prefill", batch, context, self.dtype, self.device, self.options)
        return Workload("decode", batch, context, self.dtype, self.device, self.options, decode_q_len=q)

    @property
    def dtype_key(self) -> str:
        """The activation dtype as the hardware tables name it ("bf16", "fp8", ...)."""
        return DTYPE_KEYS.get(self.dtype, self.dtype)

    @property
    def q_len(self) -> int:
        """Query positions per sequence: decode_q_len (1 unless multi-token) in decode and in a mixed
        step (its decode sequences'), `context` in prefill."""
        return self.decode_q_len if self.phase in ("decode", MIXED) else self.context

    @property
    def tokens(self) -> int:
        """New tokens processed in this step, over the whole batch (a mixed step: every segment's)."""
        if self.mixed:
            return sum(s.batch * s.q_len for s in self.segments())
        return self.batch * self.q_len

    def to_dict(self) -> dict:
        out = {"phase": self.phase, "batch": self.batch, "context": self.context, "q_len": self.q_len,
               "tokens": self.tokens, "dtype": self.dtype, "device": self.device, "options": dict(self.options)}
        if self.mixed:
            out.update(mix=[[c, n] for c, n in self.mix], chunk=self.chunk, chunk_offset=self.chunk_offset)
        return out


class Segment(NamedTuple):
    """One part of a step: `batch` sequences of `q_len` new tokens each after `offset` cached
    positions, attending `context` = offset + q_len positions (`Workload.segments`)."""

    phase: str
    batch: int
    context: int
    q_len: int
    offset: int


def mixed_workload(base: Workload, mix: tuple[tuple[int, int], ...] = (), chunk: int = 0,
                   chunk_offset: int = 0) -> Workload:
    """`base` as a mixed step: decode groups `mix` ((context, sequences) pairs) and a prefill chunk
    of `chunk` new tokens after `chunk_offset` cached ones. Its phase is "mixed", its batch the
    sequences (every decode sequence, and the chunk's one), its context the largest any segment
    attends (offset + chunk for the chunk)."""
    mix = tuple((int(c), int(n)) for c, n in mix)
    batch = sum(n for _, n in mix) + (1 if chunk else 0)
    context = max([c for c, _ in mix] + ([chunk_offset + chunk] if chunk else []), default=0)
    return replace(base, phase=MIXED, batch=batch, context=context, mix=mix, chunk=chunk,
                   chunk_offset=chunk_offset if chunk else 0)


def _declared(table: tuple[Setting, ...]):
    """A frozen dataclass whose fields are `table`'s settings, in its order (each field's metadata
    holds its Setting under "setting")."""
    def build(cls):
        cls.__annotations__ = {s.name: s.annotation for s in table}
        for s in table:
            setattr(cls, s.name, field(default=s.default, metadata={"setting": s}))
        return dataclass(frozen=True)(cls)
    return build


@_declared(settings.SETTINGS)
class Deployment:
    """How the step is served: hardware, parallel degrees, stored formats, kernels, usable memory.

    Its fields are the settings of rooflinekit.core.settings.SETTINGS, each declared there once
    (type, default, rule, help, words). Formats left None are the workload's activation dtype
    (`resolved` fills them in); a report carries its deployment resolved.
    """

    @property
    def parallel(self) -> bool:
        """Whether one GPU's share of a split model is reported (tensor or expert parallel)."""
        return self.tp > 1 or self.ep > 1

    @property
    def gpus(self) -> int:
        """GPUs one copy of the model runs on."""
        return max(self.tp, self.ep) * self.pp

    def weight_format(self, dtype_key: str) -> str:
        """The stored format of linear and expert weights under activations of `dtype_key`."""
        return self.weight_dtype or dtype_key

    def group_size(self, dtype_key: str) -> int | None:
        """Elements per weight scale: int8/int4 group-wise (default 128); fp8 per output channel
        unless a group size is given; None for formats without scales."""
        fmt = self.weight_format(dtype_key)
        if fmt in ("int8", "int4"):
            return self.weight_group_size or DEFAULT_GROUP_SIZE
        if fmt == "fp8":
            return self.weight_group_size
        return None

    def kv_format(self, dtype_key: str) -> str:
        """The KV cache's element format: kv_dtype, else the activation dtype."""
        return self.kv_dtype or dtype_key

    @property
    def kv_format_given(self) -> bool:
        """Whether the KV cache's format is set (else it follows the activation dtype)."""
        return self.kv_dtype is not None

    def with_kv_format(self, fmt: str) -> Deployment:
        """This deployment with its KV cache stored in `fmt`."""
        return replace(self, kv_dtype=fmt)

    def kv_itemsize(self, dtype_key: str) -> int | None:
        """Bytes per cached element where the cache format is given (kv_dtype, or fp8 activations);
        None: the cache as the model runs it."""
        if self.kv_dtype is not None:
            return KV_BYTES[self.kv_dtype]
        return KV_BYTES["fp8"] if dtype_key == "fp8" else None

    def transforms_formats(self, dtype_key: str) -> bool:
        """Whether formats the model does not run are modelled (weights, KV cache, fp8 activations)."""
        return (self.weight_dtype is not None or self.kv_dtype is not None or dtype_key == "fp8"
                or self.quantize_embeddings)

    def resolved(self, dtype_key: str) -> Deployment:
        """This deployment with its formats filled in for activations of `dtype_key`."""
        return replace(self, weight_dtype=self.weight_format(dtype_key),
                       weight_group_size=self.group_size(dtype_key), kv_dtype=self.kv_format(dtype_key))

    def words(self, dtype_key: str | None = None) -> str:
        """The non-default settings in words ("TP 2, EP 8, fp8 weights, fp8 KV"); "" when none, each
        setting's own words in table order. A format equal to the activation dtype `dtype_key` is the
        default and left out."""
        said = (s.words(getattr(self, s.name), self, dtype_key) for s in deployment_settings() if s.words)
        return ", ".join(w for w in said if w)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Deployment:
        """A deployment from its JSON form (unknown keys ignored: a newer report read by an older tool)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class ModelSource:
    """Something that can build a model and its inputs: a model file, a transformers config..."""

    name: str
    path: str
    build_model: Callable[..., Any]
    make_inputs: Callable[..., object]
    kind: str = "model file"
    notes: list[str] = field(default_factory=list)
    options_handled: bool = False  # the loader consumed the options itself


def deployment_settings() -> tuple[Setting, ...]:
    """The Setting of each Deployment field, in field order."""
    return tuple(f.metadata["setting"] for f in fields(Deployment))


def changes(base: Deployment, new: Deployment) -> dict[str, object]:
    """The fields in which `new` differs from `base`."""
    return {f.name: getattr(new, f.name) for f in fields(Deployment)
            if getattr(new, f.name) != getattr(base, f.name)}
