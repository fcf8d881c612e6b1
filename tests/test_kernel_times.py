"""Measured kernel times by shape (rooflinekit.stages.kernel_times): an efficiency file's
`[kernel_times]` names a database a plugin serves; where it answers, a kernel costs its answer (held
at the roofline) plus its launch, in `profile`'s op rows and totals and in the planner's step models
alike; where it does not, the class's fractions price the kernel.

The database here is a fake with round answers: every GEMM 1 ms, attention 2 ms + 1 us per position
attended, every all-reduce 3 ms. The model is the example GQA file at 4 heads, 2 KV heads, head size
16, under TP 2, so each GPU's attention has 2 heads and 1 KV head."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.cli.main import cli
from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.plan import Targets
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages import kernel_times
from rooflinekit.stages.kernel_times import gemm_dims, query
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, MODELS
from tests.test_trace_compare import FLAT  # a flat efficiency file: fractions by hand

GQA = str(EXAMPLES / "llama_gqa.py")
OPTIONS = {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16, "hidden": 64, "intermediate": 128, "vocab": 100}
GEMM_S, ATTENTION_S, PER_POSITION_S, ALL_REDUCE_S = 1e-3, 2e-3, 1e-6, 3e-3
EXPERTS_S, DISPATCH_S, PER_TOKEN_S = 4e-3, 1e-3, 1e-5
LAYER_S = 5e-3  # a whole attention layer, where the database is told to time one
MOE = str(MODELS / "experts3d.py")  # hidden 256, inter 128, 16 experts, top 2
H800_BF16, H800_FP8, H800_HBM = 989e12, 1979e12, 3.35e12  # the datasheet's dense peaks and bandwidth


def roof(op: dict) -> float:
    """An op row's roofline on H800: its FLOPs at the dense peak of its format, its bytes at HBM's rate."""
    peak = H800_FP8 if op["dtype"] == "fp8" else H800_BF16
    return max(op["flops"] / peak, (op["bytes_read"] + op["bytes_written"]) / H800_HBM)


def split(ops: list[dict], seconds: float, launch: float) -> list[float]:
    """A measured kernel of `seconds` shared by `ops`, split by their rooflines, a launch each."""
    total = sum(roof(op) for op in ops)
    return [seconds * roof(op) / total + launch for op in ops]


class _Database:
    """Round answers, and every query kept."""

    label = "fake database"

    def __init__(self, scale: float = 1.0) -> None:
        self.asked: list = []
        self.scale = scale
        self.layer_s: float | None = None  # a whole attention layer's answer, where it gives one

    def seconds(self, q):
        self.asked.append(q)
        if q.kind == "gemm":
            return GEMM_S * self.scale
        if q.kind == "attention":
            return (ATTENTION_S + PER_POSITION_S * q["kv_len"]) * self.scale
        if q.kind == "all_reduce":
            return ALL_REDUCE_S * self.scale
        if q.kind == "experts":
            return EXPERTS_S * self.scale
        if q.kind == "all_to_all" and q.get("tokens") is not None:
            return (DISPATCH_S + PER_TOKEN_S * q["tokens"]) * self.scale
        if q.kind == "attention_layer" and self.layer_s is not None:
            return self.layer_s * self.scale
        return None


class _Serves:
    def __init__(self, name: str, database: _Database) -> None:
        self.name, self.database = name, database

    @hookimpl
    def rooflinekit_kernel_times(self, source, settings):
        return self.database if source == self.name and settings == {"system": "test"} else None


@pytest.fixture
def database(tmp_path):
    """(a fake database served as 'fake-db', its efficiency file) for one test."""
    db = _Database()
    host = get_host()
    host.register(_Serves("fake-db", db), "fake-db-plugin")
    kernel_times._RESOLVED.clear()
    path = tmp_path / "measured.toml"
    path.write_text(FLAT + '[kernel_times]\nsource = "fake-db"\nsystem = "test"\n')
    yield db, path
    host.pm.unregister(name="fake-db-plugin")
    kernel_times._RESOLVED.clear()


def _profile(path, *more: str, batch: int = 4, context: int = 32) -> dict:
    args = ["profile", GQA, "--phase", "decode", "-b", str(batch), "-s", str(context), "-H", "H800",
            "--dtype", "bf16", "--kernels", "serving", "--tp", "2", "--efficiency", str(path), "-f", "json", *more]
    args += [a for k, v in OPTIONS.items() for a in ("-O", f"{k}={v}")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("name, shapes, dims", [
    ("aten.mm", "8x4096,4096x1024", (8, 1024, 4096)),
    ("aten.addmm", "1024,8x4096,4096x1024", (8, 1024, 4096)),
    ("aten.linear", "2x3x4096,1024x4096,1024", (6, 1024, 4096)),
    ("aten._scaled_mm", "16x7168,7168x2048,1,1", (16, 2048, 7168)),
    ("aten.matmul", "2x8x64,64x32", (16, 32, 64)),
    ("aten.bmm", "4x8x64,4x64x32", None),  # batched: not keyed by (m, n, k)
    ("aten.mm", "8x4096,1024x4096", None),  # inner dims differ: not a product of these shapes
    ("aten._weight_int4pack_mm", "8x4096,512x32x32x4", None),
])
def test_a_products_dims_come_from_its_shapes(name, shapes, dims):
    assert gemm_dims(name, shapes) == dims


def test_a_micro_batch_is_asked_at_half_its_tokens():
    assert query("gemm", "fp8", m=7, n=10, k=20).halved() == query("gemm", "fp8", m=4, n=10, k=20)
    attention = query("attention", "bf16", "gqa", batch=6, q_len=1, kv_len=100, heads=8, kv_heads=1, head_dim=128)
    assert attention.halved()["batch"] == 3 and attention.halved()["kv_len"] == 100
    prompt = query("attention", "bf16", "gqa", batch=1, q_len=1000, kv_len=1200, heads=8, kv_heads=1, head_dim=128)
    assert (prompt.halved()["q_len"], prompt.halved()["kv_len"]) == (500, 700)
    assert query("all_reduce", "", message_bytes=10, group_size=2).halved() == \
        query("all_reduce", "", message_bytes=10, group_size=2)


def test_each_kernel_costs_its_measured_time_and_its_launch(database):
    db, path = database
    data = _profile(path)
    ops, totals = data["ops"], data["totals"]
    gemms = [op for op in ops if op["name"] == "aten.mm"]
    attention = [op for op in ops if op["name"] == "serving.attention"]
    assert gemms and len(attention) == 2  # one serving kernel per layer
    # the engine's merged QKV and gate/up GEMMs: one kernel each, its time split among the siblings
    # by their rooflines; o_proj, down_proj and the head are kernels of their own
    merged = {"qkv": ("q_proj", "k_proj", "v_proj"), "gate_up": ("gate_proj", "up_proj")}
    for layer in ("layers.0.", "layers.1."):
        for names in merged.values():
            members = [op for op in gemms if op["module"].startswith(layer) and op["module"].endswith(names)]
            assert len(members) == len(names)
            assert [op["expected_s"] for op in members] == pytest.approx(split(members, GEMM_S, 1e-6))
    alone = [op for op in gemms if op["module"].endswith(("o_proj", "down_proj", "lm_head"))]
    assert len(alone) == 5 and all(op["expected_s"] == pytest.approx(GEMM_S + 1e-6) for op in alone)
    asked = {q.kind: [] for q in db.asked}
    for q in db.asked:
        asked[q.kind].append(q)
    # each GEMM asked at one GPU's (m, n, k): 2 m n k is the op's FLOPs, or its merged kernel's
    flops = {op["flops"] for op in gemms} | {2 * 4 * 64 * (32 + 16 + 16), 2 * 4 * 64 * (64 + 64)}
    assert {2 * q["m"] * q["n"] * q["k"] for q in asked["gemm"]} <= flops
    assert all(q["m"] == 4 for q in asked["gemm"])  # 4 sequences, one new token each
    for q in asked["attention"]:  # one GPU's heads under TP 2, the cache in bf16
        assert (q.variant, q.dtype, q["batch"], q["q_len"], q["heads"], q["kv_heads"], q["head_dim"]) == \
            ("gqa", "bf16", 4, 1, 2, 1, 16)
    # context 32 counts every position attended, the new token's included
    assert {q["kv_len"] for q in asked["attention"]} == {32}
    assert all(op["expected_s"] == pytest.approx(ATTENTION_S + PER_POSITION_S * 32 + 1e-6) for op in attention)
    reduces = [c for c in data["comm"]["collectives"] if c["collective"] == "all_reduce" and c["message_bytes"]]
    assert reduces and all(c["expected_time_s"] == pytest.approx(c["calls"] * ALL_REDUCE_S) for c in reduces)
    assert all(c["algorithm"] == "measured" for c in reduces)
    kernels = sum(op["expected_s"] for op in ops if op.get("expected_s") is not None)
    assert totals["expected_step_s"] == pytest.approx(kernels + data["comm"]["expected_time_s"])
    assert any("fake database" in line and "measured by shape" in line for line in totals["expected_conventions"])


def test_the_launch_a_databases_times_carry_is_taken_off_before_the_steps_own(database):
    """A database timed in CUDA-graph replays says each time carries a graph node's launch (here
    0.4 us): a kernel costs its measured time less that, plus the step's own launch (FLAT: 1 us)."""
    db, path = database
    db.launch_included_s = 0.4e-6
    ops = _profile(path)["ops"]
    alone = [op for op in ops if op["name"] == "aten.mm" and op["module"].endswith(("o_proj", "down_proj"))]
    assert len(alone) == 4 and all(op["expected_s"] == pytest.approx(GEMM_S - 0.4e-6 + 1e-6) for op in alone)
    attention = [op for op in ops if op["name"] == "serving.attention"]
    assert all(op["expected_s"] == pytest.approx(ATTENTION_S + PER_POSITION_S * 32 - 0.4e-6 + 1e-6)
               for op in attention)
    # a kernel several records make (the merged QKV: one GEMM) carries a launch per record, as each
    # record's own goes back on
    qkv = [op for op in ops if op["module"].startswith("layers.0.") and op["module"].endswith(("q_proj", "k_proj",
                                                                                               "v_proj"))]
    assert len(qkv) == 3 and [op["expected_s"] for op in qkv] == pytest.approx(split(qkv, GEMM_S - 3 * 0.4e-6, 1e-6))


