"""Read torch.profiler (Kineto/Chrome) trace files, gzip or not, one file or a folder of rank files,
into `Trace`s; bad input is one `TraceError` line.

The whole file is parsed at once with the standard json module: the 33 MB V100 training trace loads
in about a second, and an incremental parser (ijson) would add a dependency to save memory only on
traces far larger than torch.profiler usually writes.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from pathlib import Path

from rooflinekit.core.errors import RooflineError
from rooflinekit.trace.events import (
    GPU_KINDS,
    CpuOp,
    DeviceInfo,
    Flow,
    GpuEvent,
    RuntimeCall,
    Step,
    Trace,
)

#: File names a folder of rank traces holds.
TRACE_SUFFIXES = (".json", ".json.gz")
#: `cat` of flow events linking a launch to its kernel: newer traces, then older ones.
FLOW_CATS = ("ac2g", "async_cpu_to_gpu")
CPU_CATS = ("cpu_op", "user_annotation")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
_STEP = re.compile(r"ProfilerStep#(\d+)$")


class TraceError(RooflineError):
    """A trace file that cannot be read: missing, empty, truncated, not JSON or not a trace."""


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


def _devices(doc: dict) -> list[DeviceInfo]:
    """deviceProperties as DeviceInfo (an empty list when the trace records none)."""
    out = []
    for d in doc.get("deviceProperties") or []:
        if not isinstance(d, dict):
            continue
        major, minor = _int(d.get("computeMajor")), _int(d.get("computeMinor"))
        out.append(DeviceInfo(id=_int(d.get("id")) or 0, name=str(d.get("name", "")),
                              total_memory=_int(d.get("totalGlobalMem")),
                              compute=(major, minor) if major is not None and minor is not None else None,
                              sms=_int(d.get("numSms"))))
    return out


def _cpu(e: dict, args: dict) -> CpuOp:
    return CpuOp(name=str(e.get("name", "")), ts=float(e["ts"]), dur=float(e.get("dur", 0)), pid=e.get("pid"),
                 tid=e.get("tid"), cat=e.get("cat", ""), external_id=_int(args.get("External id")),
                 sequence=_int(args.get("Sequence number")), fwd_tid=_int(args.get("Fwd thread id")), event=e)


def _gpu(e: dict, args: dict) -> GpuEvent:
    device = _int(args.get("device"))
    stream = _int(args.get("stream"))
    return GpuEvent(kind=GPU_KINDS[e["cat"]], name=str(e.get("name", "")), ts=float(e["ts"]),
                    dur=float(e.get("dur", 0)), device=device if device is not None else (_int(e.get("pid")) or 0),
                    stream=stream if stream is not None else (_int(e.get("tid")) or 0),
                    correlation=_int(args.get("correlation")), args=args)


def _add(trace: Trace, e: dict) -> None:
    """File one event under its kind (others counted by `cat`)."""
    cat, ph = e.get("cat"), e.get("ph")
    if not isinstance(e.get("ts"), (int, float)) or isinstance(e.get("ts"), bool):
        return
    args = e.get("args") if isinstance(e.get("args"), dict) else {}
    if ph == "X" and cat in GPU_KINDS:
        trace.gpu.append(_gpu(e, args))
    elif ph == "X" and cat in CPU_CATS:
        op = _cpu(e, args)
        step = _STEP.match(op.name)
        if step:
            trace.steps.append(Step(int(step.group(1)), op.ts, op.dur))
        trace.ops.append(op)
    elif ph == "X" and cat in RUNTIME_CATS:
        trace.runtime.append(RuntimeCall(str(e.get("name", "")), float(e["ts"]), float(e.get("dur", 0)),
                                         e.get("pid"), e.get("tid"), _int(args.get("correlation"))))
    elif ph in ("s", "f") and cat in FLOW_CATS and _int(e.get("id")) is not None:
        trace.flows.append(Flow(_int(e.get("id")), ph, e.get("pid"), e.get("tid"), float(e["ts"])))
    elif ph == "X" and isinstance(cat, str):
        trace.other[cat] = trace.other.get(cat, 0) + 1


def parse(doc: dict, path: str) -> Trace:
    """One trace document's events as a `Trace`."""
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    trace = Trace(path=path, rank=_int(info.get("rank")), world_size=_int(info.get("world_size")),
                  devices=_devices(doc))
    for e in doc["traceEvents"]:
        if isinstance(e, dict):
            _add(trace, e)
    trace.steps.sort(key=lambda s: s.ts)
    return trace


def no_gpu_events(trace: Trace) -> str:
    """The one line saying a trace holds no GPU activity, with what it does hold."""
    held = [f"{len(trace.ops)} CPU ops", f"{len(trace.runtime)} runtime calls"]
    held += [f"{n} '{cat}' events" for cat, n in sorted(trace.other.items()) if cat not in ("Trace",)]
    return (f"{trace.path}: holds no GPU kernels, memcpys or memsets (it holds {', '.join(held)}); record "
            "with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")


def read_traces(path: str) -> list[Trace]:
    """Every rank trace `path` names, each parsed; TraceError when none holds a GPU event."""
    traces = [parse(load_json(f), str(f)) for f in trace_files(os.fspath(path))]
    if not any(t.gpu for t in traces):
        raise TraceError(no_gpu_events(traces[0]) if len(traces) == 1 else
                         f"{path}: none of its {len(traces)} trace files holds a GPU kernel, memcpy or memset")
    return traces
