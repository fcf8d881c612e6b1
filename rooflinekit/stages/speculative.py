"""Speculative decoding priced whole: the draft's steps, the target's verify step, the accepted tokens.

A speculative cycle drafts `k` tokens one at a time (k draft decode steps), then the target model
verifies them in one step of q_len k + 1 (the k drafted tokens and the token after the last
accepted one). With a per-token acceptance rate `a`, independent per position (Leviathan et al.,
"Fast Inference from Transformers via Speculative Decoding", ICML 2023, section 3.1), the tokens a cycle
emits are

    E(a, k) = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)      (k + 1 when a == 1)

(the accepted prefix of the drafts, plus the target's own token at the first rejection or after
the last draft). The cycle takes k x draft step + verify step, so

    seconds per output token = (k x draft + verify) / E
    tokens/s per user        = E / (k x draft + verify)

Torch-free and dependency-free: the planner and `rooflinekit advise` import it.

Public API (names and signatures are stable):

- `expected_tokens(accept: float, k: int) -> float`
- `speculative_cycle(draft_step_s: float, verify_step_s: float, accept: float, k: int) -> Cycle`
- `Cycle`: (cycle_s, tokens_per_cycle, time_per_token_s, tokens_per_s_per_user), a NamedTuple
- `check_accept(accept) -> float`: the rate, or ValueError naming the bound (0, 1]
- `DEFAULT_ACCEPT` = 0.7
"""

from __future__ import annotations

import math
from typing import NamedTuple

#: The per-token acceptance rate assumed when none is given. DeepSeek-V3's technical report
#: (arXiv:2412.19437, section 5.4.3) measures its one MTP head's second-token acceptance at
#: 85-90%; Leviathan et al. (2023) measure a from about 0.5 to 0.9 for their draft/target
#: pairs. 0.7 sits inside both ranges, on the cautious side for a separate draft model.
DEFAULT_ACCEPT = 0.7


class Cycle(NamedTuple):
    """One speculative cycle: its seconds (k drafts + one verify), the tokens it emits on average,
    the seconds per emitted token and the tokens/s one sequence sees."""

    cycle_s: float
    tokens_per_cycle: float
    time_per_token_s: float
    tokens_per_s_per_user: float


def check_accept(accept: object) -> float:
    """`accept` as a float in (0, 1]; ValueError (one line) otherwise."""
    try:
        a = float(accept)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"acceptance rate {accept!r} is not a number: give a rate in (0, 1]") from None
    if not math.isfinite(a) or not 0.0 < a <= 1.0:
        raise ValueError(f"acceptance rate {accept!r} is outside (0, 1]: a per-token probability of acceptance")
    return a


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"drafted tokens per cycle k={k!r}: give a whole number >= 0")
    return k


def expected_tokens(accept: float, k: int) -> float:
    """Expected tokens emitted per verify step with `k` drafted tokens, each accepted with
    probability `accept` while all before it were: (1 - a^(k+1)) / (1 - a), or k + 1 at a == 1.
    The numerator is taken as -expm1((k+1) log1p(a-1)), which keeps full precision as a nears 1
    (1 - a^(k+1) taken directly loses digits there; 1 - a itself is exact)."""
    a, k = check_accept(accept), _check_k(k)
    if a == 1.0:
        return float(k + 1)
    return -math.expm1((k + 1) * math.log1p(a - 1.0)) / (1.0 - a)


def speculative_cycle(draft_step_s: float, verify_step_s: float, accept: float, k: int) -> Cycle:
    """The cycle of `k` drafted tokens at `draft_step_s` each (one draft decode step per drafted
    token) and one verify step of the target at q_len k + 1 taking `verify_step_s`, at per-token
    acceptance `accept`: (k x draft + verify, E, (k x draft + verify) / E, E / (k x draft + verify))."""
    for name, value in (("draft step", draft_step_s), ("verify step", verify_step_s)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} seconds {value!r}: give a finite time >= 0")
    tokens = expected_tokens(accept, k)
    cycle = k * draft_step_s + verify_step_s
    if cycle <= 0:
        raise ValueError("a speculative cycle of zero seconds: the verify step must take time")
    return Cycle(cycle, tokens, cycle / tokens, tokens / cycle)
