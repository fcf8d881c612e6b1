"""What a sweep computes once for all its captures, checked against computing it each time.

- `ScaledPeak` (a fitted point's activation peak in vector operations) against a walk of every
  allocation, written here;
- `rooflinekit.core.model_facts`: facts of a model computed once inside `using`, every time
  outside it, never for another model;
- `rooflinekit.core.skips` and the transformers loader: the layers a design capture stands in
  for, and their cache indices, which the loader leaves empty.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.core.model_facts import ModelFacts, cached, module_tree, using
from rooflinekit.core.request import ModelSource, Workload
from rooflinekit.core.skips import skipped_layers, skipping_layers, stand_ins, under
from rooflinekit.stages.capture import CaptureResult, OpRecord
from rooflinekit.stages.memory import ScaledPeak
from rooflinekit.stages.model_source import build, load_source
from rooflinekit.stages.repeated_layers import layer_repeats, skipping
from rooflinekit_plugins.hf import skipped_cache_layers
from rooflinekit_plugins.hf.cache import CACHE_PARAMS
from tests.conftest import EXAMPLES, ROOT


def _cache(inputs: dict):
    """The cache among a transformers model's inputs, under the name its release uses
    (`cache` from 5.25, `past_key_values` before)."""
    (name,) = [n for n in CACHE_PARAMS if n in inputs]
    return inputs[name]


def _template(written: list[float], steps: int) -> CaptureResult:
    ops = [OpRecord(index=i, name="aten.add", module="", flops=0.0, bytes_read=0.0, bytes_written=w,
                    dtype="bf16", counted=True) for i, w in enumerate(written)]
    return CaptureResult(ops=ops, modules={}, param_storages=set(), param_bytes_total=0.0, wall_s=0.0,
                         live=[(i, None) for i in range(steps)])


def _walk(template: CaptureResult, written: list[float], allocations) -> float:
    """The peak of live bytes, one allocation at a time: each allocation's bytes scaled as its op's
    bytes written went from the template's to `written`."""
    live = [0.0] * (len(template.live) + 1)
    for index, start, end, nbytes in allocations:
        was = template.ops[index].bytes_written
        scaled = nbytes * written[index] / was if was else 0.0
        for step in range(start, end):
            live[step] += scaled
    return max(live, default=0.0)


@st.composite
def _fits(draw):
    """A template's ops and allocations, each op's bytes written a polynomial, and its values at a point."""
    n_ops = draw(st.integers(1, 8))
    n_polys = draw(st.integers(1, 5))
    was = draw(st.lists(st.sampled_from([0.0, 64.0, 512.0, 4096.0, 3e9]), min_size=n_ops, max_size=n_ops))
    poly_of_op = draw(st.lists(st.integers(0, n_polys - 1), min_size=n_ops, max_size=n_ops))
    values = draw(st.lists(st.integers(0, 10**12).map(float), min_size=n_polys, max_size=n_polys))
    n_alloc = draw(st.integers(0, 12))
    allocations = []
    for start in range(n_alloc):
        index = draw(st.integers(0, n_ops - 1))
        end = draw(st.integers(start + 1, n_alloc))
        allocations.append((index, start, end, draw(st.sampled_from([0.0, 32.0, 2048.0, 1e9]))))
    return was, poly_of_op, values, allocations, n_alloc


@settings(max_examples=200, deadline=None)
@given(_fits())
def test_scaled_peak_equals_the_walk_of_every_allocation(fit):
    was, poly_of_op, values, allocations, steps = fit
    template = _template(was, steps)
    written = [values[k] for k in poly_of_op]
    expected = _walk(template, written, allocations)
    got = ScaledPeak(template, allocations, poly_of_op)(values)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-6)


def test_scaled_peak_by_hand():
    """Two overlapping allocations of ops whose bytes written double and triple: 2*100 + 3*50."""
    template = _template([100.0, 50.0], steps=3)
    allocations = [(0, 0, 2, 100.0), (1, 1, 3, 50.0)]
    peak = ScaledPeak(template, allocations, poly_of_op=[0, 1])
    assert peak([200.0, 150.0]) == 2 * 100 + 3 * 50
    assert peak([0.0, 0.0]) == 0.0


class _Model:
    """Stands in for a module: counts its walks."""

    def __init__(self):
        self.walks = 0

    def named_modules(self):
        self.walks += 1
        return iter([("", self), ("layer", object())])


def test_facts_are_computed_once_inside_using_and_every_time_outside():
    model, other = _Model(), _Model()
    calls = []
    facts = ModelFacts(model)
    assert cached(model, "k", lambda: calls.append(1) or 7) == 7  # outside: computed
    with using(facts):
        assert [cached(model, "k", lambda: calls.append(2) or 8) for _ in range(3)] == [8, 8, 8]
        cached(other, "k", lambda: calls.append(3))  # another model: not these facts
        cached(other, "k", lambda: calls.append(3))
        assert module_tree(model) is module_tree(model)
    assert cached(model, "k", lambda: calls.append(4) or 9) == 9  # outside again
    assert calls == [1, 2, 3, 3, 4]
    assert model.walks == 1


def test_skipped_layers_inside_the_block_only():
    assert skipped_layers() == frozenset()
    with skipping_layers({"model.layers.1": "model.layers.0", "model.layers.2": "model.layers.0"}):
        assert skipped_layers() == {"model.layers.1", "model.layers.2"}
        assert dict(stand_ins()) == {"model.layers.1": "model.layers.0", "model.layers.2": "model.layers.0"}
        with skipping_layers({}):
            assert skipped_layers() == frozenset() and not stand_ins()
        assert under("model.layers.2.self_attn.k_proj", skipped_layers())
        assert under("model.layers.1", skipped_layers())
        assert not under("model.layers.10.mlp", skipped_layers())  # a prefix of the name, not of the path
        assert not under("model.layers", skipped_layers())
    assert skipped_layers() == frozenset()


