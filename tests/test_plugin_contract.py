"""The plugin contract: `rooflinekit.plugin` names everything a hook takes, returns or needs.

- every name it exports imports;
- a plugin written against it alone receives the request (workload and deployment) in its hooks,
  and its lever is priced by `advise` like a built-in one;
- the built-in MLA lever is a `Transform`;
- the hook examples of docs/plugins.md register against the hook specs.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import types
from dataclasses import replace
from pathlib import Path

import pytest

import rooflinekit.plugin
from rooflinekit.analyses.advise import advise
from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.plugins import PluginHost
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, ROOT

#: A plugin module as a third party writes it: `rooflinekit.plugin` its only rooflinekit import.
CONTRACT_PLUGIN = '''
from dataclasses import replace

from rooflinekit.plugin import Deployment, LeverProposal, Workload, hookimpl

SEEN = []


@hookimpl
def rooflinekit_module_model(module, path, workload, deployment):
    SEEN.append((path, workload, deployment))
    assert isinstance(workload, Workload) and isinstance(deployment, Deployment)
    return None


@hookimpl
def rooflinekit_advise_levers(workload, deployment, report, source):
    return [LeverProposal("contract fp8 KV", deployment=replace(deployment, kv_dtype="fp8"),
                          assumption="the KV cache stored in fp8")]
'''


def _module(name: str, code: str, namespace: dict | None = None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(namespace or {})
    exec(compile(code, f"<{name}>", "exec"), module.__dict__)
    return module


def test_every_exported_name_imports():
    names = rooflinekit.plugin.__all__
    assert len(names) == len(set(names))
    for name in names:
        namespace: dict = {}
        exec(f"from rooflinekit.plugin import {name}", namespace)
        assert namespace[name] is getattr(rooflinekit.plugin, name), name
    assert set(names) <= set(dir(rooflinekit.plugin))
    with pytest.raises(AttributeError):
        rooflinekit.plugin.not_a_name  # noqa: B018


@pytest.mark.parametrize(("module", "old", "new"), [
    ("rooflinekit.plugin", "resolve", "resolve_tp_plan"),
    ("rooflinekit.plugin", "structural_plan", "structural_tp_plan"),
    ("rooflinekit.analyses.profile", "profile", "run_profile"),
    ("rooflinekit.stages.workload", "load_source", "load_source"),
    ("rooflinekit.stages.workload", "load_model_file", "load_model_file"),
])
def test_names_renamed_in_0_3_still_import_with_a_warning(module, old, new):
    """A name renamed or moved in 0.3 imports as before until 0.4, with a DeprecationWarning naming
    the new one; the new one is what it returns."""
    namespace: dict = {}
    with pytest.warns(DeprecationWarning, match=new):
        exec(f"from {module} import {old}", namespace)
    assert namespace[old].__name__ == new
    assert old not in getattr(importlib.import_module(module), "__all__", ())


def test_the_hook_types_are_exported():
    """What the hooks take and return, by the hook specs' annotations, is named by rooflinekit.plugin."""
    exported = set(rooflinekit.plugin.__all__)
    for needed in ("Workload", "Deployment", "ModelSource", "ModuleModel", "Report", "LeverProposal",
                   "Transform", "Counted", "TransformContext", "CaptureResult", "OpRecord", "AttentionSite",
                   "PluginHost", "emit", "emit_collective", "suppressed", "attention_workload",
                   "dtype_itemsize", "dtype_key", "resolve_tp_plan", "structural_tp_plan"):
        assert needed in exported, needed
    hookspecs = ast.parse((ROOT / "rooflinekit" / "core" / "hookspecs.py").read_text())
    annotated = {n.id for f in hookspecs.body if isinstance(f, ast.FunctionDef)
                 for a in ast.walk(f) if isinstance(a, ast.arg) and a.annotation is not None
                 for n in ast.walk(a.annotation) if isinstance(n, ast.Name) and n.id[0].isupper()}
    assert annotated - exported <= {"Any", "Callable", "Iterable", "Mapping", "Path"}, annotated - exported


