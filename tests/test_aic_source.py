"""--efficiency aic: fractions derived from NVIDIA AIConfigurator's measured kernel database.

Without aiconfigurator_core the source says in one line how to install it; with it, the hardware
entry maps to an AIConfigurator system (H800 to h100_sxm, said in every source), an unknown part is
refused in one line naming the systems, the file loads through rooflinekit's own loader, and one
fraction is recomputed here from AIConfigurator's own query and the datasheet numbers.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import re
from dataclasses import replace

import pytest
from click.testing import CliRunner

import rooflinekit_plugins.aic as aic
from rooflinekit.cli.main import cli
from rooflinekit.core.errors import UserError
from rooflinekit.core.plugins import get_host
from rooflinekit.stages.efficiency_table import load_table, with_efficiency
from rooflinekit.stages.hardware import hardware_db
from tests.conftest import EXAMPLES

HAVE_AIC = importlib.util.find_spec("aiconfigurator_core") is not None
needs_aic = pytest.mark.skipif(not HAVE_AIC, reason="aiconfigurator_core is not installed (pip install "
                               "'rooflinekit[aic]', Python 3.11-3.13)")
GQA = str(EXAMPLES / "llama_gqa.py")


@pytest.fixture
def host():
    """The process host, with the aic plugin registered where the installed metadata predates it."""
    host = get_host()
    added = not host.pm.has_plugin("aic")
    if added:
        host.register(aic, "aic")
    yield host
    if added:
        host.pm.unregister(name="aic")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "rooflinekit" / "aic"


def test_without_aiconfigurator_it_says_how_to_install_it(host, monkeypatch):
    real = builtins.__import__

    def no_aic(name, *args, **kwargs):
        if name.split(".")[0] == "aiconfigurator_core":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_aic)
    result = CliRunner().invoke(cli, ["profile", GQA, "-O", "layers=2", "-H", "H100", "--efficiency", "aic"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "pip install 'rooflinekit[aic]'" in lines[0], result.output
    assert "Traceback" not in result.output


def test_the_mapping():
    from rooflinekit_plugins.aic.systems import system_for

    assert system_for("H100 SXM5").name == "h100_sxm" and not system_for("H100 SXM5").note
    h800 = system_for("H800 SXM5")
    assert h800.name == "h100_sxm" and "H800" in h800.note and "400 GB/s" in h800.note
    assert system_for("mine", ["H200 SXM"]).name == "h200_sxm"
    assert system_for("MI300X") is None


@needs_aic
def test_h800_is_priced_with_h100_kernels_and_says_so(host, cache):
    hw = with_efficiency(hardware_db().get("H800"), "aic", host)
    assert hw.efficiency.startswith(str(cache)) and "h100_sxm" in hw.efficiency
    table = load_table(hw.efficiency)
    measured = [s for k, s in table.sources.items() if not k.startswith(("launch", "elementwise"))]
    assert measured and all("AIConfigurator 0.12.0 h100_sxm trtllm" in s and "[H800:" in s for s in measured)
    again = with_efficiency(hardware_db().get("H800"), "aic", host)
    assert again.efficiency == hw.efficiency  # written once


@needs_aic
def test_a_part_without_data_is_refused_in_one_line(host, cache):
    with pytest.raises(UserError) as caught:
        with_efficiency(hardware_db().get("MI300X"), "aic", host)
    message = str(caught.value)
    assert "\n" not in message and "no measured kernels for 'MI300X'" in message and "h100_sxm" in message


@needs_aic
def test_a_fraction_recomputed_from_aiconfigurators_own_query(host, cache):
    from aiconfigurator_core.sdk import common, operations, perf_database
    from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json

    h100 = hardware_db().get("H100")
    table = load_table(with_efficiency(h100, "aic", host).efficiency)
    source = table.sources["gemm_large.compute"]
    m, n, k = (int(v) for v in re.search(r"GEMM bfloat16 at M=(\d+), N=(\d+), K=(\d+)", source).groups())
    version = re.search(r"h100_sxm trtllm (\S+) database", source).group(1)
    db = perf_database.get_database("h100_sxm", "trtllm", version)
    op = operations.GEMM("gemm", 1, n, k, common.GEMMQuantMode.bfloat16)
    (_, ms, _, kind), = EngineHandle.for_database(db).evaluate_ops_json(build_ops_json([op]), is_context=True,
                                                                         batch_size=1, s=m)
    assert kind == "silicon"
    expected = (2 * m * n * k / h100.peak_flops["bf16"]) / (ms * 1e-3)
    assert table.classes["gemm_large"].compute == pytest.approx(expected, abs=1e-4)
    assert 0.3 < expected <= 1


@needs_aic
def test_the_experts_curve_recomputed_from_aiconfigurators_moe_table(host, cache):
    from aiconfigurator_core.sdk import common, operations, perf_database
    from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json

    h100 = hardware_db().get("H100")
    table = load_table(with_efficiency(h100, "aic", host).efficiency)
    curve = table.experts
    version = re.search(r"h100_sxm trtllm (\S+) database", curve.sources[0]).group(1)
    handle = EngineHandle.for_database(perf_database.get_database("h100_sxm", "trtllm", version))

    def measured(tp: int) -> float:
        op = operations.MoE("moe", 1, 7168, 2048, 8, 256, tp, 1, common.MoEQuantMode.fp8_block, "balanced", 1)
        (_, ms, _, kind), = handle.evaluate_ops_json(build_ops_json([op]), is_context=False, batch_size=128, s=1)
        assert kind == "silicon"
        return ms * 1e-3

    touched = 256 * (1 - (1 - 8 / 256) ** 128)
    bw = h100.memory_bandwidth
    # TP 8: gate-up (512 x 7168) and down (7168 x 256) at the one fraction that prices the measured layer
    shard = 7168 * 2048 / 8
    tp8 = touched * 3 * shard / bw / measured(8)
    assert curve.at[0] == 2 * shard and curve.bandwidth[0] == pytest.approx(tp8, abs=1e-4)
    # TP 4: down (7168 x 512) at TP 8's fraction, gate-up (1024 x 7168) at the point's
    shard = 7168 * 2048 / 4
    gate_up_s = measured(4) - touched * shard / (curve.bandwidth[0] * bw)
    assert curve.at[1] == 2 * shard
    assert curve.bandwidth[1] == pytest.approx(min(1.0, touched * 2 * shard / (gate_up_s * bw)), abs=1e-4)


@needs_aic
def test_the_report_names_the_source(host, cache):
    result = CliRunner().invoke(cli, ["profile", GQA, "-O", "layers=2", "-H", "H100", "--phase", "prefill",
                                      "--efficiency", "aic"])
    assert result.exit_code == 0, result.output
    assert "efficiency aic" in result.output


@needs_aic
def test_a_calibrated_entry_is_refused(host, cache):
    hw = replace(hardware_db().get("H100"), calibrated=True)
    with pytest.raises(UserError, match="calibrated entry"):
        with_efficiency(hw, "aic", host)


def _aic_ms(system: str, op, context: bool, batch: int, s: int) -> float:
    """AIConfigurator's own per-op answer (ms), asked as its estimates ask it."""
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json

    db = perf_database.get_database(system, "trtllm", perf_database.get_latest_database_version(system, "trtllm"))
    (_, ms, _, kind), = EngineHandle.for_database(db).evaluate_ops_json(build_ops_json([op]), is_context=context,
                                                                         batch_size=batch, s=s)
    assert kind == "silicon"
    return ms


