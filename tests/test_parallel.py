"""Planned parallelism (--tp/--ep): one GPU's share of a single-GPU model, on the meta device."""

from __future__ import annotations

import json

import pytest
import torch

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.errors import UserError
from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.collectives import binding, summary, wire_bytes
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.model_source import build, load_source
from rooflinekit.stages.request_checks import validate_request
from rooflinekit.transforms.tp_plan import (
    normalise_style,
    resolve_tp_plan,
    structural_tp_plan,
)
from tests.conftest import EXAMPLES, MODELS

MLA = EXAMPLES / "deepseek_mla.py"
GQA = EXAMPLES / "llama_gqa.py"
TP_MLP = EXAMPLES / "tp_mlp.py"
#: Llama-style GQA with 32 heads and 8 KV heads, small widths (meta: sizes cost nothing, but keep them small).
GQA8 = {"layers": 1, "heads": 32, "kv_heads": 8, "head_dim": 32, "hidden": 1024, "intermediate": 2048,
        "vocab": 1000}


def planned(path, tp=1, ep=1, batch=4, context=32768, host=None, **options):
    workload = Workload("decode", batch, context, "bf16", "meta", tuple(sorted(options.items())))
    kwargs = {"host": host} if host is not None else {}
    return run_profile(load_source(str(path), options, host), workload, Deployment("H800", tp=tp, ep=ep),
                   **kwargs).report.to_dict()


# -- the acceptance figures ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def mla_tp8():
    return planned(MLA, tp=8, mode="absorbed", layers=1)


def test_mla_absorbed_tp8_has_16_heads_and_the_whole_latent_per_gpu(mla_tp8):
    (att,) = mla_tp8["attention"]
    assert att["num_heads"] == 16 and att["num_kv_heads"] == 1
    assert att["intensity_min"] == pytest.approx(30.2, rel=0.01)
    assert att["cache_bytes_per_token"] == 1152  # the unsharded latent: (512 + 64) * 2 B
    assert att["kv_bytes_min"] == 4 * 32768 * 1152  # every GPU reads the whole latent
    (row,) = mla_tp8["parallel"]["attention"]
    assert row["kv_heads"] == "latent replicated" and row["num_heads_total"] == 128
    # DeepSeek's reference TP: the low-rank down projections run whole on every GPU
    styles = {e["module"]: e["style"] for e in mla_tp8["parallel"]["plan"]}
    assert styles["layers.0.attn.wq_a"] == styles["layers.0.attn.wkv_a"] == "replicate"
    assert styles["layers.0.attn.wq_b"] == styles["layers.0.attn.wkv_b"] == "colwise"
    assert styles["layers.0.attn.wo"] == "rowwise"


def test_mla_absorbed_tp1_is_the_single_gpu_figure():
    report = planned(MLA, tp=1, mode="absorbed", layers=1)
    (att,) = report["attention"]
    assert att["num_heads"] == 128
    # absorbed MLA, h heads over the latent (r + rope per position), batch cancels:
    #   intensity = 2*h*S*(r + rope + r) / (S*(r + rope)*2 + h*(r + rope + r)*2)
    # FLOPs: scores against r + rope, output over r; bytes: the bf16 cache read once, plus q
    # (h*(r + rope)) and the output (h*r). At S = 32768: 240.0; as S grows: h*1088/576 = 241.8.
    h, r, rope, s = 128, 512, 64, 32768
    at_32k = 2 * h * s * (r + rope + r) / (s * (r + rope) * 2 + h * (r + rope + r) * 2)
    assert att["intensity_min"] == pytest.approx(at_32k, rel=1e-9)
    assert att["intensity_min"] == pytest.approx(h * (r + rope + r) / (r + rope), rel=0.01)
    assert round(at_32k, 1) == 240.0  # the figure docs/attention.md and docs/parallel.md quote
    assert "parallel" not in report