def test_a_measured_time_under_the_roofline_is_held_at_it(database):
    db, path = database
    db.scale = 1e-12
    ops = _profile(path)["ops"]
    gemms = [op for op in ops if op["name"] == "aten.mm"]
    assert gemms and all(op["expected_s"] == pytest.approx(op["time_bound_s"] + 1e-6) for op in gemms)


@pytest.mark.parametrize("ep, overlap", [(1, "none"), (2, "none"), (2, "two-batch")])
def test_an_moe_call_measured_under_its_roofline_is_held_at_it_whole(database, ep, overlap):
    """A database answering the MoE call faster than its records' work could run: its gate-up and
    down records (held at their own rooflines) and its activation and combine (share 0, nothing of
    their own) come to the sum of the four rooflines, so the step stays at or above the sum of its
    ops' bounds; the planner's step model holds it the same way."""
    db, path = database
    db.scale = 1e-9
    args = ["profile", MOE, "--phase", "decode", "-b", "2", "-s", "256", "-H", "H800", "--ep", str(ep),
            "--overlap", overlap, "--kernels", "serving", "--efficiency", str(path), "-f", "json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    call = [op for op in data["ops"] if op["name"] in ("moe.gate_up_proj", "moe.down_proj", "moe.act_and_mul",
                                                         "moe.combine")]
    assert len(call) == 4
    if overlap == "none":  # each record's own roofline (ops' bounds), plus FLAT's 1 us launch each
        assert sum(op["expected_s"] for op in call) == pytest.approx(sum(op["time_bound_s"] + 1e-6 for op in call))
    totals = data["totals"]
    assert totals["expected_step_s"] >= totals["predicted_step_s"] * (1 - 1e-12)
    model = _step_model(MOE, {}, Deployment("H800", ep=ep, kernels="serving", overlap=overlap), str(path))
    assert model.expected(2, 256) == pytest.approx(totals["expected_step_s"], rel=1e-9)


