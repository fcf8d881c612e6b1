"""One built-in plugin per attention architecture, and a core that never names one.

- the core (rooflinekit/**) compares no string with an architecture's name;
- `mha`, `gqa` (and MQA) and `mla` are separate plugins, recognised in the order MLA, then
  nn.MultiheadAttention / heads, whatever order they are registered in;
- MLA's own sizes travel in `AttentionSpec.extra` into the report, and `plugin` is the recogniser;
- the `rooflinekit_attention_shard` hook tells planned TP how each architecture splits;
- the new-architecture plugin of docs/plugins.md, installed from the docs alone, profiles a model.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import itertools
import json
import re
import textwrap
from dataclasses import replace

import pytest
import torch
from conftest import pip_install_site, write_distribution

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core import hookspecs
from rooflinekit.core.errors import UserError
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.specs import AttentionShard, AttentionSpec
from rooflinekit.plugin import hookimpl, split_heads
from rooflinekit.stages.attribute import attribute_attention
from rooflinekit.stages.model_source import load_source
from rooflinekit.transforms.tp_plan import attention_shard, structural_tp_plan
from rooflinekit_plugins import gqa, mha, mla
from tests import warm_python
from tests.conftest import EXAMPLES, ROOT, profile_dict

ARCH_NAMES = {"mha", "gqa", "mqa", "mla"}
MLA_FILE = EXAMPLES / "deepseek_mla.py"


# -- the core names no architecture -----------------------------------------------------------------


def _arch_strings(node: ast.AST) -> set[str]:
    """Architecture names among a comparison operand: a string, or the items of a tuple/list/set."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {n.value for n in items if isinstance(n, ast.Constant) and n.value in ARCH_NAMES}