def test_mla_tp8_executed_figures_split_heads_but_not_the_latent(mla_tp8):
    full = planned(MLA, tp=1, mode="absorbed", layers=1)
    (a8,), (a1,) = mla_tp8["attention"], full["attention"]
    assert a8["flops_executed"] == pytest.approx(a1["flops_executed"] / 8, rel=1e-6)
    assert a8["kv_bytes_executed"] == pytest.approx(a1["kv_bytes_executed"], rel=1e-6)


@pytest.fixture(scope="module")
def gqa_reports():
    return {tp: planned(GQA, tp=tp, **GQA8) for tp in (1, 8, 16)}


def test_gqa_8_kv_heads_split_to_one_per_gpu_at_tp8(gqa_reports):
    (a1,), (a8,) = gqa_reports[1]["attention"], gqa_reports[8]["attention"]
    assert (a8["num_heads"], a8["num_kv_heads"]) == (4, 1)
    assert a8["cache_bytes_per_token"] == a1["cache_bytes_per_token"] / 8 == 2 * 32 * 2
    assert a8["intensity_min"] == pytest.approx(a1["intensity_min"], rel=1e-3)  # the group size stays 4
    assert gqa_reports[8]["parallel"]["attention"][0]["kv_heads"] == "split"
    assert gqa_reports[8]["parallel"]["kv_heads_replicated"] == []


def test_gqa_kv_heads_replicate_beyond_their_count_and_the_report_says_so(gqa_reports):
    r16, r8 = gqa_reports[16], gqa_reports[8]
    (a16,), (a8,) = r16["attention"], r8["attention"]
    assert (a16["num_heads"], a16["num_kv_heads"]) == (2, 1)
    assert a16["cache_bytes_per_token"] == a8["cache_bytes_per_token"]  # one KV head either way
    assert a16["kv_bytes_executed"] == pytest.approx(a8["kv_bytes_executed"], rel=1e-6)
    assert a16["flops_executed"] == pytest.approx(a8["flops_executed"] / 2, rel=1e-6)
    assert r16["parallel"]["kv_heads_replicated"] == ["layers.0.self_attn"]
    assert r16["parallel"]["attention"][0]["kv_heads"] == "replicated"
    assert any("replicated" in n for n in a16["notes"])


