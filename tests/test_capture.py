"""Capture: FLOPs and bytes per op against hand-derived closed forms, on meta and cpu."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rooflinekit.stages.capture import capture, unique_bytes
from tests.conftest import EXAMPLES, MODELS, TINY_LLAMA, profile_dict

DEVICES = ["meta", "cpu"]


def _build(device, dtype, fn):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return fn()
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [False, True])
def test_linear_flops_and_bytes_exact(device, bias):
    tokens, d_in, d_out = 6, 48, 80

    def make():
        return torch.nn.Linear(d_in, d_out, bias=bias), torch.randn(2, 3, d_in)

    layer, x = _build(device, torch.bfloat16, make)
    cap = capture(layer, (x,))
    matmuls = [op for op in cap.ops if op.flops]
    assert len(matmuls) == 1
    op = matmuls[0]
    assert op.flops == 2 * tokens * d_in * d_out
    weight = d_in * d_out * 2 + (d_out * 2 if bias else 0)
    assert op.bytes_read == weight + tokens * d_in * 2
    assert op.bytes_written == tokens * d_out * 2
    assert op.param_bytes == weight
    assert op.module == ""  # the root module


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_heads", [8, 2, 1])
def test_decode_sdpa_flops_are_4bhsd(device, kv_heads):
    b, h, s, d = 3, 8, 257, 32

    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != h)

    q, k, v = _build(device, torch.bfloat16, lambda: (
        torch.randn(b, h, 1, d), torch.randn(b, kv_heads, s, d), torch.randn(b, kv_heads, s, d)))
    cap = capture(Attn(), (q, k, v))
    assert [op.name for op in cap.ops] == ["F.scaled_dot_product_attention"]
    op = cap.ops[0]
    assert op.flops == 4 * b * h * s * d
    assert op.bytes_read == (b * h * d + 2 * b * kv_heads * s * d) * 2
    assert op.bytes_written == b * h * d * 2


def test_causal_prefill_counts_unmasked_pairs():
    b, h, s, d = 1, 2, 10, 16
    q = torch.randn(b, h, s, d, device="meta")

    class Attn(torch.nn.Module):
        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q, is_causal=True)

    cap = capture(Attn(), (q,))
    pairs = s * (s + 1) // 2  # lower triangle including the diagonal
    assert cap.ops[0].flops == 2 * b * h * pairs * (d + d)


def test_views_are_free_and_broadcast_read_once():
    class M(torch.nn.Module):
        def forward(self, x, row):
            y = x.transpose(0, 1).reshape(-1)  # view of a contiguous transpose -> copy
            z = x + row.expand(64, 128)  # row read once, not 64 times
            return y, z

    x = torch.randn(64, 128, device="meta")
    row = torch.randn(1, 128, device="meta")
    cap = capture(M(), (x, row))
    names = [op.name for op in cap.ops]
    assert "aten.transpose" not in names and "aten.expand" not in names
    add = next(op for op in cap.ops if op.name == "aten.add")
    assert add.bytes_read == (64 * 128 + 128) * 4
    assert add.bytes_written == 64 * 128 * 4


def test_inplace_and_duplicate_inputs_not_double_counted():
    class M(torch.nn.Module):
        def forward(self, x, y):
            x.add_(y)  # reads x and y, writes x once
            return x * x  # x read once

    x = torch.randn(32, 32, device="meta")
    y = torch.randn(32, 32, device="meta")
    cap = capture(M(), (x, y))
    add_, mul = cap.ops
    n = 32 * 32 * 4
    assert (add_.bytes_read, add_.bytes_written) == (2 * n, n)
    assert (mul.bytes_read, mul.bytes_written) == (n, n)


def test_cache_slot_write_counts_only_the_slot():
    class M(torch.nn.Module):
        def forward(self, cache, k):
            cache[:, :, 99:100].copy_(k)
            return cache

    cache = torch.zeros(2, 4, 100, 16, device="meta")
    k = torch.randn(2, 4, 1, 16, device="meta")
    (op,) = capture(M(), (cache, k)).ops
    slot = 2 * 4 * 16 * 4
    assert (op.name, op.bytes_read, op.bytes_written) == ("aten.copy_", slot, slot)


def test_embedding_reads_only_gathered_rows():
    emb = torch.nn.Embedding(50000, 64, device="meta")
    ids = torch.zeros(3, 5, dtype=torch.long, device="meta")
    (op,) = capture(emb, (ids,)).ops
    assert op.bytes_read == 15 * 64 * 4 + 15 * 8
    assert op.param_bytes == 15 * 64 * 4


def test_unique_bytes_of_expanded_tensor():
    t = torch.empty(4, 1, 8).expand(4, 16, 8)
    assert unique_bytes(t) == 4 * 8 * 4


def test_ops_without_formula_are_listed_not_zeroed():
    report = profile_dict(MODELS / "tiny_gqa.py", context=32)
    names = {u["name"] for u in report["uncounted_ops"]}
    assert {"aten.mul", "aten.silu"} <= names
    counted_bytes = sum(op["bytes_read"] + op["bytes_written"] for op in report["ops"] if not op["counted"])
    assert sum(u["bytes"] for u in report["uncounted_ops"]) == pytest.approx(counted_bytes)
    assert all(0 <= u["bytes_share"] <= 1 for u in report["uncounted_ops"])


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize(
    "path,options",
    [
        (EXAMPLES / "llama_gqa.py", TINY_LLAMA),
        (EXAMPLES / "gpt2_mha.py", {"layers": 1, "hidden": 128, "heads": 4, "vocab": 500}),
        (MODELS / "einsum_attn.py", {}),
        (MODELS / "torch_mha.py", {}),
        (MODELS / "fused_qkv_mqa.py", {}),
        (EXAMPLES / "deepseek_mla.py", {"layers": 1, "hidden": 256, "heads": 4, "q_lora_rank": 64,
                                        "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                                        "qk_rope_head_dim": 8, "v_head_dim": 16,
                                        "intermediate": 128, "vocab": 300}),
    ],
)
def test_meta_and_cpu_agree(path, options, phase):
    kw = dict(phase=phase, batch=2, context=24, dtype="fp32")
    meta = profile_dict(path, device="meta", **kw, **options)
    cpu = profile_dict(path, device="cpu", **kw, **options)
    assert meta["totals"]["flops"] == cpu["totals"]["flops"]
    assert meta["totals"]["bytes"] == cpu["totals"]["bytes"]
    assert [o["name"] for o in meta["ops"]] == [o["name"] for o in cpu["ops"]]


def test_builds_are_seeded_so_data_dependent_runs_repeat(tmp_path):
    # bytes of a boolean-mask gather depend on the values make_inputs drew
    (tmp_path / "gather.py").write_text(
        "import torch\n"
        "class Pick(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x[x > 0] * 2\n"
        "def build_model():\n    return Pick()\n"
        "def make_inputs(b, c, p):\n    return (torch.randn(b, c),)\n"
    )
    before = torch.get_rng_state()
    runs = [profile_dict(tmp_path / "gather.py", batch=4, context=4096, device="cpu", dtype="fp32")
            for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), before)  # the caller's generator is left as it was
    mul = [next(o for o in r["ops"] if o["name"] == "aten.mul") for r in runs]
    assert mul[0]["bytes_read"] == mul[1]["bytes_read"]
    torch.manual_seed(0)  # the build seed: the same values, so the same selection
    kept = int((torch.randn(4, 4096) > 0).sum())
    assert mul[0]["bytes_read"] == mul[0]["bytes_written"] == kept * 4  # the kept fp32 values


def test_einsum_products_read_as_attention_operands():
    from rooflinekit.stages.capture import einsum_hint

    q, k, p = torch.empty(2, 8, 1, 32), torch.empty(2, 8, 100, 32), torch.empty(2, 8, 1, 100)
    # QK^T: q as [B, H, L, d], k as k^T [B, H, d, S]; PV: v as [B, H, S, d]
    assert einsum_hint(("bhqd,bhkd->bhqk", q, k)) == ([[2, 8, 1, 32], [2, 8, 32, 100]], [8, 8])
    assert einsum_hint(("bhqk,bhkd->bhqd", p, k)) == ([[2, 8, 1, 100], [2, 8, 100, 32]], [8, 8])
    # heads-second layout, and one K head widened by a stride-0 expand
    assert einsum_hint(("bqhd,bkhd->bhqk", q.transpose(1, 2), k.transpose(1, 2)))[0] == [[2, 8, 1, 32],
                                                                                         [2, 8, 32, 100]]
    one = torch.empty(2, 1, 100, 32).expand(2, 8, 100, 32)
    assert einsum_hint(("bhqd,bhkd->bhqk", q, one))[1] == [8, 1]
    # not a plain product over shared batch and head indices: heads stay unknown
    assert einsum_hint(("bshc,btc->bsht", torch.empty(2, 1, 8, 16), torch.empty(2, 100, 16))) is None
    assert einsum_hint(("ij,jk->ik", torch.empty(3, 4), torch.empty(4, 5))) is None
    assert einsum_hint(("...d,...d->...", q, q)) is None


# -- the capture's fast paths record what the plain paths record (issue 16, capture overhead) -----


class _Views(torch.nn.Module):
    """Every view function the function mode sends past the dispatch mode, a gather the indexing
    rule must keep (tensor index), and an op on each result, so each view's layout is read."""

    def forward(self, x, idx):
        outs = [x.view(2, -1), x.transpose(0, 1), x.unsqueeze(0), x[:1].expand(4, 3, 8),
                x.permute(2, 0, 1), x[:, :1].squeeze(1), x[0].t(), x.narrow(2, 1, 3),
                x.view_as(x), x[:1].expand_as(x), x[..., None, 1:3], x[1, :, 2],
                torch.transpose(x, 1, 2), torch.unsqueeze(x, 1), torch.permute(x, (1, 0, 2)),
                torch.squeeze(x[:, :1]), torch.t(x[0]), torch.narrow(x, 0, 1, 2)]
        outs += list(x.split(2, dim=2)) + list(x.chunk(2, dim=0)) + list(x.unbind(1))
        outs += list(torch.split(x, [3, 5], dim=2)) + list(torch.chunk(x, 2)) + list(torch.unbind(x))
        outs.append(x[idx])  # a gather: recorded (aten.index)
        outs.append(x[[0, 2]])  # a list index gathers too
        return [o * 2 for o in outs]


