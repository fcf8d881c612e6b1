"""torch's own FLOP-counter cases (test/test_flop_counter.py in pytorch/pytorch), held against
rooflinekit's capture.

Every case is counted three ways: by rooflinekit's capture (on meta and on cpu), by
torch.utils.flop_counter.FlopCounterMode on cpu (the independent second method, run here), and
against the literal number torch's test asserts where it asserts one. The matrix products are
also written with `out=` (torch.mm(a, b, out=c) and the like): the same FLOPs, the out= tensor
written once and never read.

Ported: test_flop_counter_variety, test_op, test_addmm_out, the forward half of test_convs and
of test_conv_transpose_loop, test_sdpa (its shapes, counted on cpu through the math backend,
which torch's test asserts equal to the fused backends'). Not ported: the backward cases
(rooflinekit counts one forward), torchscript, custom mappings and triton kernels (torch's
counter's own API), the nested-tensor and fp8 cases (CUDA only).

rooflinekit's stated difference: a causal SDPA call is counted as the triangle of query-key
pairs it scores (a fused kernel skips the masked blocks), where torch counts the full square.
The report says so in `totals.flop_conventions`; the tests below assert both.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from rooflinekit.api import profile
from rooflinekit.core.keys import causal_pairs
from rooflinekit.stages.capture import capture
from rooflinekit.stages.capture.schema import schema_info
from rooflinekit.stages.formulas import FLOP_FORMULAS, op_key
from rooflinekit.stages.place import FLOP_CONVENTIONS

try:  # SDPA's backend selector (torch >= 2.3; every torch of the matrix has it)
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # pragma: no cover - an older torch than rooflinekit supports
    sdpa_kernel = None

DEVICES = ["meta", "cpu"]


class Fn(torch.nn.Module):
    """A module whose forward is `fn(*inputs)` (the ops torch's test runs at top level)."""

    def __init__(self, fn, **children):
        super().__init__()
        self.fn = fn
        for name, child in children.items():
            self.add_module(name, child)

    def forward(self, *inputs):
        return self.fn(self, *inputs)


def _on(device, shapes):
    torch.manual_seed(0)
    return tuple(torch.randn(*s, device=device) for s in shapes)


def rooflinekit_flops(module, inputs) -> float:
    """FLOPs of one forward as rooflinekit's capture counts them; every op with arithmetic counted."""
    cap = capture(module, inputs)
    failed = [(op.name, op.attrs.get("formula_error")) for op in cap.ops if op.attrs.get("formula_error")]
    assert not failed, failed
    return sum(op.flops for op in cap.ops)


def torch_flops(module, inputs, backend=None) -> int:
    """FLOPs of the same forward as torch.utils.flop_counter.FlopCounterMode counts them (cpu)."""
    with FlopCounterMode(display=False) as mode:
        if backend is None:
            module(*inputs)
        else:
            with sdpa_kernel(backend):
                module(*inputs)
    return mode.get_total_flops()


def counted_both_ways(fn, shapes, **children) -> tuple[dict[str, float], int]:
    """(rooflinekit's FLOPs per device, torch's FLOPs on cpu) of `fn` on fresh inputs of `shapes`."""
    ours = {}
    for device in DEVICES:
        with torch.device(device):
            module = Fn(fn, **{k: make() for k, make in children.items()})
        ours[device] = rooflinekit_flops(module, _on(device, shapes))
    module = Fn(fn, **{k: make() for k, make in children.items()})
    return ours, torch_flops(module, _on("cpu", shapes))


# -- test_op and test_flop_counter_variety: torch's literal numbers ---------------------------------

#: (case, forward, input shapes, torch's asserted total)
TORCH_CASES = [
    ("mm", lambda m, a, b: torch.mm(a, b), [(4, 5), (5, 6)], 240),
    ("bmm", lambda m, a, b: torch.bmm(a, b), [(3, 4, 5), (3, 5, 6)], 720),
    ("addmm x3 (bias 4x6, 4x1, 6)",
     lambda m, c1, c2, c3, a, b: (torch.addmm(c1, a, b), torch.addmm(c2, a, b), torch.addmm(c3, a, b)),
     [(4, 6), (4, 1), (6,), (4, 5), (5, 6)], 720),
    ("baddbmm", lambda m, c, a, b: torch.baddbmm(c, a, b), [(3, 4, 6), (3, 4, 5), (3, 5, 6)], 720),
    ("conv2d", lambda m, x, w: torch.conv2d(x, w, padding=1), [(2, 3, 6, 6), (6, 3, 4, 4)], 28800),
    ("conv1d", lambda m, x, w: torch.conv1d(x, w, padding=1), [(2, 3, 6), (6, 3, 4)], 1440),
    # test_convs' forward counts
    ("conv_transpose2d", lambda m, x, w: F.conv_transpose2d(x, w), [(1, 1, 2, 2), (1, 1, 2, 2)], 32),
    ("conv2d 1x1", lambda m, x, w: F.conv2d(x, w), [(1, 1, 2, 2), (1, 1, 1, 1)], 8),
    # test_addmm_out
    ("mm out=", lambda m, x, y: torch.mm(x, x, out=y), [(10, 10), (10, 10)], 2000),
]


@pytest.mark.parametrize(("fn", "shapes", "expected"), [c[1:] for c in TORCH_CASES],
                         ids=[c[0] for c in TORCH_CASES])
def test_torch_op_cases(fn, shapes, expected):
    ours, theirs = counted_both_ways(fn, shapes)
    assert theirs == expected
    assert ours == {"meta": expected, "cpu": expected}


def test_flop_counter_variety():
    def variety(m, a, b, c, d, bias, e, f, g, h, x):
        torch.mm(a, b)
        torch.addmm(bias, c, d, beta=0.5, alpha=0.5)
        torch.matmul(e, f)
        torch.einsum("ab,bc->ac", g, h)
        return m.linear(x)

    shapes = [(4, 5), (5, 6), (4, 5), (5, 6), (4, 6), (5, 6), (6, 7), (6, 7), (7, 8), (8, 9)]
    ours, theirs = counted_both_ways(variety, shapes, linear=lambda: torch.nn.Linear(9, 10))
    assert theirs == 3012
    assert ours == {"meta": 3012, "cpu": 3012}


def test_conv_transpose_loop_forward():
    # torch's test: 50 forward and backward passes of this layer count 1,536,000 FLOPs; its input
    # needs no gradient, so each backward computes the weight's only, as many FLOPs as the forward:
    # one forward is 1,536,000 / 50 / 2.
    ours, theirs = counted_both_ways(lambda m, x: m.conv(x), [(1, 4, 30, 2)],
                                     conv=lambda: torch.nn.ConvTranspose2d(4, 8, (2, 2), stride=2))
    assert theirs == 1_536_000 // 50 // 2
    assert ours == {"meta": theirs, "cpu": theirs}


@pytest.mark.parametrize(("c_in", "c_out", "groups"), [(1, 1, 1), (1, 3, 1), (3, 1, 1), (3, 7, 1), (2, 4, 2), (4, 2, 2)])
@pytest.mark.parametrize("transposed", [False, True])
def test_convs_forward(c_in, c_out, groups, transposed):
    # test_convs' loop (its `groups` is unused there: the weights are built for groups=1)
    if transposed:
        fn, shapes = (lambda m, x, w: F.conv_transpose2d(x, w)), [(1, c_in, 4, 4), (c_in, c_out, 2, 2)]
    else:
        fn, shapes = (lambda m, x, w: F.conv2d(x, w)), [(1, c_in, 4, 4), (c_out, c_in, 2, 2)]
    ours, theirs = counted_both_ways(fn, shapes)
    assert theirs > 0
    assert ours == {"meta": theirs, "cpu": theirs}


# -- out= variants of every matrix product --------------------------------------------------------

#: (case, forward writing into its last input, input shapes, FLOPs = the case without out=)
OUT_CASES = [
    ("mm", lambda m, a, b, o: torch.mm(a, b, out=o), [(4, 5), (5, 6), (4, 6)], 240),
    ("addmm", lambda m, c, a, b, o: torch.addmm(c, a, b, out=o), [(4, 6), (4, 5), (5, 6), (4, 6)], 240),
    ("addmm bias 6", lambda m, c, a, b, o: torch.addmm(c, a, b, out=o), [(6,), (4, 5), (5, 6), (4, 6)], 240),
    ("bmm", lambda m, a, b, o: torch.bmm(a, b, out=o), [(3, 4, 5), (3, 5, 6), (3, 4, 6)], 720),
    ("baddbmm", lambda m, c, a, b, o: torch.baddbmm(c, a, b, out=o),
     [(3, 4, 6), (3, 4, 5), (3, 5, 6), (3, 4, 6)], 720),
    ("matmul 2d", lambda m, a, b, o: torch.matmul(a, b, out=o), [(5, 6), (6, 7), (5, 7)], 420),
    ("matmul batched", lambda m, a, b, o: torch.matmul(a, b, out=o), [(3, 4, 5), (3, 5, 6), (3, 4, 6)], 720),
    ("matmul broadcast", lambda m, a, b, o: torch.matmul(a, b, out=o), [(3, 4, 5), (5, 6), (3, 4, 6)], 720),
    ("convolution.out",
     lambda m, x, w, o: torch.ops.aten.convolution.out(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, out=o),
     [(2, 3, 6, 6), (6, 3, 4, 4), (2, 6, 5, 5)], 28800),
]


@pytest.mark.parametrize(("fn", "shapes", "expected"), [c[1:] for c in OUT_CASES],
                         ids=[c[0] for c in OUT_CASES])
def test_out_variants_count_as_without(fn, shapes, expected):
    if "convolution" in str(fn.__code__.co_names) and not hasattr(torch.ops.aten.convolution, "out"):
        pytest.skip(f"aten.convolution.out does not exist in torch {torch.__version__}")
    ours, theirs = counted_both_ways(fn, shapes)
    assert theirs == expected
    assert ours == {"meta": expected, "cpu": expected}


@pytest.mark.parametrize("device", DEVICES)
def test_out_tensor_is_written_once_and_not_read(device):
    a, b, o = _on(device, [(8, 16), (16, 4), (8, 4)])
    cap = capture(Fn(lambda m, a, b, o: torch.mm(a, b, out=o)), (a, b, o))
    (op,) = cap.ops
    assert (op.name, op.counted, op.flops) == ("aten.mm", True, 2 * 8 * 16 * 4)
    assert (op.bytes_read, op.bytes_written) == ((8 * 16 + 16 * 4) * 4, 8 * 4 * 4)
    # addmm into its own bias: the bias is read (as self), the output written once
    c, a, b = _on(device, [(8, 4), (8, 16), (16, 4)])
    (op,) = capture(Fn(lambda m, c, a, b: torch.addmm(c, a, b, out=c)), (c, a, b)).ops
    assert (op.flops, op.bytes_read, op.bytes_written) == (2 * 8 * 16 * 4, (8 * 4 + 8 * 16 + 16 * 4) * 4, 8 * 4 * 4)


def test_out_matmuls_leave_nothing_uncounted_in_the_report():
    a, b, o = _on("cpu", [(64, 32), (32, 16), (64, 16)])
    report = profile(Fn(lambda m, a, b, o: torch.mm(a, b, out=o)), a, b, o, phase="prefill", batch=1, context=64)
    assert report.uncounted_ops == []
    assert report.totals.flops == 2 * 64 * 32 * 16


def _registered_packets():
    """Every op with a FLOP formula, ours and torch's, as its overload packet."""
    for key in sorted(set(FLOP_FORMULAS) | {str(p) for p in torch.utils.flop_counter.flop_registry}):
        ns, _, name = key.partition(".")
        packet = getattr(getattr(torch.ops, ns, None), name, None)
        if packet is not None:
            yield key, packet


def test_every_out_overload_of_a_counted_op_is_known_as_out():
    """Each `.out` overload of an op with a formula answers to the op's formula (op_key is the packet)
    and names its out= arguments, which the formula is not handed and the bytes never read."""
    seen = 0
    for key, packet in _registered_packets():
        for overload in packet.overloads():
            func = getattr(packet, overload)
            outs = [a.name for a in func._schema.arguments if a.is_out]
            if not outs:
                continue
            seen += 1
            assert op_key(func) == key
            assert schema_info(func, key).out_args == frozenset(outs), (key, overload)
    assert seen >= 5  # mm, addmm, bmm, baddbmm, convolution at least


# -- test_sdpa: torch's shapes, causal counted as the triangle ------------------------------------

B, H, D = 4, 8, 64  # torch's test_sdpa: batch 4, 8 heads, head_dim 64


def _sdpa_case(q_len, kv_len, dv=D, kv_heads=H, causal=False, mask=False):
    def attend(m, q, k, v, *rest):
        extra = {"enable_gqa": True} if kv_heads != H else {}
        return F.scaled_dot_product_attention(q, k, v, attn_mask=rest[0] if rest else None, is_causal=causal, **extra)

    shapes = [(B, H, q_len, D), (B, kv_heads, kv_len, D), (B, kv_heads, kv_len, dv)]
    if mask:
        shapes.append((q_len, kv_len))
    return attend, shapes


def _sdpa_counts(q_len, kv_len, **kw) -> tuple[dict[str, float], int]:
    fn, shapes = _sdpa_case(q_len, kv_len, **kw)
    ours = {d: rooflinekit_flops(Fn(fn), _on(d, shapes)) for d in DEVICES}
    # the math backend computes what the fused backends do (torch's test asserts them equal);
    # torch's counter has no formula for the CPU flash kernel, so on cpu it is counted through math
    return ours, torch_flops(Fn(fn), _on("cpu", shapes), backend=SDPBackend.MATH)


needs_sdpa_kernel = pytest.mark.skipif(sdpa_kernel is None, reason="torch.nn.attention.sdpa_kernel needs torch >= 2.3")


@needs_sdpa_kernel
@pytest.mark.parametrize(("q_len", "kv_len", "expected"), [(128, 128, 134_217_728), (128, 256, 268_435_456)],
                         ids=["uniform", "nonuniform"])
def test_sdpa_causal_is_the_triangle_of_torchs_square(q_len, kv_len, expected):
    ours, theirs = _sdpa_counts(q_len, kv_len, causal=True)
    assert theirs == expected  # torch's test_sdpa forward numbers: the full square
    assert theirs == 2 * B * H * q_len * kv_len * (D + D)
    triangle = causal_pairs(q_len, kv_len, True) / (q_len * kv_len)
    assert ours == {"meta": theirs * triangle, "cpu": theirs * triangle}
    assert "causal" in FLOP_CONVENTIONS["sdpa"] and "triangle" in FLOP_CONVENTIONS["sdpa"]


@needs_sdpa_kernel
@pytest.mark.parametrize(("q_len", "kv_len", "kw"), [
    (128, 128, {}),
    (128, 256, {}),
    (128, 256, {"dv": 32}),
    (1, 257, {}),
    (16, 64, {"kv_heads": 2}),
    (1, 64, {"kv_heads": 1}),
    (32, 32, {"mask": True}),
], ids=["uniform", "nonuniform", "value-dim-32", "decode", "gqa", "mqa-decode", "float-mask"])
def test_sdpa_without_causal_matches_torch(q_len, kv_len, kw):
    ours, theirs = _sdpa_counts(q_len, kv_len, **kw)
    assert theirs == 2 * B * H * q_len * kv_len * (D + kw.get("dv", D))
    assert ours == {"meta": theirs, "cpu": theirs}


def test_report_states_the_causal_convention():
    q = torch.randn(1, 2, 16, 8)
    report = profile(Fn(lambda m, q: F.scaled_dot_product_attention(q, q, q, is_causal=True)), q,
                     phase="prefill", batch=1, context=16)
    conventions = report.totals.flop_conventions
    assert conventions["sdpa"] == FLOP_CONVENTIONS["sdpa"]
    assert "torch" in conventions["sdpa"] and "square" in conventions["sdpa"]
    assert report.totals.flops == 2 * 2 * causal_pairs(16, 16, True) * (8 + 8)
