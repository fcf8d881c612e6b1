"""Collectives over groups that span nodes: the bytes leaving a node go through each GPU's NIC
(the entry's scale_out_bandwidth, per direction) and every message pays the network's latency;
and DeepSeek-V3 at DeepSeek's published H800 decode operating point."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from rooflinekit.stages import collectives
from rooflinekit.stages.hardware import hardware_db

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

H800 = tomllib.loads((ROOT / "hardware_db" / "nvidia" / "h800_sxm5.toml").read_text())


def _hw():
    return hardware_db().get("H800")


@pytest.mark.parametrize("group", [2, 8])
def test_a_group_within_a_node_stays_on_nvlink(group):
    message = 1e6
    a = collectives.attrs("all_to_all", group, message, "planned")
    nvlink = H800["interconnect_bandwidth"] / 2
    assert collectives.call_bound(a, _hw()) == pytest.approx(
        H800["interconnect_latency"] + (group - 1) / group * message / nvlink, rel=1e-12)


def test_an_all_to_all_over_nodes_sends_the_off_node_share_through_the_nic():
    group, message = 128, 4e6
    a = collectives.attrs("all_to_all", group, message, "planned")
    off_node = message * (group - H800["node_gpus"]) / group  # bound for the other 15 nodes
    on_node = (group - 1) / group * message - off_node
    expected = max(H800["scale_out_latency"], H800["interconnect_latency"]) + max(
        off_node / H800["scale_out_bandwidth"], on_node / (H800["interconnect_bandwidth"] / 2))
    assert collectives.call_bound(a, _hw()) == pytest.approx(expected, rel=1e-12)
    # the expected cost pays the library's latency and the network's on top of the same bytes
    time, algorithm = collectives.call_expected(a, _hw())
    assert algorithm == "direct"
    assert time == pytest.approx(H800["collective_latency"] + H800["scale_out_latency"]
                                 + max(off_node / H800["scale_out_bandwidth"],
                                       on_node / (H800["interconnect_bandwidth"] / 2)), rel=1e-12)


def test_a_ring_over_nodes_goes_at_the_nic_rate():
    group, message = 16, 1e6
    a = collectives.attrs("all_gather", group, message, "planned")
    wire = (group - 1) / group * message
    assert collectives.call_bound(a, _hw()) == pytest.approx(
        max(H800["scale_out_latency"], H800["interconnect_latency"]) + wire / H800["scale_out_bandwidth"], rel=1e-12)


@pytest.mark.slow
@pytest.mark.hf
def test_deepseek_v3_at_the_published_h800_decode_point(invoke):
    """DeepSeek's inference system overview (open-infra-index, day 6): about 1,850 output tokens/s
    per H800 at about 21 tokens/s per user, 88 sequences per GPU at a mean KV length of 4,989,
    expert parallel over 144 GPUs with 32 redundant experts (two experts per GPU: --ep 128), fp8
    matmuls, bf16 MLA cache: one token per sequence per step is 1/21 s = 47.6 ms."""
    result = invoke("profile", ROOT / "examples" / "configs" / "deepseek-v3.json", "-H", "H800", "--kernels",
                    "serving", "--phase", "decode", "-b", "88", "-s", "4989", "--dtype", "fp8", "--kv-dtype", "bf16",
                    "--ep", "128", "-f", "json")
    assert result.exit_code == 0, result.stderr
    t = json.loads(result.stdout)["totals"]
    published_step = 1 / 21
    assert t["time_bound_s"] < published_step
    assert abs(t["expected_step_s"] / published_step - 1) <= 0.30