@needs_aic
def test_each_kernel_is_its_measured_time_at_its_own_shape(host, cache, tmp_path):
    """Llama-3.1-8B fp8 decode on H100 with --efficiency aic: the merged QKV GEMM is AIConfigurator's
    GEMM at (B, 6144, 4096), shared by q, k and v by their columns; the down projection its GEMM at
    (B, 4096, 14336); the attention kernel its generation attention over the positions attended (fp8
    activations keep an fp8 KV cache)."""
    from aiconfigurator_core.sdk import common, operations

    result = CliRunner().invoke(cli, ["profile", str(EXAMPLES / "configs" / "llama-3.1-8b.json"), "--phase", "decode",
                                      "-b", "8", "-s", "2048", "-H", "H100", "--dtype", "fp8", "--kernels", "serving",
                                      "--efficiency", "aic", "-f", "json", "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "p.json").read_text())
    # AIConfigurator times each op in CUDA-graph replays, so each time carries a graph node's launch
    # (the published table's 0.5 us); it comes off (one per record of a kernel several records make,
    # as their launches go back on), the record's part is taken, and the step's own launch (the same
    # node: decode is replayed as a graph) goes back on
    launch = 5e-7

    def priced(t: float, share: float = 1.0, records: int = 1) -> float:
        return (t - launch * records) * share + launch

    layer0 = {op["module"].rsplit(".", 1)[-1]: op for op in data["ops"]
              if op["module"].startswith("model.layers.0.") and op.get("expected_s")}
    qkv = _aic_ms("h100_sxm", operations.GEMM("g", 1, 6144, 4096, common.GEMMQuantMode.fp8), True, 1, 8) * 1e-3
    merged = [layer0[name] for name in ("q_proj", "k_proj", "v_proj")]  # split by their rooflines
    assert [op["expected_s"] for op in merged] == pytest.approx(
        [priced(qkv, op["time_bound_s"] / sum(o["time_bound_s"] for o in merged), 3) for op in merged], rel=1e-6)
    down = _aic_ms("h100_sxm", operations.GEMM("g", 1, 4096, 14336, common.GEMMQuantMode.fp8), True, 1, 8) * 1e-3
    assert layer0["down_proj"]["expected_s"] == pytest.approx(priced(down), rel=1e-6)
    attention = next(op for op in data["ops"] if op["name"] == "serving.attention")
    op = operations.GenerationAttention("a", 1, 32, 8, common.KVCacheQuantMode.fp8, head_size=128)  # fp8 KV with fp8
    assert attention["expected_s"] == pytest.approx(priced(_aic_ms("h100_sxm", op, False, 8, 2048) * 1e-3), rel=1e-6)
    assert any("per-op kernel times" in line for line in data["totals"]["expected_conventions"])


@needs_aic
def test_the_moe_layer_is_shared_by_its_expert_records(host, cache, tmp_path):
    """Mixtral's experts under EP 2 with attention data-parallel: each GPU's gate-up and down records
    share AIConfigurator's MoE layer at the tokens routed into the expert group (2 GPUs x B 16) with
    the call's activation and combine, by their rooflines, under balanced routing; the database's
    power-law routing is slower; the all-to-alls are its MoE dispatch and combine."""
    from aiconfigurator_core.sdk import common, operations

    from rooflinekit.stages.kernel_times import query
    from rooflinekit_plugins.aic.kernels import kernels

    result = CliRunner().invoke(cli, ["profile", str(EXAMPLES / "configs" / "mixtral-8x7b.json"), "--phase", "decode",
                                      "-b", "16", "-s", "1024", "-H", "H100", "--dtype", "fp8", "--ep", "2",
                                      "--kernels", "serving", "--efficiency", "aic", "-f", "json",
                                      "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "p.json").read_text())
    ops = [op for op in data["ops"]
           if op["module"].startswith("model.layers.0.") and op["name"].startswith("moe.") and op["kind"] == "modelled"]
    assert len(ops) == 4  # gate-up, activation, down, weighted combine
    op = operations.MoE("moe", 1, 4096, 14336, 2, 8, 1, 2, common.MoEQuantMode.fp8, "balanced", 1)
    layer = _aic_ms("h100_sxm", op, False, 32, 1) * 1e-3
    launch = 5e-7  # the graph node each record's kernel carries comes off before the step's own goes on
    layer -= 4 * launch
    roofs = sum(o["time_bound_s"] for o in ops)
    assert [o["expected_s"] for o in ops] == pytest.approx([layer * o["time_bound_s"] / roofs + launch for o in ops],
                                                            rel=1e-6)
    # each layer's dispatch and combine: the database's MoE dispatch over 2 ranks at this GPU's 16
    # tokens, bf16 as rooflinekit counts the activations sent
    (a2a,) = [c for c in data["comm"]["collectives"] if c["collective"] == "all_to_all"]
    legs = [_aic_ms("h100_sxm", operations.MoEDispatch("d", 1, 4096, 2, 8, 1, 2, 2, pre,
                                                       quant_mode=common.MoEQuantMode.bfloat16, backend="trtllm"),
                    False, 16, 1) * 1e-3 for pre in (True, False)]
    assert a2a["calls"] == 64 and a2a["expected_time_s"] == pytest.approx(32 * sum(legs), rel=1e-6)
    q = query("experts", "fp8", tokens=32, hidden=4096, inter=14336, top_k=2, experts=8, tp=1, ep=2)
    assert kernels("h100_sxm", {"routing": "power_law_1.2"}).seconds(q) > kernels("h100_sxm", {}).seconds(q)
    assert kernels("h100_sxm", {}).seconds(query("all_to_all", "", message_bytes=1e6, group_size=8)) is None


@needs_aic
@pytest.mark.parametrize("old, new, words", [
    ('fmha = "bfloat16"', 'fmha = "fp4"', "fmha = 'fp4'"),
    ('routing = "balanced"', 'routing = "bogus"', "routing = 'bogus'"),
    ('formats = { fp8 = "fp8" }', 'formats = "fp8"', "formats must be a table"),
    ('system = "h100_sxm"', 'system = "nowhere"', "system = NAME"),
])
def test_a_bad_kernel_times_setting_is_refused_in_one_line(host, cache, tmp_path, old, new, words):
    from rooflinekit.stages import kernel_times
    from rooflinekit_plugins.aic.table import source_file

    kernel_times._RESOLVED.clear()
    text = source_file(hardware_db().get("H100")).read_text()
    assert old in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(old, new))
    result = CliRunner().invoke(cli, ["profile", GQA, "-O", "layers=2", "-H", "H100", "--efficiency", str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.output


@needs_aic
def test_deepseek_v3s_mla_layer_is_the_databases_mla_module(host, cache, tmp_path):
    """DeepSeek-V3 decode on H200 with block-scaled fp8: each attention layer's records (projections,
    norms, rotary and cache write, the absorbed kernel) come to AIConfigurator's MLA module at the
    step's batch and positions, measured whole in TensorRT-LLM; DeepSeek-V2's layer, which the module table does not measure (128 heads too, but
    a 5,120-wide model: other weights), is asked record by record."""
    from aiconfigurator_core.sdk import common, operations

    from rooflinekit.stages import kernel_times
    from rooflinekit_plugins.aic.table import source_file

    kernel_times._RESOLVED.clear()
    block = tmp_path / "block.toml"
    text = source_file(hardware_db().get("H200 SXM")).read_text()
    block.write_text(text.replace('formats = { fp8 = "fp8" }', 'formats = { fp8 = "fp8_block" }'))
    launch = 5e-7

    def layer(model: str) -> list[dict]:
        out = tmp_path / f"{model}.json"
        result = CliRunner().invoke(cli, ["profile", str(EXAMPLES / "configs" / f"{model}.json"), "--phase", "decode",
                                          "-b", "4", "-s", "2048", "-H", "H200 SXM", "--dtype", "fp8", "--kernels",
                                          "serving", "--efficiency", str(block), "-f", "json", "-o", str(out)])
        assert result.exit_code == 0, result.output
        ops = json.loads(out.read_text())["ops"]
        return [op for op in ops if op["module"].startswith("model.layers.0.self_attn") and op.get("expected_s")]

    v3 = layer("deepseek-v3")
    module = operations.MLAModule("m", 1, False, 128, common.KVCacheQuantMode.fp8, common.FMHAQuantMode.bfloat16,
                                  common.GEMMQuantMode.fp8_block, native_num_heads=128)
    t = _aic_ms("h200_sxm", module, False, 4, 2048) * 1e-3
    # the module's time carries its kernels' launches (graph nodes), one per record: the layer costs it
    assert len(v3) >= 6 and sum(op["expected_s"] for op in v3) == pytest.approx(t, rel=1e-6)
    v2 = layer("deepseek-v2")
    # its q_a (1,536) and kv_a (576) read one input: the merged GEMM, split by their rooflines
    merged = [next(op for op in v2 if op["module"].endswith(name)) for name in ("q_a_proj", "kv_a_proj_with_mqa")]
    gemm = _aic_ms("h200_sxm", operations.GEMM("g", 1, 1536 + 576, 5120, common.GEMMQuantMode.fp8_block), True, 1,
                   4) * 1e-3
    roofs = sum(op["time_bound_s"] for op in merged)
    assert [op["expected_s"] for op in merged] == pytest.approx(
        [(gemm - 2 * launch) * op["time_bound_s"] / roofs + launch for op in merged], rel=1e-6)
