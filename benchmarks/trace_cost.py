"""Benchmark: what reading a large torch.profiler trace costs: events per second, wall time and the
reading process's peak memory against the file's size (target: peak under half the file size).

A synthetic trace of the chosen size (default 1 GB uncompressed) is written into a temporary folder
(deleted afterwards) with the mix torch.profiler writes for a training step: ProfilerStep windows,
aten ops with Input Dims, Input type, Input Strides and Concrete Inputs (a linear op holding an
addmm, a layer norm, an SDPA), cudaLaunchKernel calls with correlation ids, their kernels on a
compute stream, memcpys on a copy stream and NCCL all-reduces on a communication stream, and the
flow arrows between launches and kernels; other top-level keys before and after traceEvents.

Each stage runs in a fresh subprocess: `read` streams the file into a Trace
(`rooflinekit.trace.reader.read_traces`), `analyse` runs `rooflinekit trace`'s whole analysis
(read, join, counts, report). Peak memory is the subprocess's peak RSS
(`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`, each stage's own), beside the RSS of the same
process after its imports alone.

    python benchmarks/trace_cost.py [--size 1G] [--gzip] [--stages read,analyse] [--dir DIR]

Exit status 1 when the read's peak RSS is at or above half the file size.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNITS = {"K": 1e3, "M": 1e6, "G": 1e9}
#: Launch units (an op, its launch, its kernel, its flow) per ProfilerStep.
UNITS_PER_STEP = 20000
TARGET = 0.5

HEADER = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", '
          '"totalGlobalMem": 85045379072, "computeMajor": 9, "computeMinor": 0, "numSms": 132}],\n'
          '  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},\n  "record_shapes": 1,\n'
          '  "traceEvents": [\n')
FOOTER = ('\n  ],\n  "traceName": "synthetic.json",\n  "displayTimeUnit": "ms",\n'
          '  "baseTimeNanoseconds": 1735632360000000000\n}\n')

CPU = ('  {{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 4242, "tid": 4242, "ts": {ts:.3f}, '
       '"dur": {dur:.3f}, "args": {{"External id": {ext}, "Record function id": 0, "Sequence number": {seq}, '
       '"Fwd thread id": 0, "Ev Idx": {ext}, "Input Dims": {dims}, "Input type": {types}, '
       '"Input Strides": {strides}, "Concrete Inputs": {concrete}}}}},\n')
RUNTIME = ('  {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, '
           '"ts": {ts:.3f}, "dur": 4.211, "args": {{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}},\n')
KERNEL = ('  {{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 0, "tid": {stream}, "ts": {ts:.3f}, '
          '"dur": {dur:.3f}, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, '
          '"stream": {stream}, "correlation": {corr}, "registers per thread": 128, "shared memory": 49152, '
          '"blocks per SM": 1.939394, "warps per SM": 15.515152, "grid": [128, 2, 1], "block": [256, 1, 1], '
          '"est. achieved occupancy %": 13}}}},\n')
FLOWS = ('  {{"ph": "s", "id": {corr}, "pid": 4242, "tid": 4242, "ts": {ts:.3f}, "cat": "ac2g", "name": "ac2g"}},\n'
         '  {{"ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": {kts:.3f}, "cat": "ac2g", "name": "ac2g", '
         '"bp": "e"}},\n')
STEP = ('  {{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{n}", "pid": 4242, "tid": 4242, '
        '"ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{"External id": {ext}, "Record function id": 0, "Ev Idx": {ext}}}}},\n')

#: (op, kernel, kind, stream, Input Dims, Input type, Input Strides, Concrete Inputs, kernel us).
OPS = [
    ("aten::addmm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
     "segment_k_off_kernel__5x_cublas", "kernel", 7, [[4096], [8192, 4096], [4096, 4096], [], []],
     ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"], [[1], [4096, 1], [1, 4096], [], []], ["", "", "", "1", "1"], 61.5),
    ("aten::native_layer_norm", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
     "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
     "c10::BFloat16*)", "kernel", 7, [[4, 2048, 4096], [], [4096], [4096], []],
     ["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar"],
     [[8388608, 4096, 1], [], [1], [1], []], ["", "[4096]", "", "", "1e-05"], 12.3),
    ("aten::_scaled_dot_product_flash_attention", "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, "
     "128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
     "true, false, false, false, true, true, false>(pytorch_flash::Flash_fwd_params)", "kernel", 7,
     [[4, 32, 2048, 128], [4, 32, 2048, 128], [4, 32, 2048, 128], [], [], [], []],
     ["c10::BFloat16"] * 3 + ["Scalar", "Scalar", "Scalar", ""], [[8388608, 128, 4096, 1]] * 3 + [[], [], [], []],
     ["", "", "", "0.", "True", "False", ""], 95.2),
    ("aten::copy_", "Memcpy DtoD (Device -> Device)", "gpu_memcpy", 8, [[4, 2048, 4096], [4, 2048, 4096], []],
     ["c10::BFloat16", "c10::BFloat16", "Scalar"], [[8388608, 4096, 1], [8388608, 4096, 1], []], ["", "", "False"], 20.1),
    ("record_param_comms", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
     "kernel", 20, [[[4096, 4096]]], ["c10::BFloat16"], [[[4096, 1]]], [""], 350.0),
]


def _unit(out, k: int, t: float, ext: int) -> tuple[float, int]:
    """One launch unit at CPU time t: an aten::linear holding the op, its launch, kernel and flows."""
    name, kernel, cat, stream, dims, types, strides, concrete, kdur = OPS[k % len(OPS)]
    kts = t + 30.0 + (k % 7) * 0.125
    dims_s, types_s, strides_s, conc_s = (json.dumps(x) for x in (dims, types, strides, concrete))
    out.write(CPU.format(name="aten::linear", ts=t, dur=18.75, ext=ext, seq=ext // 3, dims="[[8192, 4096], [4096, 4096], "
                         "[4096]]", types='["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]',
                         strides="[[4096, 1], [4096, 1], [1]]", concrete='["", "", ""]'))
    out.write(CPU.format(name=name, ts=t + 2.5, dur=14.25, ext=ext + 1, seq=ext // 3, dims=dims_s, types=types_s,
                         strides=strides_s, concrete=conc_s))
    out.write(RUNTIME.format(ts=t + 8.0, ext=ext + 1, corr=ext + 1))
    out.write(KERNEL.format(cat=cat, name=kernel, stream=stream, ts=kts, dur=kdur * 0.1, ext=ext + 1, corr=ext + 1))
    out.write(FLOWS.format(corr=ext + 1, ts=t + 8.0, stream=stream, kts=kts))
    return t + 20.0, ext + 2


def write_trace(path: Path, size: float) -> int:
    """A synthetic trace of about `size` bytes at `path`; the number of events written."""
    t, ext, events, step = 1735632360000.0, 1, 0, 100
    with open(path, "w") as out:
        out.write(HEADER)
        while out.tell() < size - 4096:
            out.write(STEP.format(n=step, ts=t, dur=UNITS_PER_STEP * 20.0, ext=ext))
            events += 1
            for k in range(UNITS_PER_STEP):
                t, ext = _unit(out, k, t, ext)
                events += 6
                if k % 500 == 0 and out.tell() >= size - 4096:
                    break
            step += 1
        out.write('  {"ph": "i", "cat": "Trace", "name": "end", "pid": 4242, "tid": 4242, "ts": 0, "s": "g"}')
        out.write(FOOTER)
    return events + 1


CHILD = {
    "read": "from rooflinekit.trace.reader import read_traces as run\nargs = ()",
    "analyse": "from rooflinekit.trace.analyse import analyse as run\nargs = ('H100 SXM5',)",
}
CHILD_BODY = """
import json, resource, sys, time
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
out = run(sys.argv[1], *args)
wall = time.perf_counter() - t
print(json.dumps({"wall": wall, "import_rss_kb": rss0}))
"""


def run_stage(stage: str, path: Path) -> dict:
    """One stage in a fresh subprocess: its wall time, its RSS after imports and its peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-c", CHILD[stage] + CHILD_BODY, str(path)], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{stage} failed:\n{proc.stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if peak <= before:
        print(f"note: {stage}'s peak is under an earlier stage's; RUSAGE_CHILDREN shows the earlier one",
              file=sys.stderr)
    return {**result, "peak_kb": peak}


