"""Every number of every example and shipped config, both phases, plain and under each deployment
variant (TP 2, EP 2 where there are experts, int4 weights with an fp8 KV cache, q_len 4 in decode),
held against the figures saved before the request/pipeline refactor (tests/data/baseline_totals.json,
written by tests/data/make_baseline.py on the commit before it).

A change of numbers has to be intended: regenerate the file in the same commit and say why.
Changes so far, each regenerated for the keys it touched:
- transformers configs in decode: the cache length is answered from the workload on meta (see the
  note it adds), so the one scalar add that read transformers' 8-byte length tensor reads 8 bytes
  fewer (totals.bytes, other and uncounted bytes, the root module's bytes: -8 B);
- MLA (DeepSeek-V2-Lite, DeepSeek-V3): flops_model includes the new tokens' kv_b_proj (it was left
  out with the cached positions' re-expansion).
- collectives with latency and capacity as the device reports it (issue 23, items 3 and 4): every
  case's memory.capacity_bytes (H800: 85,520,809,984 B, was 80e9), memory.reserve_bytes (new, 1 GiB)
  and memory.max_batch where it has a bound; comm.expected_time_s (new); under TP/EP comm.time_s,
  totals.predicted_step_s and fused.predicted_step_s grow by the link's latency floor per call.
  FLOPs and bytes unchanged.
- bounds that are bounds (issue 34, item 1): totals.time_bound_s is the largest of compute, HBM and
  the collectives' time; it moved only where the collectives outlast both (GPT-2 prefill at TP 2:
  27.3 us -> 77.8 us, its all-reduces). The Llama-2 configs' TP 2 cases, missing from the file,
  were recorded with it.

The transformers configs' counts are how one transformers release writes those models (which ops
its code runs, what its cache and masks execute): the file records that release (`_recorded_with`).
On it, every case is held exactly. On another release (tox's drift envs), each case's differences
are gathered and reported together by the last test, as one table with the command that re-records
them: a new release that changes what runs fails the run once, naming what changed.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "data"))
import make_baseline  # noqa: E402

BASELINE = json.loads((ROOT / "tests" / "data" / "baseline_totals.json").read_text())
RECORDED = BASELINE.pop(make_baseline.RECORDED)["transformers"]
#: Transformers cases compared on a release other than RECORDED: key -> (fields changed, first difference).
DRIFT: dict[str, tuple[list[str], str]] = {}
COMPARED: list[str] = []


def _is_transformers_case(key: str) -> bool:
    return key.split(":")[0].endswith(".json")


def _release() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


def _cases():
    for key in sorted(BASELINE):
        marks = [pytest.mark.slow]
        if _is_transformers_case(key):
            marks.append(pytest.mark.hf)
        yield pytest.param(key, marks=marks, id=key)


def _same(a, b, where=""):
    """Equal structures, numbers to 1e-12 relative; returns the first difference or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a.keys() ^ b.keys())}"
        for k in a:
            d = _same(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _same(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None or a != pytest.approx(b, rel=1e-12, abs=0):
            return f"{where}: {a} vs {b}"
        return None
    return None if a == b else f"{where}: {a!r} vs {b!r}"


@pytest.mark.parametrize("key", list(_cases()))
def test_numbers_unchanged(key, invoke):
    target, phase, variant = key.split(":")
    before = BASELINE[key]
    drift = _is_transformers_case(key) and _release() != RECORDED
    result = invoke(*make_baseline.args(str(ROOT / target), phase, variant))
    if drift:
        COMPARED.append(key)
    if "error" in before:
        line = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
        expected = before["error"].replace(target, str(ROOT / target))
        if drift and (result.exit_code == 0 or line != expected):
            DRIFT[key] = (["error"], f"{expected!r} vs {line or 'no error'!r}")
            return
        assert result.exit_code != 0
        assert line == expected
        return
    if drift and result.exit_code != 0:
        DRIFT[key] = (["error"], result.stderr.strip().splitlines()[-1])
        return
    assert result.exit_code == 0, result.stderr
    now = make_baseline.summary(json.loads(result.stdout))
    # Windows are recognised out of the box since the built-in sliding_window plugin (Mistral's
    # 4096): the field may now be set where it was None, and no number may change for it here
    # (these contexts are within the window).
    context = int(make_baseline.WORKLOADS[phase][-1])
    rows = []
    for a, b in zip(now["attention"], before["attention"], strict=False):
        if b["window"] is None and a["window"] is not None:
            assert a["window"] >= context, (a["module"], a["window"])
            b = dict(b, window=a["window"])
        rows.append(b)
    before = dict(before, attention=rows)
    difference = _same(now, before)
    if drift and difference is not None:
        DRIFT[key] = (sorted(make_baseline.changed(before, now)), difference)
        return
    assert difference is None, difference


def test_transformers_counts_are_those_of_the_recorded_release():
    """On the release the baseline was recorded with, the cases above held exactly and the lock
    installs that release; on another, the cases gathered their differences: none may remain."""
    release = _release()
    if release == RECORDED:
        lock = (ROOT / "constraints" / "test.txt").read_text()
        assert f"\ntransformers=={RECORDED}\n" in lock, "re-record the baseline on the locked transformers"
        return
    if release is None:
        assert not COMPARED
        return
    assert COMPARED, "run the baseline cases with this test (tests/test_baseline.py as a whole)"
    if not DRIFT:
        return
    fields = sorted({f for changed, _ in DRIFT.values() for f in changed})
    width = max(len(k) for k in DRIFT)
    table = "\n".join(f"  {k:<{width}}  {', '.join(changed)}: {first}" for k, (changed, first) in sorted(DRIFT.items()))
    pytest.fail(
        f"transformers {release} changes the counts recorded on {RECORDED} in {len(DRIFT)} of {len(COMPARED)} "
        f"cases (case, fields changed: first difference):\n{table}\n"
        f"Explain each as an upstream change or fix it as a capture defect, then re-record every case on "
        f"{release} and lock that release (python tools/lock.py):\n"
        f"  python tests/data/make_baseline.py --allow {','.join(fields)}",
        pytrace=False)
