"""Plugins: a distribution installed with pip is discovered; broken plugins are named, not fatal."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import pip_install_site, write_distribution

from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.plugins import PluginHost
from tests import warm_python
from tests.conftest import EXAMPLES, ROOT

PLUGIN = textwrap.dedent(
    '''
    from rooflinekit.core.hookspecs import hookimpl
    from rooflinekit.core.specs import AttentionSpec

    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(module, path):
        if type(module).__name__ == "GQAAttention":
            return AttentionSpec(arch="gqa", num_heads=module.num_heads, num_kv_heads=module.num_kv_heads,
                                 head_dim=module.head_dim, v_head_dim=module.head_dim,
                                 notes=("answered by rk_testplugin",))
    '''
)
BROKEN = "raise RuntimeError('this plugin is broken on purpose')\n"
WRONG = textwrap.dedent(
    '''
    from rooflinekit.core.hookspecs import hookimpl

    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(module, path):
        return "not a spec"
    '''
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build and pip-install a tiny third-party distribution into a private site folder."""
    src = write_distribution(tmp_path_factory.mktemp("src"), "rk-testplugin", "rk_testplugin",
                             {"good": PLUGIN, "broken": BROKEN, "wrong": WRONG},
                             {"rk_good": "rk_testplugin.good", "rk_broken": "rk_testplugin.broken",
                              "rk_wrong": "rk_testplugin.wrong"}, version="0.3.1")
    return pip_install_site(src, tmp_path_factory.mktemp("site"))


def _run(env, *args):
    return warm_python.run(["-m", "rooflinekit", *args], capture_output=True, text=True, env=env, cwd=ROOT)


@pytest.mark.slow
def test_third_party_plugin_is_listed_and_answers(installed, tmp_path):
    listed = _run(installed, "plugins", "-f", "json")
    assert listed.returncode == 0, listed.stderr
    info = {p["name"]: p for p in json.loads(listed.stdout)["plugins"]}
    assert info["rk_good"]["distribution"] == "rk-testplugin"
    assert info["rk_good"]["version"] == "0.3.1"
    assert "rooflinekit_attention_spec" in info["rk_good"]["hooks"]
    # the built-ins come through the same entry-point group, one plugin per attention architecture
    assert {"mha", "gqa", "mla"} <= set(info)
    assert info["gqa"]["provides"] == ["gqa", "mqa"] and info["rk_good"]["provides"] == []

    out = tmp_path / "r.json"
    run = _run(installed, "profile", str(EXAMPLES / "llama_gqa.py"), "-O", "layers=1", "--context", "256",
               "-f", "json", "-o", str(out))
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    row = report["attention"][0]
    # rk_wrong answers first (wrong type, skipped with a warning), then rk_good answers.
    assert row["plugin"] == "rk_good"
    assert "answered by rk_testplugin" in row["notes"]
    warnings = " ".join(report["warnings"])
    assert "rk_broken" in warnings and "broken on purpose" in warnings
    assert "rk_wrong" in warnings and "expected AttentionSpec" in warnings
    # each problem is one warning line on stderr, and the run completed
    assert run.stderr.count("rk_broken") == 1


class _Raises:
    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(self, module, path):
        raise ValueError("boom")


def test_raising_plugin_is_skipped_and_named():
    host = PluginHost()
    host.register(_Raises(), "raiser", "tests", "0")
    import torch

    mha = torch.nn.MultiheadAttention(64, 4)
    spec, plugin = host.first(host.hook.rooflinekit_attention_spec, module=mha, path="x", call=None)
    assert plugin == "mha" and spec.num_heads == 4
    assert any("raiser" in w and "boom" in w for w in host.warnings)


class _Typo:
    @hookimpl
    def rooflinekit_atention_spec(self, module, path):  # misspelt: would never be called
        return None

    @hookimpl
    def rooflinekit_hardware_dirs(self):
        return []


class _BadArgs:
    @hookimpl
    def rooflinekit_attention_spec(self, module, path, extra):  # `extra` is not in the spec
        return None


class _Collectors:
    @hookimpl(tryfirst=True)
    def rooflinekit_hardware_dirs(self):
        raise OSError("no such folder")

    @hookimpl(tryfirst=True)
    def rooflinekit_op_formulas(self):
        return ["not", "a", "dict"]


