"""Measured mode on CPU: every counted op gets a time, times add up, derived numbers recompute."""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.nn.functional as F

from rooflinekit.analyses.measure import align, measure, timed_recording
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.capture import capture
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, TINY_LLAMA

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"
GPT2 = EXAMPLES / "gpt2_mha.py"
TINY_MLA = {"layers": 1, "hidden": 256, "heads": 4, "q_lora_rank": 64, "kv_lora_rank": 64,
            "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "intermediate": 512,
            "vocab": 1000}
TINY_GPT2 = {"layers": 1, "vocab": 1000, "hidden": 128, "heads": 4}

pytestmark = pytest.mark.timing  # measured mode: under xdist, one after another on one worker


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: a 2-core machine shared with other jobs times far more steadily."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def measured(path, options, phase="decode", batch=2, context=64, hardware="H800", warmup=1, repeats=2,
             device="cpu", **kw):
    workload = Workload(phase, batch, context, "fp32", device, tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options), workload, Deployment(hardware),
                   options=ReportOptions(measure=True, warmup=warmup, repeats=repeats, **kw)).report.to_dict()


@pytest.mark.parametrize("path,options", [(GQA, TINY_LLAMA), (MLA, TINY_MLA), (MLA, dict(TINY_MLA, mode="naive")),
                                          (GPT2, TINY_GPT2)],
                         ids=["gqa", "mla-absorbed", "mla-naive", "gpt2-mha"])
def test_every_counted_op_gets_a_time(path, options):
    report = measured(path, options)
    m = report["totals"]["measured"]
    assert m["ops_unmatched"] == []
    assert m["ops_timed"] == len(report["ops"])
    for op in report["ops"]:
        assert op["measured"]["time_s"] is not None and op["measured"]["time_s"] > 0, op
    # the bookkeeping identities hold exactly
    assert sum(op["measured"]["time_s"] for op in report["ops"]) == pytest.approx(m["op_time_s"], rel=1e-9)
    assert sum(mod["measured"]["time_s"] for mod in report["modules"]) == pytest.approx(m["op_time_s"], rel=1e-9)
    assert m["op_time_s"] + m["unattributed_s"] == pytest.approx(m["step_time_s"], rel=1e-12)
    assert m["step_time_s"] == pytest.approx(sum(m["step_times_s"]) / len(m["step_times_s"]))
    assert len(m["step_times_s"]) == 2 and m["repeats"] == 2 and m["warmup"] == 1


@pytest.mark.slow
def test_op_times_add_up_to_the_step_within_10_percent():
    """Ops big enough that the instrumentation's Python overhead per op is small beside them:
    the per-op sum is within 10% of the step's profiler range (unattributed < 10%)."""
    options = {"layers": 1, "hidden": 512, "heads": 8, "kv_heads": 2, "head_dim": 64,
               "intermediate": 2048, "vocab": 4000}
    report = measured(GQA, options, phase="prefill", batch=16, context=128, warmup=1, repeats=2)
    m = report["totals"]["measured"]
    assert m["op_time_s"] <= m["step_time_s"]
    assert m["op_time_s"] == pytest.approx(m["step_time_s"], rel=0.10), m
    assert sum(mod["measured"]["time_s"] for mod in report["modules"]) == pytest.approx(m["step_time_s"], rel=0.10)