def test_unanswered_kernels_keep_their_fractions(database):
    db, path = database
    ops = _profile(path)["ops"]
    norms = [op for op in ops if op["name"] == "serving.fused_add_rms_norm"]
    assert norms
    for op in norms:  # element-wise at FLAT's (0.5, 0.125)
        hand = max(op["flops"] / (0.5 * 989e12), (op["bytes_read"] + op["bytes_written"]) / (0.125 * 3.35e12))
        assert op["expected_s"] == pytest.approx(hand + 1e-6, rel=1e-3)


def test_the_planner_prices_the_measured_times_as_profile_does(database):
    db, path = database
    host = get_host()
    source = load_source(GQA, OPTIONS, host)
    search = PlanOptions(gpus=2, tps=(2,), pps=(1,), max_batch=8, weight_dtypes=("bf16",), kv_dtypes=("bf16",),
                         efficiency=str(path))
    plan = run_plan(source, Targets(256, 64, tpot_s=1.0), search, host=host)
    priced = [c for c in plan.configs if c.step_s is not None]
    assert priced and any("fake database" in n and "own shape" in n for n in plan.notes)
    for c in priced[:3]:
        again = run_profile(source, Workload("decode", c.batch, c.step_context, c.dtype),
                            Deployment("H800", tp=c.tp, kernels=c.kernels, efficiency=str(path),
                                       memory_fraction=0.9),
                            options=ReportOptions(detail=False, measure=False), host=host).report
        assert c.step_s == pytest.approx(again.totals.expected_step_s, rel=1e-6), c.label()


