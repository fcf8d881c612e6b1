"""An expert-parallel all-to-all across nodes: the time bound sends each token once per
destination node (DeepEP's normal kernels), the expected time every copy (its low-latency kernels)."""

from __future__ import annotations

import itertools
import math

import pytest

from rooflinekit.stages import collectives
from rooflinekit.stages.hardware import hardware_db


@pytest.mark.parametrize("copies, experts, nodes", [(2, 8, 2), (3, 12, 4), (4, 16, 4), (1, 6, 3), (6, 8, 2)])
def test_remote_nodes_hit_is_the_mean_over_every_routing(copies, experts, nodes):
    """Every set of `copies` distinct slots equally likely, slots numbered node by node; the token
    sits on node 0: the mean count of other nodes its picks land on."""
    per = experts // nodes
    picks = list(itertools.combinations(range(experts), copies))
    mean = sum(len({s // per for s in p} - {0}) for p in picks) / len(picks)
    assert collectives.remote_nodes_hit(copies, experts, nodes) == pytest.approx(mean, rel=1e-12)


def test_the_bound_sends_a_token_once_per_node_and_the_expected_time_every_copy():
    hw = hardware_db().get("H800")
    assert hw.node_gpus == 8 and hw.scale_out_bandwidth
    message = 4096 * 8 * 7168 * 1.0  # 4,096 tokens, top-8, hidden 7,168, fp8
    plain = collectives.attrs("all_to_all", 32, message, "test")
    routed = collectives.attrs("all_to_all", 32, message, "test", copies=8, experts=256)
    # 4 nodes: a token's 8 picks over 256 slots miss a given other node with C(192, 8) / C(256, 8)
    hit = 3 * (1 - math.comb(192, 8) / math.comb(256, 8))
    factor = hit / (8 * 3 / 4)
    assert collectives.per_node_factor(routed, hw) == pytest.approx(factor, rel=1e-12) and factor < 0.5
    off_node = message * 24 / 32
    hop = collectives.hop_latency(32, hw)
    assert collectives.call_bound(routed, hw) == pytest.approx(hop + off_node * factor / hw.scale_out_bandwidth)
    assert collectives.call_bound(plain, hw) == pytest.approx(hop + off_node / hw.scale_out_bandwidth)
    assert collectives.call_expected(routed, hw) == collectives.call_expected(plain, hw)
    within = collectives.attrs("all_to_all", 8, message, "test", copies=8, experts=256)
    assert collectives.per_node_factor(within, hw) == 1.0
