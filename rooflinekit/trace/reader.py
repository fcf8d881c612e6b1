"""Read torch.profiler (Kineto/Chrome) trace files, gzip or not, one file or a folder of rank files,
into compact `Trace`s; bad input is one `TraceError` line.

A file is streamed (`rooflinekit.trace.stream`): each event is filed as it is decoded into columns
(`rooflinekit.trace.table`), keeping only the fields the analysis reads, names interned and equal
args shared, and flow arrows in arrays until the join is known to need them, so that reading holds
a fraction of the file's size.
`load_json` and `parse` read a file whole, the reference the streamed read is tested against.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
import zlib
from array import array
from collections.abc import Callable
from pathlib import Path

from rooflinekit.trace.events import (
    GPU_KINDS,
    CounterRange,
    CpuOp,
    DeviceInfo,
    Flow,
    GpuEvent,
    RuntimeCall,
    Step,
    Trace,
)
from rooflinekit.trace.stream import TraceError, read_document
from rooflinekit.trace.table import EventTable

__all__ = ["TraceError", "load_json", "parse", "read_trace", "read_traces", "trace_files"]

#: File names a folder of rank traces holds.
TRACE_SUFFIXES = (".json", ".json.gz")
#: `cat` of flow events linking a launch to its kernel: newer traces, then older ones.
FLOW_CATS = ("ac2g", "async_cpu_to_gpu")
CPU_CATS = ("cpu_op", "user_annotation")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
#: The args of a CPU op the analysis reads (shapes, scalars, collectives' sizes, module paths).
KEPT_ARGS = ("Input Dims", "Input type", "Concrete Inputs", "In msg nelems", "Out msg nelems", "dtype",
             "Group size", "Collective name", "Module Hierarchy", "Call stack")
#: Files at least this large (bytes on disk) read with a progress bar on a terminal's stderr.
PROGRESS_BYTES = 64 << 20
#: The Kineto `schemaVersion`s this reader knows.
KNOWN_SCHEMAS = (1,)
#: python_function events of module calls (with_stack=True), kept for the module roll-up.
MODULE_PREFIX = "nn.Module: "
_STEP = re.compile(r"ProfilerStep#(\d+)$")


def trace_files(path: str) -> list[Path]:
    """The trace files `path` names: itself, or a folder's *.json and *.json.gz files, sorted."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
        if not files:
            raise TraceError(f"{path}: the folder holds no trace files (*.json, *.json.gz)")
        return files
    if not p.exists():
        raise TraceError(f"{path}: no such file or folder")
    return [p]


