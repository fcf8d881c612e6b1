"""Measured mode on transformers configs: every timed forward starts from the cache the counted
one started from (a static cache's write position, a dynamic cache's length), in both phases."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from rooflinekit.analyses.measured import with_measurement
from rooflinekit.analyses.profile import ReportOptions, counted_forward, measured, place
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import Built, build, inputs_for, load_source
from tests.conftest import EXAMPLES

pytest.importorskip("transformers")
pytestmark = [pytest.mark.hf, pytest.mark.slow]

CONFIGS = EXAMPLES / "configs"
CONTEXT = 16
#: (config, cache, config overrides), each built once and measured in both phases, narrowed
#: (`-O config=...`): the cache classes and code paths stay, the CPU time of building and timing a
#: 128K-row head goes (the shipped size, one layer, takes about 100 s here: docs/measured.md).
SMALL = {"hidden_size": 512, "intermediate_size": 1024, "vocab_size": 2048, "num_attention_heads": 8,
         "num_key_value_heads": 2}
CASES = [("llama-3.1-8b", "static", SMALL), ("llama-3.1-8b", "dynamic", SMALL), ("qwen2.5-7b", "static", SMALL),
         ("qwen2.5-7b", "dynamic", SMALL)]
#: The one difference the timed run may show: in a GQA decode step transformers folds the query
#: groups into the query length, and the counts' fused SDPA output layout ([B, L, H, E]) makes the
#: reshape back a copy the CPU backend's own layout does not need (docs/measured.md); torch 2.6's CPU
#: backend returns the other layout (prefill and decode), so there the timed run holds the copy and
#: the counts do not.
LAYOUT_COPY = re.compile(r"^delete: captured ops (\d+)\.\.\1 \['aten\.clone'\] vs timed \[\]$"
                         r"|^insert: captured ops (\d+)\.\.\d+ \[\] vs timed \['aten\.clone'\]$")


def _cache_length(inputs) -> int:
    cache = inputs.get("past_key_values", inputs.get("cache"))
    return int(cache.get_seq_length())


def _measure_both_phases(name: str, cache: str, overrides: dict, device: str) -> None:
    options = {"layers": 1, "cache": cache, **({"config": overrides} if overrides else {})}
    source = load_source(str(CONFIGS / f"{name}.json"), options)
    host, deployment = get_host(), Deployment("H800")
    hw = hardware_db(host).get("H800")
    built = None
    for phase in ("prefill", "decode"):
        workload = Workload(phase, 1, CONTEXT, "bf16", device, tuple(sorted(options.items())))
        built = build(source, workload) if built is None else Built(built.model, inputs_for(source, workload))
        past = _cache_length(built.inputs)
        assert past == (0 if phase == "prefill" else CONTEXT - 1)
        counting = counted_forward(built, source, workload, deployment, host)
        assert _cache_length(built.inputs) == CONTEXT  # the counted forward wrote its positions
        made = []

        def fresh(workload=workload, made=made, past=past):
            made.append(inputs_for(source, workload))
            assert _cache_length(made[-1]) == past  # the state the counted forward started from
            return made[-1]

        counting = replace(counting, fresh_inputs=fresh)
        m = measured(counting, workload, deployment, host, ReportOptions(warmup=1, repeats=2))
        assert len(made) == 2 * (1 + 2)  # one set per forward, plain and profiled
        assert all(_cache_length(inputs) == CONTEXT for inputs in made)  # each ran exactly one step on it

        ops = counting.counted.capture.ops
        left_out = set()
        for text in m.unmatched:
            found = LAYOUT_COPY.match(text)
            assert found and (phase == "decode" or found.group(1) is None), m.unmatched
            if found.group(1) is not None:  # a captured copy the timed run did not make: untimed
                left_out.add(int(found.group(1)))
        assert set(m.op_time_s) == {op.index for op in ops}
        assert all(t > 0 for i, t in m.op_time_s.items() if i not in left_out), (phase, m.op_time_s)
        assert m.step_time_s > 0 and m.step_time_plain_s > 0 and len(m.step_times_s) == 2

        report = place(counting, source, workload, deployment, hw, ReportOptions(), ([], []))
        report = with_measurement(report, hw, m)
        timed = [row for row in report.ops if row.measured.time_s]
        assert len(timed) == len(report.ops) - len(left_out)
        assert report.totals.measured.ops_timed == len(ops)
        assert report.totals.measured.op_time_s == pytest.approx(sum(row.measured.time_s or 0 for row in report.ops))


@pytest.mark.parametrize("name,cache,overrides", CASES, ids=[f"{n}-{c}" for n, c, _ in CASES])
def test_measured_mode_on_a_transformers_config_cpu(name, cache, overrides):
    _measure_both_phases(name, cache, overrides, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name,cache,overrides", CASES, ids=[f"{n}-{c}" for n, c, _ in CASES])
def test_measured_mode_on_a_transformers_config_cuda(name, cache, overrides):
    _measure_both_phases(name, cache, overrides, "cuda")