def size_of(text: str) -> float:
    """'1G', '200M', '5e8' as bytes."""
    text = text.strip().upper()
    return float(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else float(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="uncompressed trace size (1G, 200M) [1G]")
    parser.add_argument("--gzip", action="store_true", help="read it gzip-compressed (.json.gz)")
    parser.add_argument("--stages", default="read,analyse", help="read, analyse or both [read,analyse]")
    parser.add_argument("--dir", default=None, help="where the temporary folder goes [the system's temp]")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=opts.dir) as tmp:
        path = Path(tmp) / "trace.json"
        t = time.perf_counter()
        events = write_trace(path, size_of(opts.size))
        size = path.stat().st_size
        print(f"wrote {size / 1e9:.3f} GB ({events:,} events) in {time.perf_counter() - t:.0f} s")
        if opts.gzip:
            subprocess.run(["gzip", "-1", str(path)], check=True)
            path = path.with_suffix(".json.gz")
            print(f"gzip -1: {path.stat().st_size / 1e9:.3f} GB on disk")
        return report(opts.stages.split(","), path, size, events)


def report(stages: list[str], path: Path, size: int, events: int) -> int:
    """Run the stages and print one line each; 1 when the read's peak is at or above the target."""
    status = 0
    for stage in stages:
        r = run_stage(stage, path)
        peak = r["peak_kb"] * 1024
        print(f"{stage:8s} wall {r['wall']:6.1f} s  {events / r['wall'] / 1e3:6.0f} k events/s  peak RSS "
              f"{peak / 1e6:6.0f} MB = {peak / size:.2f} x file (after imports {r['import_rss_kb'] * 1024 / 1e6:.0f} MB)")
        if stage == "read" and peak >= TARGET * size:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