def test_derived_numbers_recompute_from_counts_and_times():
    report = measured(GQA, TINY_LLAMA)
    hw = hardware_db().get("H800")
    bw = hw.memory_bandwidth
    for op in report["ops"]:
        t = op["measured"]["time_s"]
        nbytes = op["bytes_read"] + op["bytes_written"]
        peak = hw.peak_flops[op["dtype"]]
        assert op["measured"]["achieved_flops"] == pytest.approx(op["flops"] / t)
        assert op["measured"]["achieved_bandwidth"] == pytest.approx(nbytes / t)
        assert op["measured"]["hfu"] == pytest.approx(op["flops"] / (t * peak))
        assert op["measured"]["mfu"] == pytest.approx(op["flops_model"] / (t * peak))
        assert op["measured"]["mbu"] == pytest.approx(nbytes / (t * bw))
        assert op["measured"]["time_vs_bound"] == pytest.approx(t / max(op["flops"] / peak, nbytes / bw))
    for mod in report["modules"]:
        # depth 3: an op belongs to the module row named by the first three parts of its path
        t = sum(op["measured"]["time_s"] for op in report["ops"] if ".".join(op["module"].split(".")[:3]) == mod["name"])
        assert mod["measured"]["time_s"] == pytest.approx(t)
        assert mod["measured"]["achieved_flops"] == pytest.approx(mod["flops"] / t)
        assert mod["measured"]["mbu"] == pytest.approx(mod["bytes"] / (t * bw))
        assert mod["measured"]["time_vs_bound"] == pytest.approx(t / mod["time_bound_ops_s"])
    t = report["totals"]
    m = t["measured"]
    step = m["step_time_s"]
    assert m["achieved_flops"] == pytest.approx(t["flops"] / step)
    assert m["mfu"] == pytest.approx(t["flops_model"] / (step * hw.peak_flops["fp32"]))
    assert m["hfu"] == pytest.approx(t["flops_executed"] / (step * hw.peak_flops["fp32"]))
    assert m["mbu"] == pytest.approx(t["bytes"] / (step * bw))
    assert m["time_vs_bound"] == pytest.approx(step / t["predicted_step_s"])
    assert m["tokens_per_s"] == pytest.approx(2 / step)
    att = report["attention"][0]
    att_t = sum(report["ops"][i]["measured"]["time_s"] for i in range(len(report["ops"]))
                if report["ops"][i]["module"].startswith(att["module"]))
    assert 0 < att["measured"]["time_s"] <= att_t + 1e-12
    assert att["measured"]["mbu_min"] == pytest.approx(att["bytes_min"] / (att["measured"]["time_s"] * bw))


def test_model_flops_spread_over_attention_ops_sum_to_totals():
    # absorbed MLA prefill: the einsum path computes the full score matrix, model FLOPs count the
    # causal triangle, so model and executed FLOPs differ
    report = measured(MLA, TINY_MLA, phase="prefill", batch=1, context=16)
    t = report["totals"]
    assert t["flops_model"] != t["flops_executed"]
    assert sum(op["flops_model"] for op in report["ops"]) == pytest.approx(t["flops_model"])
    assert sum(m["flops_model"] for m in report["modules"]) == pytest.approx(t["flops_model"])
    att = report["attention"][0]
    inside = [op for op in report["ops"] if op["module"].startswith(att["module"]) and op["flops_model"] != op["flops"]]
    assert inside, "the attention layer's ops carry its model FLOPs"


def test_measured_mfu_is_model_flops_where_model_and_executed_differ():
    """Naive MLA in multi-token decode: the fused call scores every new token against every cached
    position (its mask is not inspected), model FLOPs count the causal pairs among the new tokens.
    Each measured MFU (step, op, module, attention layer) is model FLOPs over time, HFU executed:
    an MFU computed from executed FLOPs fails here."""
    workload = Workload("decode", 2, 16, "fp32", "cpu", tuple(sorted(dict(TINY_MLA, mode="naive").items())),
                        decode_q_len=8)
    report = run_profile(load_source(str(MLA), dict(TINY_MLA, mode="naive")), workload, Deployment("H800"),
                     options=ReportOptions(measure=True, warmup=1, repeats=2)).report.to_dict()
    hw = hardware_db().get("H800")
    peak = hw.peak_flops["fp32"]
    t, m = report["totals"], report["totals"]["measured"]
    assert t["flops_model"] < t["flops_executed"] * (1 - 1e-3)  # they differ, well past rounding
    step = m["step_time_s"]
    assert m["mfu"] == pytest.approx(t["flops_model"] / (step * peak), rel=1e-9)
    assert m["hfu"] == pytest.approx(t["flops_executed"] / (step * peak), rel=1e-9)
    assert m["mfu"] < m["hfu"] * (1 - 1e-3)
    (att,) = report["attention"]
    assert att["flops_model"] < 0.9 * att["flops_executed"]
    assert att["measured"]["mfu"] == pytest.approx(att["flops_model"] / (att["measured"]["time_s"] * peak), rel=1e-9)
    assert att["measured"]["hfu"] == pytest.approx(att["flops_executed"] / (att["measured"]["time_s"] * peak), rel=1e-9)
    differ = [op for op in report["ops"] if op["flops_model"] != op["flops"]]
    assert differ
    for op in differ:
        time_s = op["measured"]["time_s"]
        assert op["measured"]["mfu"] == pytest.approx(op["flops_model"] / (time_s * hw.peak_flops[op["dtype"]]), rel=1e-9)
        assert op["measured"]["hfu"] == pytest.approx(op["flops"] / (time_s * hw.peak_flops[op["dtype"]]), rel=1e-9)
    modules = [mod for mod in report["modules"] if mod["flops_model"] != mod["flops"]]
    assert modules
    for mod in modules:
        time_s = mod["measured"]["time_s"]
        assert mod["measured"]["mfu"] == pytest.approx(mod["flops_model"] / (time_s * hw.peak_flops[mod["dtype"]]), rel=1e-9)


