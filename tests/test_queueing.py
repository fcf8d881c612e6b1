"""The prefill queue: Erlang C against its closed forms, the waiting quantile against a simulated
M/D/c queue, the highest rate within a waiting budget against the quantile."""

from __future__ import annotations

import heapq
import math
import random

import pytest

from rooflinekit.stages.queueing import erlang_c, max_rate, wait_quantile


def test_erlang_c_closed_forms():
    assert erlang_c(1, 0.7) == pytest.approx(0.7)  # M/M/1: an arrival waits with probability rho
    a = 1.5  # two servers: C = a^2 / (2 (1 + a) - a^2) ... written out: a^2/2 / ((1 - a/2)(1 + a) + a^2/2)
    assert erlang_c(2, a) == pytest.approx((a * a / 2) / ((1 - a / 2) * (1 + a) + a * a / 2))
    assert erlang_c(4, 0.0) == 0.0 and erlang_c(4, 4.0) == 1.0
    with pytest.raises(ValueError):
        erlang_c(0, 1.0)


def _simulated_wait_quantile(rate: float, service: float, servers: int, quantile: float, n: int = 60000) -> float:
    rng = random.Random(7)
    free = [0.0] * servers
    t, waits = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        start = max(t, heapq.heappop(free))
        waits.append(start - t)
        heapq.heappush(free, start + service)
    waits = sorted(waits[n // 10:])  # the queue warmed up
    return waits[int(quantile * len(waits))]


@pytest.mark.parametrize("servers, rho", [(1, 0.8), (4, 0.85), (16, 0.9)])
def test_the_waiting_quantile_is_near_a_simulated_md_c_queue(servers, rho):
    service = 0.25
    rate = rho * servers / service
    simulated = _simulated_wait_quantile(rate, service, servers, 0.9)
    assert wait_quantile(rate, service, servers, 0.9) == pytest.approx(simulated, rel=0.2)


def test_the_highest_rate_meets_the_budget_and_no_more():
    service, servers, budget = 0.3, 4, 0.5
    rate = max_rate(budget, service, servers)
    assert 0 < rate < servers / service
    assert wait_quantile(rate, service, servers) <= budget
    assert wait_quantile(rate * 1.001, service, servers) > budget
    assert wait_quantile(servers / service, service, servers) == math.inf


@pytest.mark.parametrize("servers", [1, 4, 16, 64])
@pytest.mark.parametrize("rho", [0.6, 0.8, 0.9])
def test_time_to_first_token_at_p90_is_within_7_percent_of_a_simulated_md_c_queue(servers, rho):
    """The figure the plan meets its target with is the wait plus the prompt's own service: where
    the approximation's wait runs low (many servers, short waits: 0.8 of the simulated p90 at 64
    servers and 90% load), the wait is a small part of it."""
    service = 1.0
    rate = rho * servers / service
    simulated = _simulated_wait_quantile(rate, service, servers, 0.9, n=200000) + service
    assert wait_quantile(rate, service, servers, 0.9) + service == pytest.approx(simulated, rel=0.07)
