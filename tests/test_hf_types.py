"""transformers types that failed on meta for rooflinekit's own reasons (issue 25, item 7), each
profiled in its phases from its default config cut to 2 layers, with a count checked against a
closed form of what its code does and the note naming what was assumed:

- CPM-Ant: its 32 learned prompt positions are in its cache and its attention (attention_prefix);
- BLT: a cache per stack of layers (plugins/hf/stacks.py), patches every patch_size bytes
  (plugins/hf/patcher.py);
- JetMoE (router modelled: rows split evenly) and LongCat-Flash (zero-computation experts):
  plugins/moe_routing.py;
- Reformer, XLM, X-MOD: values the inputs determine, computed from them (plugins/hf/values.py).
"""

from __future__ import annotations

import inspect

import pytest
import torch

from tests.conftest import profile_dict

pytest.importorskip("transformers")
pytestmark = pytest.mark.hf


def _config(model_type: str):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type)


def _profile(model_type: str, phase: str, batch: int, context: int) -> dict:
    return profile_dict(f"hf:{model_type}", phase=phase, batch=batch, context=context, layers=2)


def _module_flops(report: dict, suffix: str) -> list[float]:
    """Summed op FLOPs per module whose path ends with `suffix`, in the order they ran."""
    sums: dict[str, float] = {}
    for op in report["ops"]:
        if op["module"].endswith(suffix):
            sums[op["module"]] = sums.get(op["module"], 0.0) + op["flops"]
    return list(sums.values())


def _note(report: dict, text: str) -> str:
    found = [n for n in report["notes"] if text in n]
    assert found, report["notes"]
    return found[0]


# -- values the inputs determine (plugins/hf/values.py) -----------------------------------------------


def test_values_of_known_inputs_are_computed_and_others_still_fail():
    from rooflinekit_plugins.hf.values import KnownValues, known

    notes: list[str] = []
    with torch.device("meta"), torch.no_grad():
        ids = known(lambda: torch.zeros(2, 7, dtype=torch.long))
        weight = torch.empty(4, 4)
        with KnownValues(notes):
            assert torch.arange(3, 10).unsqueeze(0).expand(2, -1).max().item() == 9  # a factory's value
            assert (ids != 2).sum(dim=1).long().max().item() == 7  # from a declared input
            mask = (torch.ones(2) * 1) == 1
            assert torch.empty(2, 5)[mask].shape == (2, 5)  # a boolean index
            assert torch.empty(2, 5)[~mask].shape == (0, 5)
            x = torch.arange(4)
            x.add_(1)  # written in place: its value follows
            assert x.tolist() == [1, 2, 3, 4]
            view = x[1:]
            view.mul_(0)  # written through a view: the base is no longer known
            with pytest.raises(Exception, match="meta"):
                x.max().item()
            with pytest.raises(Exception, match="meta"):  # computed from a parameter: unknown
                (torch.ones(1, 4) @ weight).sum().item()
    (note,) = notes
    assert "a scalar read at test_hf_types.py" in note and "a boolean index" in note and ": 9" in note


# -- each type ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("phase,batch,context", [("decode", 2, 64), ("prefill", 1, 48)])
def test_cpmant_caches_and_attends_its_prompt_positions(phase, batch, context):
    c = _config("cpmant")
    report = _profile("cpmant", phase, batch, context)
    per_token = 2 * c.num_attention_heads * c.dim_head * 2  # K and V, bf16
    rows = report["attention"]
    assert len(rows) == 2
    for row in rows:
        assert row["cache_bytes_per_token"] == per_token
        # the cache and the attention hold the context plus the 32 prompt positions
        assert row["kv_bytes_min"] == batch * (context + c.prompt_length) * per_token
    _note(report, f"{c.prompt_length} learned prompt positions precede every sequence")


@pytest.mark.parametrize("phase,batch,context", [("decode", 2, 64), ("prefill", 1, 64)])
def test_blt_caches_each_stack_and_patches_every_patch_size_bytes(phase, batch, context):
    from rooflinekit_plugins.hf.patcher import patch_lengths

    c = _config("blt")
    report = _profile("blt", phase, batch, context)
    rows = {r["module"]: r for r in report["attention"]}
    for stack, sub in (("local_encoder", c.encoder_config), ("local_decoder", c.decoder_config)):
        head_dim = getattr(sub, "head_dim", None) or sub.hidden_size // sub.num_attention_heads
        for i in range(2):
            row = rows[f"model.{stack}.layers.{i}.self_attn"]
            assert row["cache_bytes_per_token"] == 2 * sub.num_key_value_heads * head_dim * 2
    _note(report, "each stack with a cache of its own")
    _note(report, f"taken every {c.patch_size} bytes")
    # the global transformer runs over the patches of the step: causal pairs among them
    tokens = 1 if phase == "decode" else context
    patches = len(patch_lengths(tokens, c.patch_size))
    assert patches == (2 if phase == "decode" else 2 + len(range(1 + c.patch_size, context, c.patch_size)))
    g = c.global_config
    head_dim = getattr(g, "head_dim", None) or g.hidden_size // g.num_attention_heads
    qk_pv = 4 * g.num_attention_heads * head_dim * batch
    assert rows["model.global_transformer.layers.0.self_attn"]["flops_executed"] >= qk_pv * patches * (patches + 1) / 2
    q_proj = _module_flops(report, "global_transformer.layers.0.self_attn.q_proj")
    assert q_proj == [2 * batch * patches * g.hidden_size * g.num_attention_heads * head_dim]