def test_measure_joins_by_capture_index_on_a_plain_module():
    lin = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    x = torch.randn(8, 64)
    cap = capture(lin, (x,))
    with torch.no_grad():
        m = measure(lin, (x,), cap.ops, device="cpu", warmup=1, repeats=3)
    assert set(m.op_time_s) == {op.index for op in cap.ops}
    assert all(t > 0 for t in m.op_time_s.values())
    assert len(m.step_times_s) == 3
    assert m.total_op_time_s < m.step_time_s
    assert m.step_time_plain_s > 0


class OneMatmul(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n, n), requires_grad=False)

    def forward(self, x):
        return x @ self.w


def test_op_time_agrees_with_perf_counter_around_the_same_matmul():
    """A second clock: one large matmul timed by measure (its profiler range) and by perf_counter
    around the same torch.mm outside any mode or profiler agree within a factor of 3.

    Like is compared with like: each measure() call times one repeat, so its op time and its plain
    forward are single products, as each perf_counter sample is (a measure() time is the mean over
    its repeats, and one product preempted on a loaded machine multiplies a mean of five, never the
    fastest single sample). Rounds interleave the clocks, and each clock's fastest sample is its
    time: load only ever adds time. While the two disagree, up to three more batches of rounds are
    taken before judging: more samples only bring each minimum closer to the undisturbed time, so a
    real disagreement stays."""
    n = 384
    model = OneMatmul(n)
    x = torch.randn(n, n)
    cap = capture(model, (x,))
    assert [op.name for op in cap.ops] == ["aten.mm"]

    def plain_time():
        with torch.no_grad():
            start = time.perf_counter()
            torch.mm(x, model.w)
            return time.perf_counter() - start

    for _ in range(2):  # warm-up
        plain_time()
    reference, ops, plain_steps = [], [], []

    def agree():
        ref = min(reference)
        return ref / 3 < min(ops) < 3 * ref and ref / 3 < min(plain_steps) < 3 * ref

    for _batch in range(4):
        for _ in range(5):
            reference.append(plain_time())
            with torch.no_grad():
                m = measure(model, (x,), cap.ops, device="cpu", warmup=1, repeats=1)
            assert m.op_time_s[0] <= m.step_time_s
            ops.append(m.op_time_s[0])
            plain_steps.append(m.step_time_plain_s)  # the plain forward is the same matmul
        if agree():
            break
    ref = min(reference)
    assert ref / 3 < min(ops) < 3 * ref, (min(ops), ref, len(ops))
    assert ref / 3 < min(plain_steps) < 3 * ref, (min(plain_steps), ref, len(ops))


class MathAttention(torch.nn.Module):
    """SDPA forced onto the math backend, whose output is [B, H, L, E] contiguous, then the usual
    transpose(1, 2).reshape: a view on the fused layout, a copy on the math one."""

    def __init__(self):
        super().__init__()
        self.strides = []

    def forward(self, q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v)
        self.strides.append(out.stride())
        b, h, seq, e = out.shape
        return out.transpose(1, 2).reshape(b, seq, h * e)


def test_timed_run_keeps_the_backend_attention_layout_and_reports_the_copy_it_causes():
    b, h, seq, e = 2, 4, 16, 8
    contiguous = (h * seq * e, seq * e, e, 1)  # [B, H, L, E] in memory
    fused = (seq * h * e, e, h * e, 1)  # [B, L, H, E] in memory, viewed as [B, H, L, E]
    model = MathAttention()
    qkv = tuple(torch.randn(b, h, seq, e) for _ in range(3))
    with torch.no_grad():
        plain = model(*qkv)
    cap = capture(model, qkv)
    assert [op.name for op in cap.ops] == ["F.scaled_dot_product_attention"]  # the reshape is a view
    with torch.no_grad(), timed_recording(model) as rec:
        timed = model(*qkv)
    assert model.strides == [contiguous, fused, contiguous]  # plain, capture, timed
    torch.testing.assert_close(timed, plain, rtol=0, atol=0)
    assert [op.name for op in rec.ops] == ["F.scaled_dot_product_attention", "aten.clone"]
    with torch.no_grad():
        m = measure(model, qkv, cap.ops, device="cpu", warmup=1, repeats=2)
    assert len(m.unmatched) == 1 and m.unmatched[0].startswith("insert") and "aten.clone" in m.unmatched[0]
    assert set(m.op_time_s) == {0} and m.op_time_s[0] > 0


