"""The events of a torch.profiler (Kineto) trace as slotted dataclasses: what the reader gives the
join, the classes and the report, only the fields they read, so that a trace of millions of events
fits in less memory than its file. Times are microseconds, as the trace records them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

#: The `cat` of each kind of GPU activity the report reads, and the kind it becomes.
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


@dataclass(frozen=True, slots=True)
class CpuOp:
    """An operator or a user annotation on a CPU thread (`cat` cpu_op or user_annotation)."""

    name: str
    ts: float
    dur: float
    pid: int | str
    tid: int | str
    cat: str = "cpu_op"
    external_id: int | None = None
    sequence: int | None = None
    fwd_tid: int | None = None
    #: The args the analysis reads (Input Dims, Input type, Concrete Inputs, the collectives' message
    #: sizes, module paths), one dict shared by every op that recorded the same ones.
    args: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def event(self) -> dict:
        """The op as a trace event ({name, cat, args}), what the shape counter reads."""
        return {"name": self.name, "cat": self.cat, "args": self.args}


@dataclass(frozen=True, slots=True)
class RuntimeCall:
    """A CUDA/HIP runtime or driver call (cudaLaunchKernel, cuLaunchKernel, cudaMemcpyAsync...)."""

    name: str
    ts: float
    dur: float
    pid: int | str
    tid: int | str
    correlation: int | None


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """A kernel, memcpy or memset as it ran on a device stream."""

    kind: str
    name: str
    ts: float
    dur: float
    device: int
    stream: int
    correlation: int | None

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True, slots=True)
class Flow:
    """One end of a CPU-to-GPU flow arrow (`ph` s or f, `cat` ac2g or async_cpu_to_gpu)."""

    id: int
    phase: str
    pid: int | str
    tid: int | str
    ts: float


@dataclass(frozen=True, slots=True)
class Step:
    """A `ProfilerStep#N` window on the CPU clock."""

    number: int
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What `deviceProperties` says of one GPU."""

    id: int
    name: str
    total_memory: int | None = None
    compute: tuple[int, int] | None = None
    sms: int | None = None


@dataclass(frozen=True, slots=True)
class CounterRange:
    """A CUPTI profiler range (`cat` cuda_profiler_range): one kernel replayed under hardware
    counters, and the counters' values (instructions executed by operation and precision)."""

    name: str
    ts: float
    dur: float
    counters: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass
class Trace:
    """One rank's trace: its events by kind (lists, or the reader's column tables, which make each
    event when read), its steps and the devices it names."""

    path: str
    rank: int | None = None
    world_size: int | None = None
    devices: list[DeviceInfo] = field(default_factory=list)
    ops: Sequence[CpuOp] = field(default_factory=list)
    runtime: Sequence[RuntimeCall] = field(default_factory=list)
    gpu: Sequence[GpuEvent] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    #: Events of other kinds the report does not read (CUPTI profiler ranges...), counted by `cat`.
    other: dict[str, int] = field(default_factory=dict)
    #: The trace's `schemaVersion` (None when it records none).
    schema: int | None = None
    #: `nn.Module: Class_N` python_function events (with_stack=True): module calls, for the roll-up.
    modules: list[CpuOp] = field(default_factory=list)
    #: CUPTI profiler ranges with their counters (rooflinekit.trace.counters).
    ranges: list[CounterRange] = field(default_factory=list)
