"""Holistic Trace Analysis (HTA) beside `rooflinekit trace`: HTA's temporal breakdown (idle,
compute and non-compute GPU time) and its kernel-type breakdown of each test trace, stored in
benchmarks/trace_vs_hta.json, which tests/test_trace_vs_hta.py holds rooflinekit's own figures to.

HTA is not a rooflinekit dependency: run this in a separate environment that has it.

    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install holistictraceanalysis
    /tmp/hta/bin/python benchmarks/trace_vs_hta.py
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from hta.trace_analysis import TraceAnalysis

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"
OUT = Path(__file__).with_suffix(".json")
#: Each case: a name and the trace files HTA reads together (one folder, one file per rank).
CASES = {
    "v100_training_steps_1012_1013": ["v100_training_steps_1012_1013.json.gz"],
    "v100_no_shapes_steps_101_102": ["v100_no_shapes_steps_101_102.json.gz"],
    "sampled_ranks": ["sampled_ranks/sampled_rank-0.json.gz", "sampled_ranks/sampled_rank-1.json.gz"],
    "mi250_minitoy_train": ["mi250_minitoy_train.json.gz"],
    "a100_triton_example": ["a100_triton_example.json.gz"],
}


def hta_figures(files: list[str]) -> dict:
    """HTA's temporal and kernel-type breakdowns of one case, per rank, in microseconds."""
    with tempfile.TemporaryDirectory() as folder:
        for name in files:
            shutil.copy(TRACES / name, Path(folder) / Path(name).name)
        analysis = TraceAnalysis(trace_dir=folder)
        temporal = analysis.get_temporal_breakdown(visualize=False)
        per_rank = {}
        for row in temporal.to_dict("records"):
            per_rank[str(int(row["rank"]))] = {k: float(row[k]) for k in (
                "idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)")}
        types, _ = analysis.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
        kinds = {str(r["kernel_type"]): float(r["sum"]) for r in types.to_dict("records")}
    return {"files": files, "temporal": per_rank, "kernel_types_all_ranks": kinds}


def main() -> None:
    logging.disable(logging.WARNING)
    results = {}
    for case, files in CASES.items():
        try:
            results[case] = hta_figures(files)
        except Exception as exc:  # a trace HTA cannot read is recorded as such
            results[case] = {"files": files, "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(case, json.dumps(results[case])[:300])
    data = {"hta_version": metadata.version("HolisticTraceAnalysis"), "cases": results}
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