class DTensor(torch.Tensor):
    """A wrapper subclass with DTensor's name (rooflinekit defers to it as to torch's DTensor): it
    runs each op on its local tensor and copies the result, as DTensor runs local ops of its own."""

    @staticmethod
    def __new__(cls, local):
        return torch.Tensor._make_wrapper_subclass(cls, local.shape, dtype=local.dtype, device=local.device)

    def __init__(self, local):
        self.local = local

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map

        def unwrap(t):
            return t.local if isinstance(t, DTensor) else t

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        if isinstance(out, torch.Tensor):
            out = torch.ops.aten.clone.default(out)
        return tree_map(lambda t: DTensor(t) if isinstance(t, torch.Tensor) else t, out)


class MatmulRelu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x @ x)


def test_timed_numbering_follows_the_capture_through_a_deferred_subclass():
    """The timed run goes through capture's dispatch mode: ops on a DTensor are deferred to it and
    its local ops are recorded and timed, in the capture's numbering."""
    model = MatmulRelu()
    x = DTensor(torch.randn(64, 64))
    cap = capture(model, (x,))
    names = ["aten.mm", "aten.clone", "aten.relu", "aten.clone"]  # local op, then its copy
    assert [op.name for op in cap.ops] == names
    with torch.no_grad(), timed_recording(model) as rec:
        model(x)
    assert [op.name for op in rec.ops] == names
    with torch.no_grad():
        m = measure(model, (x,), cap.ops, device="cpu", warmup=1, repeats=2)
    assert m.unmatched == []
    assert set(m.op_time_s) == {0, 1, 2, 3} and all(t > 0 for t in m.op_time_s.values())


class AllReduce(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64, bias=False)

    def forward(self, x):
        import torch.distributed as dist

        y = torch.ops._c10d_functional.all_reduce(self.proj(x), "sum", dist.group.WORLD.group_name)
        return torch.ops._c10d_functional.wait_tensor(y) * 2