def test_a_source_no_plugin_serves_is_refused_in_one_line(tmp_path):
    kernel_times._RESOLVED.clear()
    path = tmp_path / "nobody.toml"
    path.write_text(FLAT + '[kernel_times]\nsource = "nobody-serves-this"\n')
    result = CliRunner().invoke(cli, ["profile", GQA, "-O", "layers=2", "--efficiency", str(path)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "nobody-serves-this" in result.output and "no installed plugin serves" in result.output


def test_an_moe_layer_and_its_all_to_alls_are_asked_at_their_shapes(database):
    """Experts over 2 GPUs with data-parallel attention, 8 sequences each: the layer is asked at the 16
    tokens routed into the group, and the call's four records (gate-up, activation, down, weighted
    combine) share it by their rooflines; each dispatch and combine at this GPU's 8 tokens."""
    db, path = database
    args = ["profile", MOE, "--phase", "decode", "-b", "8", "-s", "256", "-H", "H800", "--ep", "2",
            "--kernels", "serving", "--efficiency", str(path), "-f", "json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    call = [op for op in data["ops"] if op["name"].startswith("moe.") and op["kind"] == "modelled"]
    assert sorted(op["name"] for op in call) == ["moe.act_and_mul", "moe.combine", "moe.down_proj", "moe.gate_up_proj"]
    assert [op["expected_s"] for op in call] == pytest.approx(split(call, EXPERTS_S, 1e-6))  # FLAT: 1 us a launch
    (asked,) = {q for q in db.asked if q.kind == "experts"}
    assert (asked["tokens"], asked["hidden"], asked["inter"], asked["top_k"], asked["experts"], asked["tp"],
            asked["ep"]) == (16, 256, 128, 2, 16, 1, 2)
    (calls,) = [c for c in data["comm"]["collectives"] if c["collective"] == "all_to_all"]
    assert calls["algorithm"] == "measured"
    assert calls["expected_time_s"] == pytest.approx(calls["calls"] * (DISPATCH_S + PER_TOKEN_S * 8))
    stages = sorted(q["combine"] for q in db.asked if q.kind == "all_to_all" and q.get("combine") is not None)
    assert stages[0] == 0 and stages[-1] == 1


def test_an_moe_calls_activation_is_asked_in_its_gemms_format(database):
    """fp8 experts: the GEMM records are fp8, the activation and combine records bf16 (the
    activations' format); all four are one fused-MoE call, asked once in the GEMMs' format and split
    among them by their rooflines."""
    db, path = database
    args = ["profile", MOE, "--phase", "prefill", "-b", "1", "-s", "256", "-H", "H800", "--ep", "2", "--dtype", "fp8",
            "--kernels", "serving", "--efficiency", str(path), "-f", "json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    formats = {op["name"]: op["dtype"] for op in data["ops"] if op["name"].startswith("moe.")}
    assert formats["moe.gate_up_proj"] == "fp8" and formats["moe.act_and_mul"] == "bf16"
    assert {q.dtype for q in db.asked if q.kind == "experts"} == {"fp8"}
    call = [op for op in data["ops"] if op["name"].startswith("moe.") and op["kind"] == "modelled"]
    # FLAT's prefill launch, 20 us a kernel (its file has no host_prefill_s: added to every kernel)
    assert len(call) == 4 and [op["expected_s"] for op in call] == pytest.approx(split(call, EXPERTS_S, 2e-5))


def test_two_micro_batches_are_asked_at_half_their_tokens(database):
    db, path = database
    args = ["profile", MOE, "--phase", "decode", "-b", "8", "-s", "256", "-H", "H800", "--ep", "2",
            "--kernels", "serving", "--overlap", "two-batch", "--efficiency", str(path), "-f", "json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert 8 in {q["tokens"] for q in db.asked if q.kind == "experts"}  # half of the group's 16
    assert 4 in {q["tokens"] for q in db.asked if q.kind == "all_to_all" and q.get("tokens")}  # half of 8
    data = json.loads(result.stdout)
    kernels = sum(op["expected_s"] for op in data["ops"] if op.get("expected_s") is not None)
    calls = sum(c["calls"] for c in data["comm"]["collectives"] if c["collective"] == "all_to_all")
    # each call twice at half its tokens; the step is the longer of the two streams
    assert data["totals"]["expected_step_s"] == pytest.approx(max(kernels, calls * 2 * (DISPATCH_S + PER_TOKEN_S * 4)))


def test_the_planner_prices_an_expert_parallel_step_as_profile_does(database):
    db, path = database
    host = get_host()
    source = load_source(MOE, {}, host)
    search = PlanOptions(gpus=2, tps=(1,), eps=(2,), pps=(1,), max_batch=16, weight_dtypes=("bf16",),
                         kv_dtypes=("bf16",), efficiency=str(path))
    plan = run_plan(source, Targets(256, 64, tpot_s=1.0), search, host=host)
    priced = [c for c in plan.configs if c.step_s is not None and c.ep == 2]
    assert priced
    for c in priced[:3]:
        again = run_profile(source, Workload("decode", c.batch, c.step_context, c.dtype),
                            Deployment("H800", tp=c.tp, ep=c.ep, kernels=c.kernels, efficiency=str(path),
                                       memory_fraction=0.9),
                            options=ReportOptions(detail=False, measure=False), host=host).report
        assert c.step_s == pytest.approx(again.totals.expected_step_s, rel=1e-6), c.label()


def _step_model(path: str, options: dict, deployment: Deployment, efficiency: str, shape=None):
    """A step model on H800 priced with the efficiency source `efficiency` (default: decode at
    batches 1 and 2, contexts 256 and 320)."""
    from rooflinekit.analyses.stepfit import Shape, StepFitter
    from rooflinekit.stages.efficiency_table import with_efficiency
    from rooflinekit.stages.hardware import hardware_db

    host = get_host()
    db = hardware_db(host)
    fitter = StepFitter(load_source(path, options, host), Workload("decode", 1, 256, options=tuple(
        sorted(options.items()))), host, db)
    hw = with_efficiency(db.get("H800"), efficiency, host)
    return fitter.step_model(shape or Shape("decode", 1, (1, 2), (256, 320)), deployment, hw)


def test_a_mixed_steps_all_to_all_is_asked_at_both_steps_tokens(database):
    """A chunked-prefill step under EP 2: each all-to-all is the decode step's call merged with the
    prompt's, asked at the decode tokens plus the chunk's share of the prompt's (where it had been
    priced from the link figures, so a step carrying a prompt came out cheaper than one without)."""
    from rooflinekit.analyses.stepfit import Shape
    from rooflinekit.stages.stepmixed import mixed_mean

    db, path = database
    deployment = Deployment("H800", ep=2, kernels="serving")
    decode = _step_model(MOE, {}, deployment, str(path))
    prefill = _step_model(MOE, {}, deployment, str(path), Shape("prefill", 1, (1,), (64, 128)))
    alone = mixed_mean(decode, prefill, 2, 256, 257, 0.0)
    db.asked.clear()
    mixed = mixed_mean(decode, prefill, 2, 256, 257, 0.5)
    assert mixed > alone
    tokens = {q["tokens"] for q in db.asked if q.kind == "all_to_all" and q.get("tokens") is not None}
    assert tokens == {2 + 0.5 * 64}  # this GPU's 2 decode tokens and half of the 64-token prompt's


def test_a_mixed_steps_layer_is_no_one_measured_layer(database):
    """A step that runs a prompt's chunk beside decode groups runs each layer at several shapes: no
    one measured layer prices it, in `profile --mix` and the planner's mixed step alike, so its
    records are asked as their own kernels; a decode step alone is asked as the layer. `profile
    --mix` prices the mixed step as the same records without a layer answer do."""
    from rooflinekit.analyses.stepfit import Shape
    from rooflinekit.stages.stepmixed import mixed_mean

    db, path = database

    def mixed_step() -> float:
        args = ["profile", GQA, "--mix", "1024:4", "--chunk", "256", "-H", "H800", "--dtype", "bf16", "--kernels",
                "serving", "--tp", "2", "--efficiency", str(path), "-f", "json"]
        result = CliRunner().invoke(cli, args + [a for k, v in OPTIONS.items() for a in ("-O", f"{k}={v}")])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["totals"]["expected_step_s"]

    db.layer_s = LAYER_S
    mixed = mixed_step()
    assert not [q for q in db.asked if q.kind == "attention_layer"]
    db.layer_s = None
    assert mixed_step() == pytest.approx(mixed, rel=1e-12)
    db.layer_s = LAYER_S
    deployment = Deployment("H800", tp=2, kernels="serving")
    decode = _step_model(GQA, OPTIONS, deployment, str(path))
    prefill = _step_model(GQA, OPTIONS, deployment, str(path), Shape("prefill", 1, (1,), (64, 128)))
    db.asked.clear()
    mixed_mean(decode, prefill, 2, 256, 257, 0.5)
    assert not [q for q in db.asked if q.kind == "attention_layer"]
    mixed_mean(decode, prefill, 2, 256, 257, 0.0)
    assert [q for q in db.asked if q.kind == "attention_layer"]


@pytest.mark.parametrize("path, options, tp, ep", [(GQA, OPTIONS, 2, 1), (MOE, {}, 1, 2)], ids=["gqa-tp2", "moe-ep2"])
def test_the_planners_means_read_the_middle_context(database, path, options, tp, ep):
    """Under measured times the mean over a generation (the planner's TPOT, decode-only or through
    the mixed path at no prompt share) prices each kernel at its time measured at the middle context,
    scaled with its bytes; at one context both equal the point price, and the all-to-alls are asked."""
    from rooflinekit.stages.stepmixed import mixed_mean

    db, path_ = database
    model = _step_model(str(path), options, Deployment("H800", tp=tp, ep=ep, kernels="serving",
                                                       efficiency=str(path_)), str(path_))
    assert any(k.query is not None for k in model.kernels)
    for batch, start, stop in ((8, 512, 2512), (3, 300, 301)):
        mean = model.mean_expected(batch, start, stop)
        assert mixed_mean(model, model, batch, start, stop, 0.0) == pytest.approx(mean, rel=1e-9)
        if stop == start + 1:
            assert mean == pytest.approx(model.expected(batch, start), rel=1e-9)
        else:  # the middle context's point price: attention grows 1 us per position, the rest is flat
            middle = model.expected(batch, (start + stop - 1) // 2)
            assert mean == pytest.approx(middle, rel=0.02)
    if ep > 1:
        assert any(q.kind == "all_to_all" and q.get("tokens") for q in db.asked)


@pytest.mark.parametrize("path, options, kernels, layer_s, ep", [
    # hidden 64 = 4 heads x 16: q_proj and o_proj of equal counts
    (GQA, OPTIONS, "as-written", None, 1), (GQA, OPTIONS, "serving", None, 1), (GQA, OPTIONS, "serving", LAYER_S, 1),
    (MOE, {}, "serving", None, 2),
], ids=["as-written", "serving", "serving-layer", "moe-ep2"])
def test_sweep_points_from_the_fit_price_as_profile_does(database, path, options, kernels, layer_s, ep):
    """A sweep's fitted points hold compact records standing for many equal kernels: each is asked
    once, at the point's own shape, and counted as many times as it stands for. The kernels a
    record declares (attention's positions, the experts' tokens, a layer's) are fitted through the
    design points (they had been asked at the template's shape), and a merged GEMM's siblings and a
    measured layer's records stand for the same layers as their kernel's others (a compact record
    had merged q_proj with o_proj, of equal counts, and counted the layer twice over)."""
    import rooflinekit

    db, efficiency = database
    db.layer_s = layer_s
    result = rooflinekit.sweep(path, batches=[1, 4, 8, 16], contexts=[256, 1024], hardware="H800", options=options,
                               critical=False, efficiency=str(efficiency), kernels=kernels, ep=ep)
    assert result.evaluated or path == MOE  # the GQA points priced from the fit, not profiled
    for point in result.points:
        workload = Workload("decode", point.batch, point.context, options=tuple(sorted(options.items())))
        again = run_profile(load_source(path, options, get_host()), workload,
                            Deployment("H800", efficiency=str(efficiency), kernels=kernels, ep=ep),
                            options=ReportOptions(detail=False, measure=False)).report
        assert point.expected_step_s == pytest.approx(again.totals.expected_step_s, rel=1e-9), (point.batch,
                                                                                                point.context)


def test_windowed_attention_is_not_asked_as_full_attention(database):
    """A database's attention kernels attend every position: a sliding-window layer keeps its fractions."""
    db, path = database
    args = ["profile", str(MODELS / "windowed_attn.py"), "-O", "window=256", "--phase", "prefill", "-b", "1",
            "-s", "2048", "-H", "H800", "--kernels", "serving", "--efficiency", str(path), "-f", "json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert not [q for q in db.asked if q.kind == "attention"]
    assert [q for q in db.asked if q.kind == "gemm"]  # the projections are still asked


def test_a_database_on_the_callers_own_plugin_host_serves_its_file(tmp_path):
    """profile(..., host=HOST): the file's database is asked of HOST's plugins, not only the process's."""
    from rooflinekit.core.plugins import PluginHost

    kernel_times._RESOLVED.clear()
    db = _Database()
    host = PluginHost()
    host.register(_Serves("own-host-db", db), "own-host-db-plugin")
    path = tmp_path / "own.toml"
    path.write_text(FLAT + '[kernel_times]\nsource = "own-host-db"\nsystem = "test"\n')
    workload = Workload("decode", 4, 32, options=tuple(sorted(OPTIONS.items())))
    report = run_profile(load_source(GQA, OPTIONS, host), workload, Deployment("H800", efficiency=str(path)),
                         options=ReportOptions(measure=False), host=host).report
    assert [q for q in db.asked if q.kind == "gemm"]
    assert any("fake database" in line for line in report.totals.expected_conventions)
    kernel_times._RESOLVED.clear()



def test_a_layer_measured_whole_is_shared_by_its_records(database):
    """A database that times whole attention layers (as AIConfigurator times TensorRT-LLM's MLA module):
    the records of each self_attn layer (merged QKV, rotary and cache write, the attention kernel,
    o_proj) share the layer's 5 ms by their rooflines, a launch each; the MLP keeps its GEMM answers. The layer is asked at one GPU's attention
    kernel with every GPU's heads, the cache's bytes per element and the code's projection weights
    (q 64 x 64, k and v 64 x 32, o 64 x 64: 12,288 elements); the planner's step model prices it alike."""
    db, path = database
    db.layer_s = LAYER_S
    data = _profile(path, batch=2, context=300)
    for layer in ("layers.0.self_attn", "layers.1.self_attn"):
        members = [op for op in data["ops"] if op["module"].startswith(layer) and op.get("expected_s")]
        names = {op["name"] for op in members}
        assert {"aten.mm", "serving.attention"} <= names and len([op for op in members if op["name"] == "aten.mm"]) == 4
        assert [op["expected_s"] for op in members] == pytest.approx(split(members, LAYER_S, 1e-6), rel=1e-9)
    mlp = [op for op in data["ops"] if op["module"].endswith(("down_proj",)) and op["name"] == "aten.mm"]
    assert len(mlp) == 2 and all(op["expected_s"] == pytest.approx(GEMM_S + 1e-6) for op in mlp)
    layers = {q for q in db.asked if q.kind == "attention_layer"}
    assert {(q.variant, q.dtype, q["batch"], q["q_len"], q["kv_len"], q["heads"], q["kv_heads"], q["head_dim"],
             q["heads_total"], q["kv_itemsize"], q["weights"]) for q in layers} == \
        {("gqa", "bf16", 2, 1, 300, 2, 1, 16, 4, 2, 64 * 64 + 2 * 64 * 32 + 64 * 64)}
    model = _step_model(GQA, OPTIONS, Deployment("H800", tp=2, kernels="serving"), str(path))
    assert model.expected(2, 300) == pytest.approx(data["totals"]["expected_step_s"], rel=1e-9)


def test_a_layer_the_database_does_not_time_asks_each_records_own_kernel(database):
    """Where the database has no answer for the whole layer, each of its records is asked as its own
    kernel (the merged QKV GEMM, the attention kernel), as the first test prices them."""
    db, path = database
    ops = _profile(path)["ops"]
    asked = {q.kind for q in db.asked}
    assert {"attention_layer", "gemm", "attention"} <= asked
    attention = [op for op in ops if op["name"] == "serving.attention"]
    assert attention and all(op["expected_s"] == pytest.approx(ATTENTION_S + PER_POSITION_S * 32 + 1e-6)
                             for op in attention)