def test_gqa_tp16_text_report_says_replicated(invoke):
    args = [f"-O{k}={v}" for k, v in GQA8.items()]
    result = invoke("profile", GQA, "--tp", 16, "-b", 4, "-s", 4096, "-H", "H800", *args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # header lines wrap at 100 columns
    assert "KV heads replicated (1 per GPU) in layers.0.self_attn" in text
    assert "Collectives per GPU" in text and "binds" in text


def test_all_reduce_bytes_follow_the_ring_formula(gqa_reports):
    for tp in (8, 16):
        report = gqa_reports[tp]
        reduces = [o for o in report["ops"] if o.get("collective", {}).get("collective") == "all_reduce"]
        # o_proj, the MLP's down_proj and the vocab-parallel embedding
        assert sorted(o["module"] for o in reduces) == ["embed_tokens", "layers.0.mlp.down_proj",
                                                        "layers.0.self_attn.o_proj"]
        for o in reduces:
            c = o["collective"]
            assert c["group_size"] == tp
            assert c["message_bytes"] == 4 * 1 * 1024 * 2  # tokens x hidden x bf16
            assert c["wire_bytes"] == pytest.approx(2 * (tp - 1) / tp * c["message_bytes"])
            assert o["flops"] == 0 and o["bytes_read"] == 0 and o["bytes_written"] == 0
        assert "2(N-1)/N" in report["comm"]["assumption"]


def test_collectives_stay_out_of_flops_and_hbm_bytes_and_bound_their_own_time(gqa_reports):
    report = gqa_reports[8]
    t, comm = report["totals"], report["comm"]
    ops = [o for o in report["ops"] if o["kind"] != "collective"]
    assert t["flops"] == pytest.approx(sum(o["flops"] for o in ops))
    assert t["bytes"] == pytest.approx(sum(o["bytes_read"] + o["bytes_written"] for o in ops))
    assert comm["link_bandwidth_per_direction"] == 200e9  # H800: 400 GB/s, both directions summed
    floor = comm["latency_s"]  # H800: the NVLink latency floor per call
    assert floor > 0 and comm["expected_latency_s"] > floor
    assert t["time_comm_s"] == pytest.approx(comm["calls"] * floor + comm["wire_bytes"] / 200e9)
    assert comm["expected_time_s"] > t["time_comm_s"]
    assert t["time_compute_s"] == pytest.approx(t["flops"] / 989.4e12)
    assert t["time_memory_s"] == pytest.approx(t["bytes"] / 3.35e12)
    assert t["binding"] == "memory"
    # ops one after another: the collectives' time bounds are part of the predicted step
    assert t["predicted_step_s"] == pytest.approx(sum(o["time_bound_s"] for o in report["ops"]))


def test_tp_splits_weights_and_matmul_flops(gqa_reports):
    t1, t8 = gqa_reports[1]["totals"], gqa_reports[8]["totals"]
    p8 = gqa_reports[8]["parallel"]
    params = sum(p.numel() * 2 for p in build(load_source(str(GQA), GQA8),
                                              Workload("decode", 1, 8, "bf16", "meta", tuple(GQA8.items()))).model.parameters())
    norms = 3 * 1024 * 2
    assert p8["weights_per_gpu"] == pytest.approx((params - norms) / 8 + norms)
    # the embedding reads only this GPU's rows, every other weight is read once
    assert t8["weight_bytes"] == pytest.approx((t1["weight_bytes"] - norms) / 8 + norms, rel=1e-4)  # + rope inv_freq


def test_planned_tp2_of_the_example_matches_half_the_matmuls():
    one = planned(TP_MLP, batch=4, context=64, layers=2, hidden=256, intermediate=512)
    two = planned(TP_MLP, tp=2, batch=4, context=64, layers=2, hidden=256, intermediate=512)
    assert two["totals"]["flops"] == pytest.approx(one["totals"]["flops"] / 2)
    calls = [c for c in two["comm"]["collectives"] if c["collective"] == "all_reduce"]
    assert calls[0]["calls"] == 2 and calls[0]["message_bytes"] == 2 * 4 * 256 * 2


# -- MoE under EP and TP (modelled experts) -----------------------------------------------------

MOE = MODELS / "experts3d.py"


def _moe(report):
    return [o for o in report["ops"] if o["name"].startswith("moe.") and o["flops"]]


def test_ep_divides_experts_and_adds_two_all_to_alls():
    one, ep4 = planned(MOE, batch=4, context=8), planned(MOE, ep=4, batch=4, context=8)
    # data-parallel attention: each GPU brings its own 4 tokens and runs T*k expert rows
    assert sum(o["flops"] for o in _moe(ep4)) == pytest.approx(sum(o["flops"] for o in _moe(one)))
    e, k, t = 16, 2, 4
    touched = e / 4 * (1 - (1 - k / e) ** (4 * t))
    weights = touched * (2 * 128 * 256 + 256 * 128) * 2
    assert sum(o["param_bytes"] for o in _moe(ep4)) == pytest.approx(weights)
    a2a = [o["collective"] for o in ep4["ops"] if o.get("collective", {}).get("collective") == "all_to_all"]
    assert len(a2a) == 2  # dispatch and combine
    for c in a2a:
        assert c["message_bytes"] == t * k * 256 * 2
        assert c["wire_bytes"] == pytest.approx(3 / 4 * c["message_bytes"])
    assert ep4["parallel"]["ep"] == 4 and "per GPU" in ep4["parallel"]["batch_meaning"]


def _ep_report(ep: int, **settings) -> dict:
    workload = Workload("decode", 4, 8, "bf16", "meta", ())
    return run_profile(load_source(str(MOE), {}), workload, Deployment("H800", ep=ep, **settings)).report.to_dict()


def test_redundant_experts_hold_whole_slots_and_split_their_hits():
    """16 experts over EP 6 with 2 copies: 18 slots, 3 per GPU; the weights read follow the slots hit."""
    e, k, t, ep, r = 16, 2, 4, 6, 2
    report = _ep_report(ep, redundant_experts=r)
    per_expert = (2 * 128 * 256 + 256 * 128) * 2
    # slots: 14 experts with one copy, 2 with two; each copy of those gets half their tokens' picks
    hit = (e - r) * (1 - (1 - k / e) ** (ep * t)) + 2 * r * (1 - (1 - k / (2 * e)) ** (ep * t))
    assert sum(o["param_bytes"] for o in _moe(report)) == pytest.approx(hit / ep * per_expert)
    whole = _ep_report(8)
    held_experts = report["parallel"]["weights_per_gpu"] - (whole["parallel"]["weights_per_gpu"] - e / 8 * per_expert)
    assert held_experts == pytest.approx((e + r) / ep * per_expert)  # 3 experts' weights per GPU


def test_ep_imbalance_scales_the_busiest_ranks_rows_and_all_to_all():
    even, skewed = _ep_report(4), _ep_report(4, ep_imbalance=1.5)
    assert sum(o["flops"] for o in _moe(skewed)) == pytest.approx(1.5 * sum(o["flops"] for o in _moe(even)))
    assert sum(o["param_bytes"] for o in _moe(skewed)) == pytest.approx(sum(o["param_bytes"] for o in _moe(even)))

    def a2a(r):
        return [o["collective"]["message_bytes"] for o in r["ops"]
                if o.get("collective", {}).get("collective") == "all_to_all"]

    assert a2a(skewed) == [1.5 * m for m in a2a(even)]


def test_expert_parallel_settings_are_checked(invoke):
    result = invoke("profile", MOE, "--ep", 6)
    assert result.exit_code == 2 and "give --redundant-experts 2" in result.output
    result = invoke("profile", MOE, "--ep", 6, "--redundant-experts", 2)
    assert result.exit_code == 0, result.output
    result = invoke("profile", MOE, "--ep-imbalance", 0.5, "--ep", 4)
    assert result.exit_code == 2 and "--ep-imbalance must be a number from 1 to 64" in result.output
    result = invoke("profile", MOE, "--redundant-experts", 2)
    assert result.exit_code == 2 and "give --ep above 1 too" in result.output


def test_tp_splits_each_expert_and_ep_equal_tp_splits_the_experts():
    one = planned(MOE, batch=4, context=8)
    tp2 = planned(MOE, tp=2, batch=4, context=8)
    both = planned(MOE, tp=2, ep=2, batch=4, context=8)
    full = sum(o["flops"] for o in _moe(one))
    assert sum(o["flops"] for o in _moe(tp2)) == pytest.approx(full / 2)
    assert sum(o["flops"] for o in _moe(both)) == pytest.approx(full / 2)
    for report in (tp2, both):
        kinds = {o["collective"]["collective"] for o in report["ops"] if o.get("collective")}
        assert kinds == {"all_reduce"}  # experts' partial sums, then the dense MLP's down_proj
    assert tp2["totals"]["flops"] == pytest.approx(one["totals"]["flops"] / 2, rel=0.02)


def test_ep_must_divide_the_experts_and_equal_tp_when_both(invoke):
    result = invoke("profile", MOE, "--ep", 3)
    assert result.exit_code == 2 and "--ep 3 does not divide the 16 experts" in result.output
    result = invoke("profile", MOE, "--ep", 4, "--tp", 2)
    assert result.exit_code == 2 and "only --ep equal to --tp" in result.output


# -- errors ---------------------------------------------------------------------------------------


def test_tp_must_divide_the_heads(invoke):
    result = invoke("profile", GQA, "--tp", 3, *[f"-O{k}={v}" for k, v in GQA8.items()])
    assert result.exit_code == 2
    assert "--tp 3 does not divide the 32 attention heads of layers.0.self_attn" in result.output
    result = invoke("profile", GQA, "--tp", 16, "-Oheads=32", "-Okv_heads=6", "-Olayers=1")
    assert result.exit_code != 0


def test_tp_refuses_measured_mode(invoke):
    result = invoke("profile", TP_MLP, "--tp", 2, "--device", "cpu", "--measure", "-Ohidden=64",
                    "-Ointermediate=128")
    assert result.exit_code == 2 and "drop --measure" in result.output


# -- plans ------------------------------------------------------------------------------------------


def _modules(path, **options):
    return dict(build(load_source(str(path), options),
                      Workload("decode", 1, 8, "bf16", "meta", tuple(options.items()))).model.named_modules())


def test_resolve_patterns_exact_paths_and_transformers_styles():
    modules = _modules(GQA, layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=100)
    plan = {"layers.*.self_attn.q_proj": "colwise", "layers.1.self_attn.q_proj": "replicate",
            "layers.*.mlp.down_proj": "rowwise_rep", "lm_head": "colwise_gather_output",
            "embed_tokens": "embedding_rowwise", "layers.*.mlp.gate_proj": "mystery",
            "layers.*.mlp.experts.gate_up_proj": "packed_colwise"}
    styles, notes = resolve_tp_plan(plan, modules)
    assert styles["layers.0.self_attn.q_proj"] == "colwise"
    assert styles["layers.1.self_attn.q_proj"] == "replicate"  # an exact path beats a pattern
    assert styles["layers.0.mlp.down_proj"] == "rowwise"
    assert styles["lm_head"] == "colwise_gather" and styles["embed_tokens"] == "vocab"
    assert styles["layers.1.mlp.gate_proj"] == "replicate" and any("mystery" in n for n in notes)
    assert not any("experts" in p for p in styles)  # parameters, not modules
    assert normalise_style("packed_colwise") == "colwise" and normalise_style("nope") is None


def test_structural_tp_plan_of_gpt2_keeps_position_embeddings_whole():
    from rooflinekit.core.specs import AttentionSpec

    modules = _modules(EXAMPLES / "gpt2_mha.py", layers=1, hidden=64, heads=4, vocab=100, max_positions=32)
    model = modules[""]
    spec = AttentionSpec(arch="mha", num_heads=4, num_kv_heads=4, head_dim=16, v_head_dim=16)
    plan = structural_tp_plan(model, {"h.0.attn": spec})
    assert plan["h.0.attn.c_attn"] == "colwise" and plan["h.0.attn.c_proj"] == "rowwise"
    assert plan["h.0.mlp.c_fc"] == "colwise" and plan["h.0.mlp.c_proj"] == "rowwise"
    assert plan["wte"] == "vocab" and "wpe" not in plan
    assert plan.get("lm_head") == "colwise_gather"


def test_structural_tp_plan_leaves_a_moe_router_replicated():
    model = _modules(MOE)[""]
    plan = structural_tp_plan(model, {})
    assert "moe.router" not in plan
    assert plan["mlp.down_proj"] == "rowwise" and plan["mlp.gate_proj"] == plan["mlp.up_proj"] == "colwise"


class _OverridePlan:
    """A third-party plan: keeps every MLP down projection whole."""

    @hookimpl
    def rooflinekit_tp_plan(self, model, workload, attention):
        return {"layers.*.mlp.down": "replicate"}


def test_a_plugin_plan_takes_precedence_over_the_built_in_rules():
    host = PluginHost()
    host.register(_OverridePlan(), "override", "tests")
    report = planned(TP_MLP, tp=2, batch=4, context=64, host=host, layers=1, hidden=256, intermediate=512)
    styles = {e["module"]: e["style"] for e in report["parallel"]["plan"]}
    assert styles["layers.0.mlp.down"] == "replicate" and styles["layers.0.mlp.up"] == "colwise"
    assert report["parallel"]["plan_sources"][0] == "override"
    assert not report["comm"]["collectives"]  # no rowwise linear left, so no all-reduce


# -- collectives arithmetic -----------------------------------------------------------------------


@pytest.mark.parametrize("kind, n, factor", [("all_reduce", 8, 2 * 7 / 8), ("all_gather", 4, 3 / 4),
                                              ("reduce_scatter", 2, 1 / 2), ("all_to_all", 8, 7 / 8),
                                              ("all_reduce", 1, 0.0), ("broadcast", 4, 1.0)])
def test_ring_wire_bytes(kind, n, factor):
    assert wire_bytes(kind, 1000.0, n) == pytest.approx(1000.0 * factor)


def test_summary_and_binding():
    from rooflinekit.stages.capture import OpRecord
    from rooflinekit.stages.collectives import attrs

    ops = [OpRecord(0, "comm.all_reduce", "a", 0, 0, 0, "bf16", True, kind="collective",
                    attrs=attrs("all_reduce", 4, 100.0, "planned")) for _ in range(3)]
    hw = HardwareSpec("x", {"bf16": 1e15}, 1e12, interconnect_bandwidth=400e9, interconnect_latency=1e-6,
                      collective_latency=10e-6)
    s = summary(ops, hw)
    assert s["calls"] == 3 and s["wire_bytes"] == pytest.approx(3 * 150.0)
    assert s["time_s"] == pytest.approx(3 * 1e-6 + 450.0 / 200e9)
    # expected: 100 B is small, so one-shot (one step, 3 x 100 B) at the library's latency
    (row,) = s["collectives"]
    assert row["algorithm"] == "one-shot" and row["latency_s"] == 1e-6 and row["expected_latency_s"] == 10e-6
    assert s["expected_time_s"] == pytest.approx(3 * (10e-6 + 300.0 / 200e9))
    big = [OpRecord(0, "comm.all_reduce", "a", 0, 0, 0, "bf16", True, kind="collective",
                    attrs=attrs("all_reduce", 4, 1e9, "planned"))]
    ring = summary(big, hw)
    assert ring["collectives"][0]["algorithm"] == "ring"  # 6 steps of latency, the fewest bytes
    assert ring["expected_time_s"] == pytest.approx(10e-6 + 5 * 1e-6 + 1.5e9 / 200e9)
    assert ring["time_s"] <= ring["expected_time_s"]
    bare = HardwareSpec("y", {"bf16": 1e15}, 1e12)
    assert summary(ops, bare)["time_s"] == 0 and summary(ops, bare)["note"]
    assert binding(1.0, 2.0, 3.0) == "communication" and binding(0, 0, 0) == "none"


def test_sweep_takes_tp(invoke, tmp_path):
    out = tmp_path / "sweep.json"
    result = invoke("sweep", TP_MLP, "--tp", 2, "-b", "1,4", "-s", "64", "--no-critical", "-Ohidden=256",
                    "-Ointermediate=512", "-f", "json", "-o", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["deployment"]["tp"] == 2 and "_tp" not in data["workload"]["options"]
    assert data["points"][1]["flops"] == pytest.approx(2 * 4 * 256 * 512 * 3 * 2 / 2)
    assert any("tensor parallel 2" in n for n in data["notes"])


def test_the_deployment_carries_the_sizes():
    w = Workload("decode", 1, 8)
    d = Deployment(tp=4)
    assert (d.tp, d.ep, d.parallel) == (4, 1, True) and dict(w.options) == {}
    assert not Deployment(tp=1, ep=1).parallel
    with pytest.raises(UserError):
        validate_request(w, Deployment(tp=0))
    assert torch.nn  # keep the import: tests build models on meta