@pytest.mark.parametrize("device", DEVICES)
def test_view_shortcut_records_what_the_dispatch_mode_records(device, monkeypatch):
    from rooflinekit.stages.capture import modes as capture_modes

    def run():
        x = torch.randn(4, 3, 8, device=device)
        idx = torch.tensor([0, 3], device=device)
        cap = capture(_Views(), (x, idx))
        return [(o.name, o.module, o.flops, o.bytes_read, o.bytes_written, o.shapes, o.dtype) for o in cap.ops]

    fast = run()
    monkeypatch.setattr(capture_modes, "_VIEW_FUNCS", set())  # every view through the dispatch mode
    assert run() == fast
    names = [n for n, *_ in fast]
    assert names.count("aten.index") == 2 and names.count("aten.mul") == len(names) - 2


def test_parameter_walk_is_named_parameters_then_buffers():
    from rooflinekit.stages.capture.modules import _params_and_buffers

    emb, shared = torch.nn.Embedding(5, 4), torch.nn.Linear(4, 4)
    head = torch.nn.Linear(4, 5, bias=False)
    head.weight = emb.weight  # tied
    model = torch.nn.ModuleDict({"emb": emb, "a": torch.nn.Sequential(shared, torch.nn.ReLU(), shared),
                                 "b": shared, "head": head})
    model.register_buffer("scale", torch.ones(1))
    shared.register_buffer("step", torch.zeros(1))
    model.a.register_buffer("none", None)
    expected = [(n, id(t)) for n, t in model.named_parameters()] + [(None, id(b)) for b in model.buffers()]
    walked = _params_and_buffers(model, list(model.named_modules()))
    assert [(n, id(t)) for n, t in walked] == expected