@pytest.mark.hf
def test_the_loader_leaves_the_skipped_layers_cache_empty():
    """A design capture's plan skips layers 1..3 of a 4-layer Llama: their cache indices are the
    ones the loader leaves empty, and the static cache it makes has only layer 0's slots."""
    options = {"layers": 4}
    source = load_source(str(EXAMPLES / "configs" / "llama-3.1-8b.json"), options)
    workload = Workload("decode", 1, 64, options=tuple(options.items()))
    model = build(source, workload).model
    plan = layer_repeats(model)
    assert sorted(plan.skipped) == ["model.layers.1", "model.layers.2", "model.layers.3"]
    assert skipped_cache_layers(model) == frozenset()
    with skipping(plan):
        assert skipped_cache_layers(model) == {1, 2, 3}
        cache = _cache(build(source, workload).inputs)
    assert [layer.is_initialized for layer in cache.layers] == [True, False, False, False]
    whole = _cache(build(source, workload).inputs)  # outside a design capture: every layer
    assert [layer.is_initialized for layer in whole.layers] == [True, True, True, True]


@pytest.mark.hf
def test_each_source_keeps_its_own_empty_layers():
    """Two loads in sequence with different settings: the plugin's source leaves the layers a design
    capture stands in for empty, a standalone `load_hf_config` source none, another one layer 2
    always; each step's cache follows its own source's setting, whichever load came last."""
    from rooflinekit_plugins.hf.loader import load_hf_config

    options = {"layers": 4}
    path = str(EXAMPLES / "configs" / "llama-3.1-8b.json")
    workload = Workload("decode", 1, 64, options=tuple(options.items()))

    def wrapped(loaded) -> ModelSource:
        return ModelSource(name=loaded.name, path=loaded.path, build_model=loaded.build_model,
                           make_inputs=loaded.make_inputs, options_handled=True)

    by_plugin = load_source(path, options)
    plain = wrapped(load_hf_config(path, options))
    fixed = wrapped(load_hf_config(path, options, empty_layers=lambda model: frozenset({2})))
    model = build(by_plugin, workload).model
    with skipping(layer_repeats(model)):
        caches = {name: _cache(build(source, workload).inputs)
                  for name, source in (("plugin", by_plugin), ("plain", plain), ("fixed", fixed))}
    filled = {name: [layer.is_initialized for layer in cache.layers] for name, cache in caches.items()}
    assert filled == {"plugin": [True, False, False, False], "plain": [True, True, True, True],
                      "fixed": [True, True, False, True]}
    outside = _cache(build(plain, workload).inputs)
    assert [layer.is_initialized for layer in outside.layers] == [True, True, True, True]


# -- a capture recounted at another layout (rooflinekit.analyses.profile.recounted) --

#: A MoE model file (no transformers release needed) whose experts a module model prices per layout.
MOE = (str(ROOT / "tests" / "models" / "experts3d.py"), {})


def _counting(deployment, workload):
    from rooflinekit.analyses.profile import count
    from rooflinekit.core.plugins import get_host

    host = get_host()
    source = load_source(MOE[0], MOE[1], host)
    return source, host, count(source, workload, deployment, host, transforms=False)


@pytest.mark.parametrize("base, other", [((1, 4), (1, 8)), ((2, 2), (4, 4)), ((1, 4), (1, 6))])
def test_a_recounted_capture_is_the_capture_at_that_layout(base, other):
    """Data-parallel attention with experts over 4 GPUs, recounted at 8 (or 6, with redundant
    experts), and TP = EP 2 at 4: every record as a capture at the other layout writes it."""
    from rooflinekit.analyses.profile import recounted
    from rooflinekit.core.request import Deployment

    workload = Workload("decode", 8, 256, "bf16", "meta", tuple(sorted(MOE[1].items())))
    redundant = -16 % other[1] if other[1] > 1 else 0  # experts3d has 16 experts
    source, host, counting = _counting(Deployment(tp=base[0], ep=base[1]), workload)
    target = Deployment(tp=other[0], ep=other[1], redundant_experts=redundant, ep_imbalance=1.25)
    again = recounted(counting, source, workload, target, host)
    _, _, fresh = _counting(target, workload)
    assert again is not None
    got, want = again.raw.capture.ops, fresh.raw.capture.ops
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert (a.name, a.module, a.flops, a.bytes_read, a.bytes_written, a.param_bytes, a.shapes, a.attrs) == (
            b.name, b.module, b.flops, b.bytes_read, b.bytes_written, b.param_bytes, b.shapes, b.attrs)
    assert again.notes == fresh.notes
    assert [s.op_indices for s in again.raw.attention] == [s.op_indices for s in fresh.raw.attention]


def test_a_layout_whose_models_emit_other_records_is_captured():
    """One GPU emits no collective; experts over 4 GPUs emit all-to-alls: no recount."""
    from rooflinekit.analyses.profile import recounted
    from rooflinekit.core.request import Deployment

    workload = Workload("decode", 8, 256, "bf16", "meta", tuple(sorted(MOE[1].items())))
    source, host, counting = _counting(Deployment(), workload)
    assert counting.calls and recounted(counting, source, workload, Deployment(tp=1, ep=4), host) is None
