"""Counting a torch.profiler trace's ops from their recorded shapes (rooflinekit.trace.counts).

Every expected figure is derived by hand from the dims: 2 FLOPs per multiply-add, the registry's
conventions (addmm's bias add and the scaling of attention are not counted, a causal mask counts
the unmasked query-key pairs in rooflinekit's formulas), bytes as distinct tensors read + written.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from rooflinekit.core.plugins import PluginHost
from rooflinekit.plugin import hookimpl
from rooflinekit.trace.counts import RecordedCount, RecordedOp, ShapeCounter, recorded_op

BF16 = "c10::BFloat16"


@pytest.fixture(scope="module")
def counter() -> ShapeCounter:
    return ShapeCounter()


def op(name: str, dims: tuple, types: tuple, concrete: tuple | None = None) -> RecordedOp:
    return RecordedOp(name, dims, types, concrete)


# -- products ---------------------------------------------------------------------------------------


def test_mm_is_2mkn_and_reads_both_operands_and_writes_the_output(counter):
    m, k, n = 24, 40, 56
    c = counter.count(op("aten::mm", ((m, k), (k, n)), ("float", "float")))
    assert (c.status, c.flops, c.bytes, c.dtype, c.formula) == (
        "counted", 2 * m * k * n, 4 * (m * k + k * n + m * n), "float32", "rooflinekit")


def test_addmm_counts_no_bias_add_and_reads_the_bias(counter):
    m, k, n = 15, 16, 32
    c = counter.count(op("aten::addmm", ((n,), (m, k), (k, n), (), ()), ("float",) * 3 + ("Scalar", "Scalar"),
                         ("", "", "", "1", "1")))
    assert (c.status, c.flops, c.bytes) == ("counted", 2 * m * k * n, 4 * (n + m * k + k * n + m * n))


def test_bmm_and_baddbmm_in_bf16(counter):
    b, m, k, n = 6, 10, 12, 14
    bmm = counter.count(op("aten::bmm", ((b, m, k), (b, k, n)), (BF16, BF16)))
    assert (bmm.flops, bmm.bytes, bmm.dtype) == (2 * b * m * k * n, 2 * b * (m * k + k * n + m * n), "bfloat16")
    bad = counter.count(op("aten::baddbmm", ((b, m, n), (b, m, k), (b, k, n), (), ()),
                           (BF16, BF16, BF16, "Scalar", "Scalar"), ("", "", "", "1", "1")))
    assert (bad.status, bad.flops) == ("counted", 2 * b * m * k * n)


@pytest.mark.parametrize("x", [(15, 16), (3, 5, 16)])
def test_linear_and_matmul_count_the_product_they_run(counter, x):
    rows, k, n = (x[0] if len(x) == 2 else x[0] * x[1]), 16, 32
    linear = counter.count(op("aten::linear", (x, (n, k), (n,)), ("float",) * 3, ("",) * 3))
    matmul = counter.count(op("aten::matmul", (x, (k, n)), ("float",) * 2, ("",) * 2))
    assert linear.status == matmul.status == "counted"
    assert linear.flops == matmul.flops == 2 * rows * k * n
    assert linear.bytes == 4 * (n + rows * k + n * k + rows * n)  # bias, input, weight, output


# -- convolutions -------------------------------------------------------------------------------------

N, CIN, H, W, COUT, G, KH, KW, STRIDE, PAD = 2, 6, 9, 9, 12, 3, 3, 3, 2, 1
HOUT = WOUT = (H + 2 * PAD - KH) // STRIDE + 1
CONV_FLOPS = 2 * N * COUT * HOUT * WOUT * (CIN // G) * KH * KW
X, WEIGHT, OUT = (N, CIN, H, W), (COUT, CIN // G, KH, KW), (N, COUT, HOUT, WOUT)
CONV_ARGS = (f"[{STRIDE}, {STRIDE}]", f"[{PAD}, {PAD}]", "[1, 1]")


def test_convolution_closed_form(counter):
    c = counter.count(op("aten::convolution", (X, WEIGHT, (COUT,), (), (), (), (), (), ()),
                         ("float",) * 3 + ("ScalarList",) * 3 + ("Scalar", "ScalarList", "Scalar"),
                         ("", "", "", *CONV_ARGS, "False", "[0, 0]", str(G))))
    assert (c.status, c.flops, c.formula) == ("counted", CONV_FLOPS, "torch")
    x, w, out = (N * CIN * H * W, COUT * CIN // G * KH * KW, N * COUT * HOUT * WOUT)
    assert c.bytes == 4 * (x + w + COUT + out)


def test_underscore_convolution_and_conv2d_agree(counter):
    conv = counter.count(op("aten::_convolution", (X, WEIGHT, (COUT,)) + ((),) * 10,
                            ("float",) * 3 + ("ScalarList",) * 3 + ("Scalar", "ScalarList") + ("Scalar",) * 5,
                            ("", "", "", *CONV_ARGS, "False", "[0, 0]", str(G), "False", "False", "True", "True")))
    conv2d = counter.count(op("aten::conv2d", (X, WEIGHT, (COUT,), (), (), (), ()),
                              ("float",) * 3 + ("ScalarList",) * 3 + ("Scalar",), ("", "", "", *CONV_ARGS, str(G))))
    assert conv.flops == conv2d.flops == CONV_FLOPS


def test_backend_convolutions_count_as_the_convolution_they_compute(counter):
    pads = ("[1, 1]", "[2, 2]", "[1, 1]")  # padding, stride, dilation: their order in these schemas
    cudnn = counter.count(op("aten::cudnn_convolution", (X, WEIGHT) + ((),) * 7,
                             ("float",) * 2 + ("ScalarList",) * 3 + ("Scalar",) * 4,
                             ("", "", *pads, str(G), "False", "False", "True")))
    mkldnn = counter.count(op("aten::mkldnn_convolution", (X, WEIGHT, (COUT,)) + ((),) * 4,
                              ("float",) * 3 + ("ScalarList",) * 3 + ("Scalar",), ("", "", "", *pads, str(G))))
    assert (cudnn.status, cudnn.flops, cudnn.formula) == ("counted", CONV_FLOPS, "torch")
    assert (mkldnn.status, mkldnn.flops) == ("counted", CONV_FLOPS)


@pytest.mark.parametrize("mask, products", [("[False, True, True]", 1), ("[True, True, False]", 2)])
def test_convolution_backward_follows_its_output_mask(counter, mask, products):
    # grad_input and grad_weight are each one convolution's worth; the bias gradient is a sum (no
    # FLOPs). One group: torch's formula for the weight gradient does not divide by the groups.
    weight, flops = (COUT, CIN, KH, KW), CONV_FLOPS * G
    c = counter.count(op("aten::convolution_backward", (OUT, X, weight) + ((),) * 8,
                         ("float",) * 3 + ("ScalarList",) * 4 + ("Scalar", "ScalarList", "Scalar", "ScalarList"),
                         ("", "", "", f"[{COUT}]", *CONV_ARGS, "False", "[0, 0]", "1", mask)))
    assert (c.status, c.flops, c.formula) == ("counted", products * flops, "torch")


def test_a_convolution_without_its_recorded_stride_is_refused_not_guessed(counter):
    c = counter.count(op("aten::convolution", (X, WEIGHT, (COUT,), (), (), (), (), (), ()),
                         ("float",) * 3 + ("", "", "", "Scalar", "", "Scalar")))
    assert c.status == "no_shapes" and "'stride'" in c.reason and c.flops == 0


# -- attention ------------------------------------------------------------------------------------------

B, HEADS, L, S, E = 2, 4, 16, 24, 8
Q, KV = (B, HEADS, L, E), (B, HEADS, S, E)


def causal_pairs(q_len: int, kv_len: int) -> int:
    """Unmasked pairs of a top-left aligned causal mask: row i sees keys 0..i."""
    return sum(min(i + 1, kv_len) for i in range(q_len))


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_as_the_capture_counts_it(counter, causal):
    pairs = causal_pairs(L, S) if causal else L * S
    sdpa = counter.count(op("aten::scaled_dot_product_attention", (Q, KV, KV) + ((),) * 5,
                            (BF16,) * 3 + ("", "Scalar", "Scalar", "", "Scalar"),
                            ("", "", "", "", "0.", str(causal), "", "False")))
    assert (sdpa.status, sdpa.flops, sdpa.dtype) == ("counted", 2 * B * HEADS * pairs * (E + E), "bfloat16")
    assert sdpa.bytes == 2 * (2 * B * HEADS * L * E + 2 * B * HEADS * S * E)  # q, k, v read; out written
    cpu = counter.count(op("aten::_scaled_dot_product_flash_attention_for_cpu", (Q, KV, KV) + ((),) * 4,
                           (BF16,) * 3 + ("Scalar", "Scalar", "", ""), ("", "", "", "0.", str(causal), "", "")))
    assert (cpu.status, cpu.flops) == ("counted", sdpa.flops)


def test_efficient_attention_forward_and_backward_follow_torchs_formulas(counter):
    forward = counter.count(op("aten::_scaled_dot_product_efficient_attention", (Q, KV, KV) + ((),) * 5,
                               (BF16,) * 3 + ("", "Scalar", "Scalar", "Scalar", ""),
                               ("", "", "", "", "True", "0.", "False", "")))
    assert (forward.status, forward.formula, forward.flops) == ("counted", "torch", 4 * B * HEADS * L * S * E)
    lse, seed = (B, HEADS, L), ()
    backward = counter.count(op(
        "aten::_scaled_dot_product_efficient_attention_backward",
        (Q, Q, KV, KV, (), Q, lse, seed, seed, (), (), (), ()),
        (BF16,) * 4 + ("",) + (BF16, "float", "long int", "long int", "Scalar", "ScalarList", "Scalar", ""),
        ("",) * 9 + ("0.", "[True, True, True, False]", "False", "")))
    # recompute QK^T, dO V^T, P^T dO, dS K, dS^T Q: five products of 2*B*H*L*S*E
    assert (backward.status, backward.flops) == ("counted", 10 * B * HEADS * L * S * E)


def test_flash_attention_backward_follows_torchs_formula(counter):
    lse = (B, HEADS, L)
    c = counter.count(op(
        "aten::_scaled_dot_product_flash_attention_backward", (Q, Q, KV, KV, Q, lse) + ((),) * 9,
        (BF16,) * 5 + ("float", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "long int", "long int", ""),
        ("",) * 8 + (str(L), str(S), "0.", "False", "", "", "")))
    assert (c.status, c.flops) == ("counted", 10 * B * HEADS * L * S * E)


def test_einsum_without_its_equation_is_refused(counter):
    c = counter.count(op("aten::einsum", ((), ((2, 3, 4), (2, 4, 5)), ()), ("", "TensorList", ""), ("", "", "")))
    assert c.status == "no_shapes" and "'equation'" in c.reason


# -- optimizer steps, elementwise ops, TensorLists ---------------------------------------------------


def test_foreach_add_counts_the_bytes_of_every_pair(counter):
    shapes = ((128, 128), (128,))
    c = counter.count(op("aten::_foreach_add_", (shapes, shapes, ()), ("TensorList", "TensorList", "Scalar"),
                         ("", "", "-0.001")))
    numel = 128 * 128 + 128
    # in place: each tensor of the first list read and written, each of the second read
    assert (c.status, c.flops, c.bytes) == ("no_formula", 0, 3 * 4 * numel)
    assert "no FLOP formula" in c.reason and "float32" in c.assumed


def test_an_in_place_add_reads_two_and_writes_one(counter):
    c = counter.count(op("aten::add_", ((1024,), (1024,), ()), ("float", "float", "Scalar"), ("", "", "1")))
    assert (c.status, c.bytes) == ("no_formula", 3 * 4 * 1024)


def test_layer_norm_without_concrete_inputs_takes_its_shape_from_the_weight(counter):
    c = counter.count(op("aten::native_layer_norm", ((1024, 512), (), (512,), (512,), ()),
                         ("float", "", "float", "float", "Scalar")))
    assert c.status == "no_formula" and c.bytes >= 4 * 2 * 1024 * 512
    assert "eps" in c.assumed


def test_a_plugin_formula_counts_and_is_named():
    class Adds:
        @hookimpl
        def rooflinekit_op_formulas(self):
            return {"aten.add": lambda a, b, *args, out=None, **kw: out.numel()}

    host = PluginHost()
    host.register(Adds(), "adds", "tests", "0")
    c = ShapeCounter(host).count(op("aten::add", ((4, 8), (4, 8), ()), ("float", "float", "Scalar"), ("", "", "1")))
    assert (c.status, c.flops, c.formula) == ("counted", 32, "adds")


# -- what is not counted, and why --------------------------------------------------------------------


@pytest.mark.parametrize("recorded, status, words", [
    (op("cudnn::convolution", ((1,),), ("float",)), "unsupported", "no op cudnn::convolution"),
    (op("c10d::allreduce_", ((), (), (), ()), ("TensorList", "", "Scalar", "Scalar")), "unsupported", "collective"),
    (op("AddmmBackward0", ((4, 8),), ("float",)), "unsupported", "autograd node"),
    (op("autograd::engine::evaluate_function: MmBackward0", (), ()), "unsupported", "autograd node"),
    (op("aten::no_such_op", ((2,),), ("float",)), "unsupported", "no op aten::no_such_op"),
    (op("aten::mm", (), ()), "no_shapes", "record_shapes"),
    (op("aten::cat", ((), ()), ("TensorList", "Scalar")), "no_shapes", "'tensors'"),
    (op("aten::mm", ((2, 3), (4, 5)), ("float", "float")), "unsupported", "RuntimeError"),
    (op("aten::mm", ((2, 3), (3, 5)), ("c10::qint8", "float")), "unsupported", "c10::qint8"),
    (op("aten::mm", ((2, 3), (3, 5), (1,)), ("float", "Scalar", "float")), "unsupported", "no overload"),
    (op("aten::view", ((4, 8), ()), ("float", "ScalarList"), ("", "[32]")), "free", ""),
    (op("aten::t", ((4, 8),), ("float",)), "free", ""),
    (op("aten::empty", ((), (), (), (), (), ()), ("ScalarList", "Scalar", "", "", "", "")), "free", ""),
    (op("aten::zeros", ((), (), (), (), ()), ("", "", "", "", "Scalar")), "no_shapes", "'size'"),
])
def test_what_is_not_counted_says_why(counter, recorded, status, words):
    c = counter.count(recorded)
    assert isinstance(c, RecordedCount) and c.status == status and words in c.reason
    assert c.flops == 0


def test_counts_are_memoised(counter):
    a = op("aten::mm", ((3, 4), (4, 5)), ("float", "float"))
    assert counter.count(a) is counter.count(op("aten::mm", ((3, 4), (4, 5)), ("float", "float")))


def test_recorded_op_reads_an_event():
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "args": {
        "Input Dims": [[[3], [4]], []], "Input type": ["TensorList", "Scalar"], "Concrete Inputs": ["", "0"]}}
    assert recorded_op(event) == RecordedOp("aten::cat", (((3,), (4,)), ()), ("TensorList", "Scalar"), ("", "0"))
    assert recorded_op({"cat": "kernel", "name": "sgemm", "args": {}}) is None


# -- a real trace, recorded here -----------------------------------------------------------------------


def outermost(events: list[dict], counter: ShapeCounter) -> list[tuple[dict, RecordedCount]]:
    """Per thread, the outermost ops counted or with bytes only; what nests under them is skipped."""
    chosen = []
    for tid in {e["tid"] for e in events}:
        ends: list[float] = []  # ends of the taken ops enclosing the current one
        for e in sorted((e for e in events if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])):
            while ends and e["ts"] >= ends[-1]:
                ends.pop()
            if ends:
                continue
            c = counter.count(recorded_op(e))
            if c.status in ("counted", "no_formula"):
                chosen.append((e, c))
                ends.append(e["ts"] + e["dur"])
    return chosen


def test_a_recorded_cpu_trace_counts_its_matmuls_to_the_closed_form(tmp_path, counter):
    batch, seq, d, hidden, heads, head_dim = 2, 8, 32, 64, 4, 16
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, d))
    x = torch.randn(batch, seq, d)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, dtype=torch.bfloat16) for _ in range(3))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        mlp(x).sum().backward()
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if recorded_op(e) is not None]
    taken = outermost(events, counter)
    rows = batch * seq
    forward = 2 * rows * d * hidden * 2
    backward = 2 * rows * hidden * d * 2 + 2 * rows * d * hidden  # layer 2: input and weight; layer 1: weight
    attention = 2 * batch * heads * causal_pairs(seq, seq) * (head_dim + head_dim)
    assert sum(c.flops for _, c in taken) == forward + backward + attention
    by_name = {}
    for e, c in taken:
        by_name.setdefault(e["name"], []).append(c)
    (sdpa,) = by_name["aten::scaled_dot_product_attention"]
    assert (sdpa.flops, sdpa.dtype) == (attention, "bfloat16")
    assert sum(c.flops for c in by_name["aten::linear"]) == forward