def _text(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with gzip's magic number."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not raw:
        raise TraceError(f"{path}: the file is empty")
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        data = gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(f"{path}: truncated or corrupt gzip file ({exc})") from None
    if not data:
        raise TraceError(f"{path}: the file is empty (an empty gzip stream)")
    return data


def load_json(path: Path) -> dict:
    """The trace's JSON object; TraceError for a truncated file, other JSON or no traceEvents."""
    data = _text(path)
    try:
        doc = json.loads(data)
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a JSON trace (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(data.rstrip()) - 1
        why = "truncated JSON (it ends mid-document)" if cut else f"not JSON ({exc.msg} at line {exc.lineno})"
        raise TraceError(f"{path}: {why}") from None
    except RecursionError:
        raise TraceError(f"{path}: not a usable JSON trace: nested too deeply") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{path}: not a torch.profiler trace (no traceEvents list); record one with "
                         "torch.profiler.profile(...).export_chrome_trace(PATH)")
    return doc


def _int(value) -> int | None:
    """An integer id from the trace (ints, or strings of digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _devices(header: dict) -> list[DeviceInfo]:
    """deviceProperties as DeviceInfo (an empty list when the trace records none)."""
    out = []
    for d in header.get("deviceProperties") or []:
        if not isinstance(d, dict):
            continue
        major, minor = _int(d.get("computeMajor")), _int(d.get("computeMinor"))
        out.append(DeviceInfo(id=_int(d.get("id")) or 0, name=str(d.get("name", "")),
                              total_memory=_int(d.get("totalGlobalMem")),
                              compute=(major, minor) if major is not None and minor is not None else None,
                              sms=_int(d.get("numSms"))))
    return out


def _field(events, name: str):
    """One field of every event (a column table's without making its events)."""
    if isinstance(events, EventTable):
        return events.field(list(events.make.__dataclass_fields__).index(name))
    return (getattr(e, name) for e in events)


class Flows:
    """Flow arrow ends in arrays (id, phase, thread, time): 21 bytes each, not an object."""

    def __init__(self) -> None:
        self.ids, self.ts, self.phases, self.threads = array("q"), array("d"), bytearray(), array("i")
        self.thread_names: dict = {}

    def add(self, e: dict) -> None:
        fid = _int(e.get("id"))
        if fid is None or not -(1 << 63) <= fid < (1 << 63):
            return
        self.ids.append(fid)
        self.ts.append(float(e["ts"]))
        self.phases.append(ord(e["ph"]))
        self.threads.append(self.thread_names.setdefault(e.get("tid"), len(self.thread_names)))

    def needed(self, trace: Trace) -> list[Flow]:
        """The flows the join can use: all when a runtime call lacks a correlation id, else the
        ends at a GPU event whose correlation no runtime call has."""
        threads = list(self.thread_names)
        known = set(_field(trace.runtime, "correlation"))
        every = None in known
        lost = {(str(stream), ts) for stream, ts, corr in zip(_field(trace.gpu, "stream"), _field(trace.gpu, "ts"),
                                                             _field(trace.gpu, "correlation"), strict=True)
                if corr not in known}
        out = []
        for fid, ts, phase, thread in zip(self.ids, self.ts, self.phases, self.threads, strict=True):
            tid = threads[thread]
            if every or (phase == ord("f") and (str(tid), ts) in lost):
                out.append(Flow(fid, chr(phase), None, tid, ts))
        return out


class Builder:
    """A Trace filled one event at a time: names interned, equal args shared, flows in arrays."""

    def __init__(self, path: str):
        self.trace = Trace(path=path, ops=EventTable(CpuOp, "oddoooqqqo"), runtime=EventTable(RuntimeCall, "oddooq"),
                           gpu=EventTable(GpuEvent, "ooddqqq"))
        self.flows = Flows()
        self.args: dict[str, dict] = {}
        self.names: dict[str, str] = {}
        self.other = self.trace.other

    def _name(self, e: dict) -> str:
        name = e.get("name", "")
        name = name if isinstance(name, str) else str(name)
        return self.names.setdefault(name, name)

    def _shared_args(self, args: dict) -> dict:
        """The kept args, one dict for every op that recorded the same ones."""
        kept = {k: args[k] for k in KEPT_ARGS if k in args}
        if not kept:
            return {}
        return self.args.setdefault(repr(kept), kept)

    def _cpu(self, e: dict, args: dict) -> None:
        t = self.trace
        name, ts, dur = self._name(e), float(e["ts"]), float(e.get("dur", 0))
        t.ops.append(name, ts, dur, e.get("pid"), e.get("tid"), e.get("cat", ""), _int(args.get("External id")),
                     _int(args.get("Sequence number")), _int(args.get("Fwd thread id")), self._shared_args(args))
        step = _STEP.match(name)
        if step:
            t.steps.append(Step(int(step.group(1)), ts, dur))

    def _gpu(self, e: dict, args: dict) -> None:
        device, stream = _int(args.get("device")), _int(args.get("stream"))
        self.trace.gpu.append(
            GPU_KINDS[e["cat"]], self._name(e), float(e["ts"]), float(e.get("dur", 0)),
            device if device is not None else (_int(e.get("pid")) or 0),
            stream if stream is not None else (_int(e.get("tid")) or 0), _int(args.get("correlation")))

    def add(self, e) -> None:
        """File one event under its kind (others counted by `cat`)."""
        if not isinstance(e, dict):
            return
        cat, ph, ts = e.get("cat"), e.get("ph"), e.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            return
        args = e.get("args")
        args = args if isinstance(args, dict) else {}
        if ph == "X" and cat in GPU_KINDS:
            self._gpu(e, args)
        elif ph == "X" and cat in CPU_CATS:
            self._cpu(e, args)
        elif ph == "X" and cat in RUNTIME_CATS:
            self.trace.runtime.append(self._name(e), float(ts), float(e.get("dur", 0)), e.get("pid"), e.get("tid"),
                                      _int(args.get("correlation")))
        elif ph in ("s", "f") and cat in FLOW_CATS:
            self.flows.add(e)
        elif ph == "X" and cat == "python_function" and self._name(e).startswith(MODULE_PREFIX):
            self.trace.modules.append(CpuOp(self._name(e), float(ts), float(e.get("dur", 0)), e.get("pid"),
                                            e.get("tid"), cat))
        elif ph == "X" and cat == "cuda_profiler_range":
            counters = {k: v for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            self.trace.ranges.append(CounterRange(self._name(e), float(ts), float(e.get("dur", 0)), counters))
            self.other[cat] = self.other.get(cat, 0) + 1
        elif ph == "X" and isinstance(cat, str):
            self.other[cat] = self.other.get(cat, 0) + 1

    def done(self, header: dict) -> Trace:
        """The trace, with what the top-level members say (rank, world size, devices, schema)."""
        t = self.trace
        info = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
        t.rank, t.world_size = _int(info.get("rank")), _int(info.get("world_size"))
        t.devices = _devices(header)
        t.schema = _int(header.get("schemaVersion"))
        t.flows = self.flows.needed(t)
        t.steps.sort(key=lambda s: s.ts)
        self.flows, self.args, self.names = Flows(), {}, {}
        return t


def _check_schema(header: dict, path) -> None:
    """A schemaVersion this reader does not know is one line (its events may mean other things)."""
    version = header.get("schemaVersion")
    if version is not None and _int(version) not in KNOWN_SCHEMAS:
        known = ", ".join(map(str, KNOWN_SCHEMAS))
        raise TraceError(f"{path}: Kineto schemaVersion {version!r} is not one this reader knows ({known}); "
                         "report it with the torch version that wrote the trace")


def parse(doc: dict, path: str) -> Trace:
    """One whole trace document's events as a `Trace` (the reference for `read_trace`)."""
    _check_schema(doc, path)
    builder = Builder(path)
    for e in doc["traceEvents"]:
        builder.add(e)
    return builder.done(doc)


class Progress:
    """A one-line progress bar on stderr for a long read (a terminal only; a file of at least
    PROGRESS_BYTES), redrawn at each percent, cleared at the end."""

    def __init__(self, path: Path):
        self.path, self.total, self.shown = path, max(1, path.stat().st_size), -1
        self.on = self.total >= PROGRESS_BYTES and sys.stderr.isatty()

    def __call__(self, done: int) -> None:
        percent = 100 * done // self.total
        if self.on and percent != self.shown:
            self.shown = percent
            bar = "#" * (percent // 4)
            sys.stderr.write(f"\rreading {self.path.name} [{bar:<25}] {percent:3d}% of {self.total / 1e6:,.0f} MB")
            sys.stderr.flush()

    def close(self) -> None:
        if self.on and self.shown >= 0:
            sys.stderr.write("\r" + " " * 79 + "\r")
            sys.stderr.flush()


def read_trace(path: Path, progress: Callable[[int], None] | None = None) -> Trace:
    """One trace file, streamed; `progress` gets the file bytes read so far (default: a progress
    bar on stderr when it is a terminal and the file is large)."""
    builder = Builder(str(path))
    bar = Progress(path) if progress is None and path.exists() else None
    try:
        header, saw = read_document(path, builder.add, progress or bar)
    finally:
        if bar is not None:
            bar.close()
    if not saw:
        raise TraceError(f"{path}: not a torch.profiler trace (no traceEvents list); record one with "
                         "torch.profiler.profile(...).export_chrome_trace(PATH)")
    _check_schema(header, path)
    return builder.done(header)


def no_gpu_events(trace: Trace) -> str:
    """The one line saying a trace holds no GPU activity, with what it does hold."""
    held = [f"{len(trace.ops)} CPU ops", f"{len(trace.runtime)} runtime calls"]
    held += [f"{n} '{cat}' events" for cat, n in sorted(trace.other.items()) if cat not in ("Trace",)]
    return (f"{trace.path}: holds no GPU kernels, memcpys or memsets (it holds {', '.join(held)}); record "
            "with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")


def check_gpu(traces: list[Trace], path) -> None:
    """TraceError when none of the traces holds a GPU event."""
    if not any(t.gpu for t in traces):
        raise TraceError(no_gpu_events(traces[0]) if len(traces) == 1 else
                         f"{path}: none of its {len(traces)} trace files holds a GPU kernel, memcpy or memset")


def read_traces(path: str, whole: bool = False, progress: Callable[[int], None] | None = None,
                cpu: bool = False) -> list[Trace]:
    """Every rank trace `path` names, each streamed (or parsed whole: `whole`); TraceError when
    none holds a GPU event (`cpu`: the caller checks, a CPU-only trace being one it reads)."""
    files = trace_files(os.fspath(path))
    if whole:
        traces = [parse(load_json(f), str(f)) for f in files]
    else:
        traces = [read_trace(f, progress) for f in files]
    if not cpu:
        check_gpu(traces, path)
    return traces