def timed_collectives_checked() -> None:
    """The checks of the test below, in a process of their own (it prints CHECKED when they hold)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    model = AllReduce()
    x = (torch.randn(4, 64),)
    cap = capture(model, x)
    names = ["aten.mm", "_c10d_functional.all_reduce", "aten.mul"]  # wait_tensor moves nothing
    assert [op.name for op in cap.ops] == names and cap.ops[1].kind == "collective"
    with torch.no_grad(), timed_recording(model) as rec:
        model(*x)
    assert [op.name for op in rec.ops] == names
    with torch.no_grad():
        m = measure(model, x, cap.ops, device="cpu", warmup=1, repeats=2)
    assert m.unmatched == [] and all(m.op_time_s[i] > 0 for i in range(3))
    print(CHECKED, flush=True)
    dist.destroy_process_group()


CHECKED = "timed collectives checked"


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="needs torch.distributed with gloo")
def test_timed_run_times_collectives_and_leaves_their_waits_out():
    """Run in a child process: on torch 2.6 a gloo process group's destructor can deadlock under
    CPU load (seen in ~ProcessGroupGloo), which would hang the suite; the checks are done once the
    child prints CHECKED, and a child stuck in that teardown afterwards is killed."""
    import subprocess
    import sys
    from pathlib import Path

    child = subprocess.Popen([sys.executable, "-c", "from tests.test_measure import timed_collectives_checked as f; f()"],
                             cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        out, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        assert CHECKED in out, f"the child neither finished nor passed its checks: {err[-2000:]}"
        return
    assert child.returncode == 0 and CHECKED in out, err[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_measured_mode_gives_device_times():
    report = measured(GQA, TINY_LLAMA, device="cuda")
    m = report["totals"]["measured"]
    assert m["timing"].startswith("cuda") and m["ops_unmatched"] == []
    for op in report["ops"]:
        assert op["measured"]["time_s"] > 0, op  # kernel time launched inside the op's range
        assert op["measured"]["cpu_time_s"] > 0, op  # the range's CPU duration (launch cost)
    assert 0 < m["op_time_s"] <= m["step_time_s"]
    assert sum(op["measured"]["time_s"] for op in report["ops"]) == pytest.approx(m["op_time_s"], rel=1e-9)


def test_align_maps_by_name_and_reports_differences():
    same, problems = align(["a", "b", "c"], ["a", "b", "c"])
    assert same == {0: 0, 1: 1, 2: 2} and problems == []
    mapping, problems = align(["a", "b", "c", "d"], ["a", "x", "c", "d"])
    assert mapping == {0: 0, 2: 2, 3: 3}
    assert len(problems) == 1 and "replace" in problems[0]


def test_trace_is_json_with_counts_in_op_event_args(tmp_path):
    trace = tmp_path / "trace.json"
    report = measured(GQA, TINY_LLAMA, trace=str(trace))
    data = json.loads(trace.read_text())
    ops = {op["index"]: op for op in report["ops"]}
    events = [e for e in data["traceEvents"] if str(e.get("name", "")).startswith("rk#")]
    assert len(events) == 2 * len(ops)  # one range per op per repeat
    seen = set()
    for e in events:
        args = e["args"]
        op = ops[args["rk_index"]]
        seen.add(args["rk_index"])
        assert e["name"] == f"rk#{op['index']} {op['name']}"
        assert args["rk_flops"] == op["flops"]
        assert args["rk_bytes"] == op["bytes_read"] + op["bytes_written"]
        assert args["rk_module"] == op["module"]
        assert args["rk_bound"] == op["bound"]
        assert args["rk_intensity"] == op["intensity"]
        assert "bytes" not in args and "flops" not in args  # HTA's own field names stay free
    assert seen == set(ops)
    steps = [e for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert sorted(e["name"] for e in steps) == ["ProfilerStep#0", "ProfilerStep#1"]
    assert steps[0]["args"]["rk_flops"] == report["totals"]["flops"]
    assert not list(tmp_path.glob(".trace.json.*"))  # atomic: no temporary left behind


def test_compare_hardware_adds_a_second_placement():
    report = measured(GQA, TINY_LLAMA, compare_hardware="H200")
    h200 = hardware_db().get("H200")
    t = report["totals"]
    alt = t["placement_alt"]
    assert alt["hardware"] == h200.name == report["hardware_alt"]["name"]
    peak, bw = h200.peak_flops["fp32"], h200.memory_bandwidth
    assert alt["time_bound_s"] == pytest.approx(max(t["flops"] / peak, t["bytes"] / bw))
    assert alt["predicted_step_s"] == pytest.approx(
        sum(max(op["flops"] / h200.peak_flops[op["dtype"]], (op["bytes_read"] + op["bytes_written"]) / bw)
            for op in report["ops"]))
    assert alt["mbu"] == pytest.approx(t["bytes"] / (t["measured"]["step_time_s"] * bw))
    for mod in report["modules"]:
        pa = mod["placement_alt"]
        assert pa["time_bound_s"] == pytest.approx(max(mod["flops"] / h200.peak(mod["dtype"]), mod["bytes"] / bw))
        assert pa["bound"] in ("memory", "compute", "none")
    assert report["attention"][0]["placement_alt"]["hardware"] == h200.name


def test_cli_measured_table_and_errors(invoke, tmp_path):
    args = ["profile", GQA, "--device", "cpu", "--dtype", "fp32", "--context", "64", "--batch", "2",
            "--measure", "--warmup", "1", "--repeats", "2", "--compare-hardware", "H200"]
    for k, v in TINY_LLAMA.items():
        args += ["-O", f"{k}={v}"]
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "measured (cpu, mean of 2 after 1 warm-up)" in out
    assert "MFU" in out and "MBU" in out and "x bound" in out
    assert "compared with H200 SXM" in out
    # measured mode needs a real device; a trace needs measured mode; bad repeat counts
    for bad, needle in ((["--measure"], "--device cpu or --device cuda"),
                        (["--trace", tmp_path / "t.json"], "add --measure"),
                        (["--device", "cpu", "--measure", "--repeats", "0"], "--repeats")):
        result = invoke("profile", GQA, "-O", "layers=1", *bad)
        assert result.exit_code != 0
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr, result.stderr


FUSED_MOE = '''
import torch
from torch import nn


class Experts(nn.Module):  # 3-D per-expert weights: the moe plugin models this module
    def __init__(self, e=8, h=64, i=64):
        super().__init__()
        self.top_k = 2
        self.gate_up = nn.Parameter(torch.randn(e, h, 2 * i) * 0.02)
        self.down = nn.Parameter(torch.randn(e, i, h) * 0.02)

    def forward(self, x):
        return x * 1.0


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(64, 64)
        self.experts = Experts()
        self.out = nn.Linear(64, 64)

    def forward(self, x):
        return self.out(self.experts(self.inp(x)))


def build_model():
    return M()


def make_inputs(batch, context, phase):
    return (torch.randn(batch, 64),)
'''


def test_modelled_records_keep_the_numbering_and_get_no_time(tmp_path):
    import importlib

    from rooflinekit.core.plugins import PluginHost

    host = PluginHost()
    if "moe" not in [i.name for i in host.infos]:  # an editable install made before the entry point
        host.register(importlib.import_module("rooflinekit_plugins.moe"), "moe")
    path = tmp_path / "fused_moe.py"
    path.write_text(FUSED_MOE)
    workload = Workload("decode", 4, 8, "fp32", "cpu", ())
    report = run_profile(load_source(str(path), {}, host), workload, Deployment("H800"),
                     options=ReportOptions(measure=True, warmup=1, repeats=2), host=host).report.to_dict()
    kinds = [(op["name"], op["kind"]) for op in report["ops"]]
    assert kinds[0] == ("aten.addmm", "op") and kinds[-1] == ("aten.addmm", "op")
    assert any(kind == "modelled" for _, kind in kinds)
    m = report["totals"]["measured"]
    assert m["ops_unmatched"] == []
    for op in report["ops"]:
        if op["kind"] == "modelled":
            assert op["measured"]["time_s"] is None
        else:
            assert op["measured"]["time_s"] > 0
    assert any("stand-in of 1 modelled module" in n for n in report["notes"])


# ----------------------------------------------------------------------------------------------
# The spread of step times; figures past the physical limit; the entry a CPU run is placed on
# ----------------------------------------------------------------------------------------------


def test_step_times_report_min_median_and_max_beside_the_mean():
    from rooflinekit.outputs.render import measured_lines, seconds

    workload = Workload("decode", 2, 64, "fp32", "cpu", tuple(sorted(TINY_LLAMA.items())))
    report = run_profile(load_source(str(GQA), TINY_LLAMA), workload, Deployment("H800"),
                     options=ReportOptions(measure=True, warmup=1, repeats=4)).report
    m = report.totals.measured
    steps = sorted(m.step_times_s)
    assert len(steps) == 4
    assert m.step_time_min_s == steps[0] and m.step_time_max_s == steps[-1]
    assert m.step_time_median_s == pytest.approx((steps[1] + steps[2]) / 2, rel=1e-12)
    assert m.step_time_min_s <= m.step_time_s <= m.step_time_max_s
    header = measured_lines(report)[0]
    assert (f"step {seconds(m.step_time_s)} (min {seconds(steps[0])}, median {seconds(m.step_time_median_s)}, "
            f"max {seconds(steps[-1])})") in header
    again = type(report).from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.totals.measured.step_time_median_s == m.step_time_median_s


ONE_MATMUL = '''
import torch


class OneMatmul(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 64))

    def forward(self, x):
        return x @ self.w


def build_model():
    return OneMatmul()


def make_inputs(batch, context, phase):
    return (torch.randn(8, 64),)
'''
#: [8, 64] @ [64, 64] in fp32: 2*8*64*64 FLOPs; x and w read, the output written.
MM_FLOPS = 2 * 8 * 64 * 64
MM_BYTES = (8 * 64 + 64 * 64 + 8 * 64) * 4


def _toy_entry(folder, name, peak, bandwidth, cpu_name):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name.lower().replace(' ', '_')}.toml"
    path.write_text(f'''name = "{name}"
vendor = "CPU"
aliases = []
calibrated = true
memory_bandwidth = {float(bandwidth)!r}

[peak_flops]
fp32 = {float(peak)!r}

[calibration]
device = "cpu"
device_name = "{cpu_name}"
date = "2026-01-01"
''')
    return path


def _one_matmul(tmp_path, hardware, **kw):
    path = tmp_path / "one_matmul.py"
    path.write_text(ONE_MATMUL)
    workload = Workload("prefill", 8, 1, "fp32", "cpu", ())
    return run_profile(load_source(str(path), {}), workload, Deployment(hardware), options=ReportOptions(**kw)).report


@pytest.mark.parametrize("peak,bandwidth,op_s,figures,first_cause", [
    # compute-bound on the entry: half the bound's time is HFU (and MFU) 200%
    (1e9, 1e9, MM_FLOPS / 1e9 / 2, ["MFU 200%", "HFU 200%", "0.50x the roofline bound"], "'Toy' is not this device"),
    # memory-bound on the entry: 20 kB fit in any CPU cache, so the caches come first
    (1e15, 1e8, MM_BYTES / 1e8 / 2, ["MBU 200%", "0.50x the roofline bound"], "the CPU caches hold the working set"),
])
def test_figures_past_the_physical_limit_are_flagged_with_the_likely_cause(tmp_path, peak, bandwidth, op_s, figures,
                                                                           first_cause):
    from rooflinekit.analyses.measure import Measurement
    from rooflinekit.analyses.measured import with_measurement

    entry = _toy_entry(tmp_path / "hw", "Toy", peak, bandwidth, "some CPU")
    report = _one_matmul(tmp_path, str(entry), measure=False)
    (op,) = report.ops
    assert (op.flops, op.bytes) == (MM_FLOPS, MM_BYTES)
    hw = hardware_db().get(str(entry))
    fast = Measurement("cpu", 0, 1, {op.index: op_s}, {}, [op_s], op_s, "cpu: test")
    out = with_measurement(report, hw, fast)
    flagged = [w for w in out.warnings if "past the physical limit" in w]
    assert len(flagged) == 2, out.warnings  # the step, and the ops and modules together
    step, rows = flagged
    assert step.startswith(f"measured step past the physical limit ({', '.join(figures)} on 'Toy')")
    assert f"likely {first_cause}" in step
    assert rows.startswith("1 op(s) and 1 module(s) measured past the physical limit on 'Toy' "
                           f"(e.g. op 0 aten.mm in '(root)': {', '.join(figures)})"), rows
    # at twice the bound's time nothing is flagged
    slow = Measurement("cpu", 0, 1, {op.index: 4 * op_s}, {}, [4 * op_s], 4 * op_s, "cpu: test")
    assert not [w for w in with_measurement(report, hw, slow).warnings if "physical limit" in w]


def test_a_cpu_run_without_hardware_is_placed_on_this_cpus_calibrated_entry(tmp_path, monkeypatch):
    from rooflinekit.analyses.calibrate import device_name

    monkeypatch.setenv("ROOFLINEKIT_HOME", str(tmp_path / "home"))
    report = _one_matmul(tmp_path, "auto", measure=True, warmup=0, repeats=1)
    fix = [w for w in report.warnings if "rooflinekit calibrate --device cpu" in w]
    assert len(fix) == 1 and fix[0].startswith(f"measured on cpu but placed on {report.hardware.name}:"), report.warnings
    assert 'then pass -H "CPU calibrated"' in fix[0]
    assert not any("measured on cpu but placed on" in n for n in report.notes)  # said once, as the warning

    user = tmp_path / "home" / "hardware"
    _toy_entry(user, "Other CPU", 1e10, 1e10, "a CPU on another machine")  # not this CPU: never chosen
    assert "rooflinekit calibrate --device cpu" in " ".join(
        _one_matmul(tmp_path, "auto", measure=True, warmup=0, repeats=1).warnings)
    _toy_entry(user, "Mine", 2e10, 3e9, device_name("cpu"))
    report = _one_matmul(tmp_path, "auto", measure=True, warmup=0, repeats=1)
    assert report.hardware.name == "Mine"
    assert not any("calibrate --device cpu" in w for w in report.warnings), report.warnings
    assert any("placed on its calibrated entry 'Mine'" in n for n in report.notes)
    m = report.totals.measured
    assert m.mbu == pytest.approx(MM_BYTES / (m.step_time_s * 3e9))
    # counts only (no --measure), or an explicit --hardware: the entry asked for, as before
    assert _one_matmul(tmp_path, "auto", measure=False).hardware.name != "Mine"
    assert _one_matmul(tmp_path, "H800", measure=True, warmup=0, repeats=1).hardware.name == "H800 SXM5"