@pytest.mark.parametrize("phase,batch,context", [("decode", 2, 64), ("prefill", 1, 48)])
def test_jetmoe_router_splits_rows_evenly(phase, batch, context):
    c = _config("jetmoe")
    report = _profile("jetmoe", phase, batch, context)
    tokens = batch * (1 if phase == "decode" else context)
    pairs = tokens * c.num_experts_per_tok
    # every token-expert pair runs the expert's gated MLP, whatever the split
    assert _module_flops(report, "layers.0.mlp.input_linear") == [2 * pairs * c.hidden_size * 2 * c.intermediate_size]
    assert _module_flops(report, "layers.0.mlp.output_linear") == [2 * pairs * c.intermediate_size * c.hidden_size]
    # experts no pair reached read no weights (a product over no rows launches nothing)
    touched = min(pairs, c.num_local_experts)
    mm = [op for op in report["ops"] if op["module"].endswith("layers.0.mlp.input_linear") and op["name"] == "aten.mm"]
    assert sum(op["param_bytes"] for op in mm) == touched * c.hidden_size * 2 * c.intermediate_size * 2
    _note(report, "EvenRouting: router modelled under uniform routing")


@pytest.mark.parametrize("phase,batch,context", [("decode", 2, 64), ("prefill", 1, 32)])
def test_longcat_flash_zero_computation_experts(phase, batch, context):
    """Up to transformers 5.24 the experts container holds the Z identity experts and skips them:
    T*k*E/(E+Z) expert applications. From 5.25 LongcatFlashMoE adds the identity picks' tokens itself
    and hands those picks to routed experts at weight 0 (indices (i - E) * E // Z), so the code as
    written runs T*k applications over the E routed experts."""
    from transformers.models.longcat_flash import modeling_longcat_flash as m

    c = _config("longcat_flash")
    report = _profile("longcat_flash", phase, batch, context)
    tokens = batch * (1 if phase == "decode" else context)
    experts, zero, k = c.n_routed_experts, c.zero_expert_num, c.moe_topk
    identity_in_experts = "zero_expert_num" in inspect.getsource(m.LongcatFlashExperts.__init__)
    share, over = (experts / (experts + zero), experts + zero) if identity_in_experts else (1.0, experts)
    (gate_up,) = [op for op in report["ops"]
                  if op["name"] == "moe.gate_up_proj" and op["module"] == "model.layers.0.mlp.experts"]
    inter, hidden = c.expert_ffn_hidden_size, c.hidden_size
    assert gate_up["flops"] == pytest.approx(2 * tokens * k * share * 2 * inter * hidden)
    touched = experts * (1 - (1 - k / over) ** tokens)
    assert gate_up["param_bytes"] == pytest.approx(touched * 2 * inter * hidden * 2)
    # the router (a product with its weight cast to fp32) is no attention row
    assert all("router" not in r["module"] for r in report["attention"])
    _note(report, "zero-computation experts modelled" if identity_in_experts else "modelled under uniform routing")


def test_reformer_reads_its_largest_position():
    c = _config("reformer")
    s = 64
    report = _profile("reformer", "prefill", 1, s)
    assert _note(report, "modeling_reformer.py").count(f": {s - 1})") == 1  # max(position_ids) = S-1
    inner = c.num_attention_heads * c.attention_head_size
    assert [r["flops_model"] for r in report["attention"]] == [4 * s * s * inner] * 2  # every pair, both products


def test_xlm_checks_its_lengths():
    c = _config("xlm")
    s = 64
    report = _profile("xlm", "prefill", 1, s)
    note = _note(report, "modeling_xlm.py:793")
    assert f"modeling_xlm.py:793: {s}" in note  # lengths.max(): every token is not padding
    assert [r["flops_model"] for r in report["attention"]] == [4 * s * s * c.emb_dim] * 2


def test_xmod_routes_every_row_to_the_default_language():
    c = _config("xmod")
    s = 64
    report = _profile("xmod", "prefill", 1, s)
    language = c.languages[0]
    bottleneck = c.hidden_size // c.adapter_reduction_factor
    for other in c.languages[1:]:
        assert not [f for f in _module_flops(report, f"adapter_modules.{other}.dense1") if f]
    assert _module_flops(report, f"adapter_modules.{language}.dense1") == [2 * s * c.hidden_size * bottleneck] * 2
    _note(report, f"language adapters of {language!r}")
    assert "modeling_xmod.py:453: 1 of 1" in _note(report, "a boolean index")