def offences(source: str) -> list[tuple[int, list[str]]]:
    """(line, names) for every comparison (==, !=, in, not in, match-case) with an architecture name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: set[str] = set()
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                names |= _arch_strings(operand)
        elif isinstance(node, ast.MatchValue):
            names |= _arch_strings(node.value)
        if names:
            found.append((node.lineno, sorted(names)))
    return found


def test_the_scan_finds_comparisons_and_ignores_docstrings():
    code = textwrap.dedent('''
        """Docstrings may say "mla" and "gqa"."""
        ARCH = "mla"  # an assignment is no comparison
        if spec.arch == "mla":
            pass
        if spec.arch in ("gqa", "mqa"):
            pass
        if "mha" != spec.arch:
            pass
        match spec.arch:
            case "mla":
                pass
    ''')
    assert [line for line, _ in offences(code)] == [4, 6, 8, 11]


#: Not architecture checks: a 1.x report kept MLA's sizes under an attention row's "mla" key, which
#: the codec moves to `extra` when it reads such a report (a JSON key of an old schema).
ALLOWED = {"rooflinekit/core/codec.py": {"mla"}}


def test_no_architecture_name_is_compared_under_rooflinekit():
    found = []
    for path in sorted((ROOT / "rooflinekit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, names in offences(path.read_text()):
            if set(names) - ALLOWED.get(rel, set()):
                found.append(f"{rel}:{line}: {', '.join(names)}")
    assert not found, "the core must not name an architecture:\n" + "\n".join(found)


# -- the hook reference --------------------------------------------------------------------------------

FIRST_LINES = {True: "firstresult: stops at the first non-None answer.", False: "every plugin's answer is collected."}


def test_every_hook_is_annotated_and_says_its_kind_first():
    hooks = [f for name, f in vars(hookspecs).items() if name.startswith("rooflinekit_") and callable(f)]
    assert len(hooks) >= 10
    for hook in hooks:
        opts = hook.rooflinekit_spec  # pluggy's marker: {"firstresult": ..., ...}
        signature = inspect.signature(hook)
        assert signature.return_annotation is not inspect.Signature.empty, hook.__name__
        assert all(p.annotation is not inspect.Parameter.empty for p in signature.parameters.values()), hook.__name__
        assert hook.__doc__.splitlines()[0] == FIRST_LINES[bool(opts["firstresult"])], hook.__name__
    names = {h.__name__ for h in hooks}
    assert {"rooflinekit_attention_shard", "rooflinekit_attention_cost", "rooflinekit_op_formulas"} <= names


def test_the_built_ins_load_from_a_source_tree_without_entry_points(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    host = PluginHost()
    info = {i.name: i for i in host.infos}
    assert {"mha", "gqa", "mla"} <= set(info) and "attention" not in info
    assert info["gqa"].distribution == "rooflinekit (source tree)" and info["gqa"].provides == ["gqa", "mqa"]


# -- one plugin per architecture ----------------------------------------------------------------------


def _module(**attrs) -> torch.nn.Module:
    module = torch.nn.Module()
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


MLA_ATTRS = {"num_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
             "v_head_dim": 128, "mode": "absorbed"}
CASES = [
    # (module, arch, plugin)
    (lambda: torch.nn.MultiheadAttention(64, 4), "mha", "mha"),
    (lambda: _module(num_heads=8, num_key_value_heads=8, head_dim=16), "mha", "mha"),
    (lambda: _module(num_heads=8, num_key_value_heads=2, head_dim=16), "gqa", "gqa"),
    (lambda: _module(num_heads=8, num_key_value_heads=1, head_dim=16), "mqa", "gqa"),
    # an MLA module that also declares one K/V head: MLA goes first, it is not taken for MQA
    (lambda: _module(**MLA_ATTRS, num_key_value_heads=1, head_dim=192), "mla", "mla"),
]


@pytest.mark.parametrize("order", list(itertools.permutations(["mha", "gqa", "mla"])))
def test_each_architecture_has_its_plugin_in_any_registration_order(order):
    modules = {"mha": mha, "gqa": gqa, "mla": mla}
    host = PluginHost(load_entry_points=False)
    for name in order:
        host.register(modules[name], name, "tests", "0")
    for make, arch, plugin in CASES:
        spec, answered = host.first(host.hook.rooflinekit_attention_spec, module=make(),
                                         path="x", call=None)
        assert (spec.arch, answered) == (arch, plugin)


def test_plugins_declare_what_they_provide():
    host = PluginHost()
    provides = {i.name: i.provides for i in host.infos}
    assert provides["mha"] == ["mha"] and provides["gqa"] == ["gqa", "mqa"] and provides["mla"] == ["mla"]
    assert provides["hardware_db"] == ["hardware entries", "efficiency sources: published, a file"]
    assert provides["modelfile"] == ["model files"]


def test_mla_fields_travel_in_extra_and_the_plugin_is_the_recogniser():
    batch, context = 2, 1024
    report = profile_dict(MLA_FILE, batch=batch, context=context, layers=1, mode="absorbed")
    (row,) = report["attention"]
    r, rope, nope, v, h = 512, 64, 128, 128, 128  # the example's DeepSeek-V3 sizes
    assert row["extra"] == {"kv_lora_rank": r, "qk_rope_head_dim": rope, "qk_nope_head_dim": nope, "v_head_dim": v}
    assert (row["arch"], row["mode"], row["plugin"]) == ("mla", "absorbed", "mla")
    assert row["kv_bytes_min"] == batch * context * (r + rope) * 2
    assert row["flops_model"] == 2 * batch * h * context * ((r + rope) + r)
    assert row["flops_alt"]["unabsorbed"] == 2 * batch * h * context * ((nope + rope) + v)
    gqa_row = profile_dict(EXAMPLES / "llama_gqa.py", layers=1, heads=8, kv_heads=2, head_dim=32, hidden=256,
                          intermediate=512, vocab=1000)["attention"][0]
    assert gqa_row["extra"] == {} and gqa_row["plugin"] == "gqa"


class _Liar:
    """Claims to be another plugin in the spec it returns: the core records who really answered."""

    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(self, module, path):
        if type(module).__name__ == "GQAAttention":
            return AttentionSpec(arch="gqa", num_heads=8, num_kv_heads=2, head_dim=32, v_head_dim=32,
                                 plugin="somebody else")


def test_the_core_fills_spec_plugin():
    host = PluginHost()
    host.register(_Liar(), "liar", "tests", "0")
    options = {"layers": 1, "heads": 8, "kv_heads": 2, "head_dim": 32, "hidden": 256, "intermediate": 512,
               "vocab": 1000}
    workload = Workload("decode", 1, 64, "bf16", "meta", tuple(sorted(options.items())))
    done = run_profile(load_source(str(EXAMPLES / "llama_gqa.py"), options, host), workload, Deployment("H800"),
                   host=host)
    (row,) = attribute_attention(done.capture, done.model, workload, host)
    assert row.plugin == row.spec.plugin == "liar"
    (row,) = attribute_attention(done.capture, done.model, workload, PluginHost())
    assert row.plugin == row.spec.plugin == "gqa"


# -- how architectures split under planned TP ----------------------------------------------------------


@pytest.mark.parametrize("h, hkv, tp", [(32, 8, 4), (32, 8, 8), (32, 8, 16), (32, 32, 8), (32, 1, 4)])
def test_split_heads_closed_forms(h, hkv, tp):
    d = dv = 64
    spec = AttentionSpec(arch="gqa", num_heads=h, num_kv_heads=hkv, head_dim=d, v_head_dim=dv)
    shard = split_heads(spec, tp)
    assert shard.spec.num_heads == h // tp
    assert shard.spec.num_kv_heads == max(1, hkv // tp)
    assert shard.kv == ("split" if hkv >= tp else "replicated")
    if hkv >= tp:
        assert shard.colwise_shares == {}
    else:  # one K/V head per GPU: a K or V projection keeps 1/H_kv of its columns, not 1/N
        assert shard.colwise_shares[hkv * d] == 1 / hkv
        fused = h * d + hkv * (d + dv)
        assert shard.colwise_shares[fused] == pytest.approx((h // tp * d + d + dv) / fused)


def test_split_heads_refuses_kv_heads_and_tp_that_do_not_divide():
    spec = AttentionSpec(arch="gqa", num_heads=48, num_kv_heads=6, head_dim=64, v_head_dim=64)
    with pytest.raises(UserError, match="one must divide the other"):
        split_heads(spec, 4)


def test_the_mla_shard_keeps_the_latent_and_the_down_projections_whole():
    host = PluginHost()
    spec, _ = host.first(host.hook.rooflinekit_attention_spec, module=_module(**MLA_ATTRS), path="x",
                                      call=None)
    shard, plugin = host.first(host.hook.rooflinekit_attention_shard, spec=spec, tp=8)
    assert plugin == "mla" and shard.kv == "latent replicated"
    assert (shard.spec.num_heads, shard.spec.num_kv_heads) == (2, 1)
    assert {"wq_a", "wkv_a", "q_a_proj", "kv_a_proj_with_mqa"} <= set(shard.replicated)
    assert shard.replicated_below == 16 * 128 and shard.out_head_dim == 128


class _Ring:
    """A made-up architecture: its K/V heads stay whole on every GPU, and it names a projection to keep."""

    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(self, module, path):
        if type(module).__name__ == "GQAAttention":
            return AttentionSpec(arch="ring", num_heads=module.num_heads, num_kv_heads=module.num_kv_heads,
                                 head_dim=module.head_dim, v_head_dim=module.head_dim)

    @hookimpl
    def rooflinekit_attention_cost(self, spec, workload):
        if spec.arch == "ring":
            return gqa.rooflinekit_attention_cost(replace(spec, arch="gqa"), workload)

    @hookimpl
    def rooflinekit_attention_shard(self, spec, tp):
        if spec.arch == "ring":
            return AttentionShard(spec=replace(spec, num_heads=spec.num_heads // tp), kv="ring-replicated",
                                  replicated=("k_*", "v_proj"), note="ring: every GPU holds every K/V head")


def test_parallel_follows_the_shard_answer():
    host = PluginHost()
    host.register(_Ring(), "ring", "tests", "0")
    options = {"layers": 1, "heads": 8, "kv_heads": 2, "head_dim": 32, "hidden": 256, "intermediate": 512,
               "vocab": 1000}
    workload = Workload("decode", 4, 64, "bf16", "meta", tuple(sorted(options.items())))
    report = run_profile(load_source(str(EXAMPLES / "llama_gqa.py"), options, host), workload,
                     Deployment("H800", tp=4), host=host).report.to_dict()
    (att,) = report["attention"]
    assert (att["arch"], att["num_heads"], att["num_kv_heads"]) == ("ring", 2, 2)
    assert att["cache_bytes_per_token"] == 2 * (32 + 32) * 2  # both K/V heads, bf16
    assert "ring: every GPU holds every K/V head" in att["notes"]
    assert report["parallel"]["attention"][0]["kv_heads"] == "ring-replicated"
    styles = {e["module"]: e["style"] for e in report["parallel"]["plan"]}
    assert styles["layers.0.self_attn.k_proj"] == styles["layers.0.self_attn.v_proj"] == "replicate"
    assert styles["layers.0.self_attn.q_proj"] == "colwise" and styles["layers.0.self_attn.o_proj"] == "rowwise"


def test_an_architecture_without_a_shard_answer_splits_as_heads_and_says_so():
    model = torch.nn.Module()
    model.attn = torch.nn.Module()
    model.attn.q_proj = torch.nn.Linear(64, 64)
    model.attn.o_proj = torch.nn.Linear(64, 64)
    host = PluginHost()
    spec = AttentionSpec(arch="plain", num_heads=4, num_kv_heads=4, head_dim=16, v_head_dim=16)
    plan = structural_tp_plan(model, {"attn": spec}, host)
    assert plan == {"attn.q_proj": "colwise", "attn.o_proj": "rowwise"}
    shard = attention_shard(spec, 2, host)
    assert shard.spec.num_heads == 2 and "no plugin says how arch 'plain' splits" in shard.note


# -- the new-architecture plugin of docs/plugins.md ----------------------------------------------------

DOCS = ROOT / "docs" / "plugins.md"
MARKER = "<!-- new-architecture-plugin -->"

SINK_MODEL = textwrap.dedent(
    '''
    import torch
    import torch.nn.functional as F
    from torch import nn


    class SinkAttention(nn.Module):
        """GQA whose cache keeps the first `sink_tokens` and the last `recent_tokens` positions."""

        def __init__(self, hidden, heads, kv_heads, head_dim, sink_tokens, recent_tokens):
            super().__init__()
            self.num_heads, self.num_key_value_heads, self.head_dim = heads, kv_heads, head_dim
            self.sink_tokens, self.recent_tokens = sink_tokens, recent_tokens
            self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
            self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

        def forward(self, x, k_cache, v_cache):
            b, s, _ = x.shape
            q = self.q_proj(x).view(b, s, self.num_heads, self.head_dim).transpose(1, 2)
            k = self.k_proj(x).view(b, s, self.num_key_value_heads, self.head_dim).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.num_key_value_heads, self.head_dim).transpose(1, 2)
            k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1, enable_gqa=True)
            return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


    class Model(nn.Module):
        def __init__(self, **dims):
            super().__init__()
            self.attn = SinkAttention(**dims)

        def forward(self, x, k_cache, v_cache):
            return self.attn(x, k_cache, v_cache)


    def build_model(hidden=256, heads=8, kv_heads=2, head_dim=32, sink_tokens=4, recent_tokens=60):
        return Model(hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     sink_tokens=sink_tokens, recent_tokens=recent_tokens)


    def make_inputs(batch, context, phase, hidden=256, kv_heads=2, head_dim=32, sink_tokens=4, recent_tokens=60):
        new = context if phase == "prefill" else 1
        cached = 0 if phase == "prefill" else min(context, sink_tokens + recent_tokens) - 1
        cache = (batch, kv_heads, cached, head_dim)
        return torch.randn(batch, new, hidden), torch.zeros(cache), torch.zeros(cache)
    '''
)


def docs_plugin_code() -> str:
    """The first python block after the marker in docs/plugins.md."""
    text = DOCS.read_text()
    assert MARKER in text, f"{DOCS.name} lost its {MARKER} marker"
    match = re.search(r"```python\n(.*?)```", text[text.index(MARKER):], re.S)
    assert match, "no python block after the marker"
    return match.group(1)


def test_the_docs_plugin_is_complete_and_short():
    code = docs_plugin_code()
    assert len(code.splitlines()) < 60
    compile(code, "sinks.py", "exec")


@pytest.fixture(scope="module")
def sinks_installed(tmp_path_factory):
    """The docs' plugin module, pip-installed as a distribution with a `rooflinekit` entry point."""
    src = write_distribution(tmp_path_factory.mktemp("src"), "rooflinekit-sinks", "rooflinekit_sinks",
                             {"sinks": docs_plugin_code()}, {"sinks": "rooflinekit_sinks.sinks"})
    env = pip_install_site(src, tmp_path_factory.mktemp("site"))
    model = tmp_path_factory.mktemp("model") / "sink_model.py"
    model.write_text(SINK_MODEL)
    return env, model