def test_unknown_hook_and_rejected_plugin_are_named_once():
    host = PluginHost()
    host.register(_Typo(), "typo", "tests", "0")
    host.register(_BadArgs(), "badargs", "tests", "0")
    typo = [w for w in host.warnings if "'typo'" in w]
    assert typo == ["plugin 'typo' (tests) implements unknown hook rooflinekit_atention_spec: never called "
                    "(the hook reference: rooflinekit/core/hookspecs.py, docs/plugins.md)"]
    assert "typo" in {i.name for i in host.infos}  # its real hooks still work
    bad = [w for w in host.warnings if "'badargs'" in w]
    assert len(bad) == 1 and "rejected" in bad[0] and "badargs" not in {i.name for i in host.infos}


def test_failing_collecting_hooks_are_named_and_the_rest_is_collected():
    from rooflinekit.stages.formulas import formula_book
    from rooflinekit.stages.hardware import hardware_db

    host = PluginHost()
    host.register(_Collectors(), "collectors", "tests", "0")
    db = hardware_db(host)
    assert db.get("H800").name == "H800 SXM5"  # the built-in folder still loaded
    book = formula_book(host)
    assert book.lookup("aten.mm") is not None
    assert any("'collectors' failed in rooflinekit_hardware_dirs: OSError: no such folder" in w
               for w in host.warnings)
    assert any("'collectors' returned list from rooflinekit_op_formulas" in w for w in host.warnings)


def test_disabled_plugins_are_not_loaded(monkeypatch):
    monkeypatch.setenv("ROOFLINEKIT_DISABLE_PLUGINS", "mha, modelfile")
    host = PluginHost()
    names = {i.name for i in host.infos}
    assert "hardware_db" in names and not names & {"mha", "modelfile"}
    assert "gqa" in names  # the other architectures still load
    import torch

    spec, _ = host.first(host.hook.rooflinekit_attention_spec, module=torch.nn.MultiheadAttention(64, 4), path="x",
                              call=None)
    assert spec is None and not host.warnings


def test_plugins_command_shows_what_each_plugin_provides(invoke):
    listed = invoke("plugins", "-f", "json")
    assert listed.exit_code == 0, listed.output
    provides = {p["name"]: p["provides"] for p in json.loads(listed.stdout)["plugins"]}
    assert provides["mha"] == ["mha"] and provides["gqa"] == ["gqa", "mqa"] and provides["mla"] == ["mla"]
    assert provides["hardware_db"] == ["hardware entries", "efficiency sources: published, a file"]
    assert provides["modelfile"] == ["model files"] and provides["hf"] == ["transformers configs"]
    table = invoke("plugins")
    assert table.exit_code == 0, table.output
    header = table.stdout.splitlines()[0].split()
    assert header == ["plugin", "distribution", "provides", "hooks"]
    gqa_line = next(line for line in table.stdout.splitlines() if line.startswith("gqa "))
    assert "gqa, mqa" in gqa_line
    assert max(len(line) for line in table.stdout.splitlines()) <= 100  # fits a terminal


class _Provides:
    PROVIDES = "one thing"


def test_provides_is_read_from_the_plugin():
    host = PluginHost(load_entry_points=False)
    host.register(_Provides(), "single", "tests", "0")
    host.register(_Typo(), "none", "tests", "0")
    info = {i.name: i.provides for i in host.infos}
    assert info == {"single": ["one thing"], "none": []}


def _formulas(flops_per_row):
    class Formulas:
        @hookimpl
        def rooflinekit_op_formulas(self):
            return {"aten._fake_op": lambda a, out=None, **kw: flops_per_row * a.shape[0]}

    return Formulas()


def test_two_formulas_for_one_op_warn_once_naming_both_and_the_first_asked_wins():
    import torch

    from rooflinekit.stages.formulas import formula_book

    host = PluginHost()
    host.register(_formulas(3), "early", "tests", "0")
    host.register(_formulas(5), "late", "tests", "0")  # registered last: asked first
    book = formula_book(host)
    rows = 7
    assert book.lookup("aten._fake_op")(torch.empty(rows, 2)) == 5 * rows
    conflicts = [w for w in host.warnings if "aten._fake_op" in w]
    assert conflicts == ["plugins 'late' and 'early' both give a FLOP formula for aten._fake_op: "
                         "'late''s is used (asked first)"]
    formula_book(host)  # asked again (a sweep): still one warning
    assert len([w for w in host.warnings if "aten._fake_op" in w]) == 1