def test_a_plugin_written_against_rooflinekit_plugin_gets_the_request_and_its_lever_priced():
    tree = ast.parse(CONTRACT_PLUGIN)
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m for m in imported if m.startswith("rooflinekit")} == {"rooflinekit.plugin"}
    plugin = _module("contract_plugin", CONTRACT_PLUGIN)
    host = PluginHost(load_entry_points=True)
    host.register(plugin, "contract", "tests", "0")
    assert not host.warnings, host.warnings

    workload = rooflinekit.plugin.Workload("decode", 2, 64, options=(("layers", 1),))
    deployment = rooflinekit.plugin.Deployment("H800", tp=2)
    source = load_source(str(EXAMPLES / "llama_gqa.py"), {"layers": 1}, host)
    profiled = run_profile(source, workload, deployment, host=host)
    assert profiled.report is not None and not host.warnings, host.warnings
    assert plugin.SEEN, "rooflinekit_module_model was never asked"
    for _path, seen_workload, seen_deployment in plugin.SEEN:
        assert (seen_workload.phase, seen_workload.batch, seen_workload.context) == ("decode", 2, 64)
        assert seen_deployment.tp == 2 and seen_deployment.hardware == "H800"

    advice = advise(source, workload, deployment, host=host)
    (lever,) = [lv for lv in advice.levers if lv.lever == "contract fp8 KV"]
    assert lever.source == "contract" and lever.changes == {"kv_dtype": "fp8"}
    (builtin,) = [lv for lv in advice.levers if lv.lever == "fp8 KV cache"]
    assert lever.predicted_step_s == builtin.predicted_step_s  # the same change, priced the same


def test_the_mla_lever_is_a_transform():
    from rooflinekit_plugins.mla_absorb import AbsorbMLA

    absorbed = AbsorbMLA()
    assert isinstance(absorbed, rooflinekit.plugin.Transform) and absorbed.name == "absorbed MLA"
    with pytest.raises(dataclasses.FrozenInstanceError):
        absorbed.name = "other"  # type: ignore[misc]


def _docs_hook_examples() -> list[str]:
    text = (ROOT / "docs" / "plugins.md").read_text()
    return [block for block in re.findall(r"```python\n(.*?)```", text, re.S) if "@hookimpl" in block]


@pytest.mark.parametrize("index", range(len(_docs_hook_examples())))
def test_the_docs_hook_examples_register(index):
    """Each hook example of docs/plugins.md, given the names of rooflinekit.plugin (a snippet may
    leave out its imports), registers against the hook specs with no warning."""
    import torch

    code = _docs_hook_examples()[index]
    namespace = {name: getattr(rooflinekit.plugin, name) for name in rooflinekit.plugin.__all__}
    namespace.update(dataclasses=dataclasses, replace=replace, Path=Path, torch=torch, __file__=__file__)
    plugin = _module(f"docs_example_{index}", code, namespace)
    host = PluginHost(load_entry_points=False)
    host.register(plugin, f"docs_example_{index}", "docs", "0")
    assert not host.warnings, (host.warnings, code)
    assert host.infos and host.infos[-1].hooks, code


def _emitted(calls) -> list:
    """The records `calls` (emits of rooflinekit.plugin) add to a capture in progress."""
    from rooflinekit.stages.capture.forward import active
    from rooflinekit.stages.capture.recorder import Recorder
    from rooflinekit.stages.formulas import FormulaBook

    recorder = Recorder(FormulaBook(), {})
    with active(recorder):
        calls()
    return [dataclasses.asdict(r) for r in recorder.ops]


def test_emit_takes_its_fields_as_keywords_until_0_4():
    """emit and emit_collective in the form before 0.3 (counts, module, dtype and assumption as
    keywords) add the same records as with OpCounts and Provenance, and warn."""
    rp = rooflinekit.plugin
    at = rp.Provenance(module="m.experts", dtype="fp8", assumption="uniform")

    def new():
        rp.emit("moe.up", rp.OpCounts(flops=8, bytes_read=4, bytes_written=2, param_bytes=1), at=at,
                shapes="2x2", experts={"tokens": 2, "k": 1, "experts": 4, "share": 1})
        rp.emit_collective("all_to_all", group_size=4, message_bytes=64, at=at, copies=2, experts=8)

    def old():
        rp.emit("moe.up", flops=8, bytes_read=4, bytes_written=2, param_bytes=1, module="m.experts", dtype="fp8",
                assumption="uniform", shapes="2x2", experts={"tokens": 2, "k": 1, "experts": 4, "share": 1})
        rp.emit_collective("all_to_all", group_size=4, message_bytes=64, module="m.experts", dtype="fp8",
                           assumption="uniform", copies=2, experts=8)

    with pytest.warns(DeprecationWarning, match=r"deprecated since rooflinekit 0\.3") as caught:
        before = _emitted(old)
    assert len(caught) == 2 and all(w.filename == __file__ for w in caught)
    assert before == _emitted(new) and len(before) == 2
    assert rp.emit("x", rp.OpCounts(1, 1, 1)) is None  # outside a capture
    with pytest.raises(TypeError, match="unexpected keyword argument 'flop'"):
        rp.emit("x", flop=1, bytes_read=1, bytes_written=1)
    with pytest.raises(TypeError, match="both"):
        rp.emit("x", rp.OpCounts(1, 1, 1), flops=1)