def test_storage_numbers_survive_address_reuse_on_real_tensors():
    """Meta storages are held for the capture; real ones are weak: a dead storage's address, reused,
    gets a new number either way."""
    from rooflinekit.stages.capture.storages import Storages

    for device in ("meta", "cpu"):
        storages = Storages()
        a = torch.empty(1024, device=device)
        sid_a = storages.id(a)
        assert storages.id(a[3:]) == sid_a and storages.id(a.view(32, 32)) == sid_a
        del a
        fresh = [storages.id(torch.empty(1024, device=device)) for _ in range(50)]
        assert sid_a not in fresh
        storages.release()


def test_module_models_ask_nothing_without_a_plugin_that_answers(monkeypatch):
    from rooflinekit.core.plugins import PluginHost
    from rooflinekit.core.request import Workload
    from rooflinekit.stages.modelled import module_models

    host = PluginHost(load_entry_points=False)
    asked = []
    monkeypatch.setattr(host, "first", lambda *a, **k: asked.append(a) or (None, None))
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    with module_models(model, Workload("decode", 1, 8, "fp32", "cpu", ()), host) as used:
        assert used == []
    assert asked == [] and not host.implemented(host.hook.rooflinekit_module_model)


_WRAPPED_MODEL = '''
import importlib.util
import torch

_spec = importlib.util.spec_from_file_location("_repeat_kv_sdpa_wrapped", {path!r})
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)


def _func_module(fn):
    """A function called as a module that no model holds (the shape of the `kernels` package's
    `Func` wrappers, which transformers 5.25 puts around rotary embeddings, scans and convolutions)."""
    class Func(torch.nn.Module):
        def forward(self, *args, **kwargs):
            return fn(*args, **kwargs)
    return Func()


_base.repeat_kv = _func_module(_base.repeat_kv)
build_model = _base.build_model
make_inputs = _base.make_inputs
'''


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_functions_called_as_unheld_modules_belong_to_their_caller(tmp_path, phase):
    """The same model with its K/V repeat called through a parameterless module outside the model's
    tree gives the same report as calling the function: same op modules, same attention rows."""
    source = MODELS / "repeat_kv_sdpa.py"
    wrapped = tmp_path / "wrapped.py"
    wrapped.write_text(_WRAPPED_MODEL.format(path=str(source)))
    plain, inner = (profile_dict(p, phase=phase, batch=2, context=64) for p in (source, wrapped))
    assert [op["module"] for op in inner["ops"]] == [op["module"] for op in plain["ops"]]
    assert not any("Func" in op["module"] for op in inner["ops"])
    assert len(inner["attention"]) == len(plain["attention"]) == 2
    for a, b in zip(inner["attention"], plain["attention"], strict=True):
        for key in ("module", "arch", "kv_bytes_executed", "kv_bytes_min", "flops_executed"):
            assert a[key] == b[key], key
    assert inner["totals"]["bytes"] == plain["totals"]["bytes"]