def _rooflinekit(env, *args):
    return warm_python.run(["-m", "rooflinekit", *map(str, args)], capture_output=True, text=True,
                           env=env, cwd=ROOT)


@pytest.mark.slow
def test_the_docs_plugin_profiles_its_architecture(sinks_installed, tmp_path):
    env, model = sinks_installed
    listed = _rooflinekit(env, "plugins", "-f", "json")
    assert listed.returncode == 0, listed.stderr
    info = {p["name"]: p for p in json.loads(listed.stdout)["plugins"]}
    assert info["sinks"]["distribution"] == "rooflinekit-sinks" and info["sinks"]["provides"] == ["sink"]

    batch, context, h, hkv, d, sinks, recent = 2, 200, 8, 2, 32, 4, 60
    kept = sinks + recent
    per_token = hkv * 2 * d * 2  # K and V, bf16
    for tp in (1, 2):
        out = tmp_path / f"tp{tp}.json"
        run = _rooflinekit(env, "profile", model, "--phase", "decode", "--batch", batch, "--context", context,
                           "--tp", tp, "-f", "json", "-o", out)
        assert run.returncode == 0, run.stderr
        (row,) = json.loads(out.read_text())["attention"]
        assert (row["arch"], row["plugin"]) == ("sink", "sinks")
        assert row["extra"] == {"sink_tokens": sinks, "recent_tokens": recent}
        assert (row["num_heads"], row["num_kv_heads"]) == (h // tp, hkv // tp)
        assert row["cache_bytes_per_token"] == per_token // tp
        assert row["kv_bytes_min"] == batch * min(context, kept) * per_token // tp
        assert row["flops_model"] == 4 * batch * (h // tp) * min(context, kept) * d
