"""The plugin host calls hooks through pluggy: wrappers, ordering and monitoring behave as pluggy
documents, every answer is still named by its plugin, failures and unusable answers are named once
and skipped, the built-ins are listed once (pyproject.toml), and plugins written to the 0.1 guide
still load."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata as md
import re
import sys
import textwrap

import pytest
import torch

from rooflinekit.core import answers
from rooflinekit.core import plugins as core_plugins
from rooflinekit.core.errors import UserError
from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.plugins import REMOVED_01, PluginHost, builtin_entry_points
from rooflinekit.core.specs import AttentionSpec
from rooflinekit.stages import formulas

EMBED, HEADS = 64, 4  # nn.MultiheadAttention(64, 4): the built-in `mha` answers, head_dim 64 / 4


def _mha() -> torch.nn.Module:
    return torch.nn.MultiheadAttention(EMBED, HEADS)


def _spec(host: PluginHost, module: torch.nn.Module | None = None):
    return host.first(host.hook.rooflinekit_attention_spec, module=module or _mha(),
                           path="x", call=None)


# -- wrappers ---------------------------------------------------------------------------------------


class _NewStyle:
    def __init__(self, change: bool) -> None:
        self.change, self.seen = change, []

    @hookimpl(wrapper=True)
    def rooflinekit_attention_spec(self, module, path, call):
        answer = yield
        self.seen.append(answer)
        if self.change and answer is not None:
            return dataclasses.replace(answer, notes=(*answer.notes, "wrapped"))
        return answer


class _OldStyle:
    def __init__(self) -> None:
        self.seen = []

    @hookimpl(hookwrapper=True)
    def rooflinekit_attention_spec(self, module, path, call):
        outcome = yield
        spec = outcome.get_result()
        self.seen.append(spec)
        outcome.force_result(dataclasses.replace(spec, window=128))


def test_a_wrapper_sees_the_builtins_real_answer_and_may_change_it():
    host = PluginHost()
    wrapper = _NewStyle(change=True)
    host.register(wrapper, "new_wrapper", "tests", "0")
    spec, plugin = _spec(host)
    (seen,) = wrapper.seen
    assert type(seen) is AttentionSpec  # the real value, not a tagged one
    assert (seen.arch, seen.num_heads, seen.num_kv_heads, seen.head_dim) == ("mha", HEADS, HEADS, EMBED // HEADS)
    assert spec.notes[-1] == "wrapped" and spec.head_dim == EMBED // HEADS
    assert plugin == "new_wrapper"  # the answer it put in place is credited to it
    assert host.warnings == []


def test_a_wrapper_that_passes_the_answer_through_leaves_it_to_its_plugin():
    host = PluginHost()
    wrapper = _NewStyle(change=False)
    host.register(wrapper, "watcher", "tests", "0")
    spec, plugin = _spec(host)
    assert plugin == "mha" and spec is wrapper.seen[0]


def test_an_old_style_hookwrapper_sees_and_forces_the_answer():
    host = PluginHost()
    wrapper = _OldStyle()
    host.register(wrapper, "old_wrapper", "tests", "0")
    spec, plugin = _spec(host)
    assert wrapper.seen[0].arch == "mha" and wrapper.seen[0].window is None
    assert spec.window == 128 and spec.num_heads == HEADS and plugin == "old_wrapper"


class _WrapsBadly:
    @hookimpl(wrapper=True)
    def rooflinekit_attention_spec(self, module, path, call):
        yield
        return "not a spec"


def test_a_wrappers_unusable_answer_is_named_and_dropped():
    host = PluginHost()
    host.register(_WrapsBadly(), "bad_wrapper", "tests", "0")
    assert _spec(host) == (None, None)
    assert host.warnings == ["plugin 'bad_wrapper' returned str from rooflinekit_attention_spec, "
                             "expected AttentionSpec; ignored"]


# -- ordering and monitoring ------------------------------------------------------------------------


def _answering(arch: str, **opts):
    class Answers:
        @hookimpl(**opts)
        def rooflinekit_attention_spec(self, module, path):
            return AttentionSpec(arch=arch, num_heads=1, num_kv_heads=1, head_dim=8, v_head_dim=8)

    return Answers()


def test_tryfirst_goes_before_a_later_registered_plain_implementation():
    host = PluginHost()
    host.register(_answering("early", tryfirst=True), "early", "tests", "0")
    host.register(_answering("late"), "late", "tests", "0")  # plain, registered last: asked first of the plain
    spec, plugin = _spec(host)
    assert (spec.arch, plugin) == ("early", "early")
    host.pm.unregister(name="early")
    assert _spec(host)[1] == "late"


def _sites(paths: list[str], calls: list[str], **opts):
    class Sites:
        @hookimpl(**opts)
        def rooflinekit_mixer_sites(self, model):
            calls.append(paths[0])
            return paths

    return Sites()


def test_each_keeps_pluggys_order_and_first_takes_its_first_answer():
    host = PluginHost(load_entry_points=False)
    calls: list[str] = []
    host.register(_sites(["a.first"], calls, tryfirst=True), "first", "tests", "0")
    host.register(_sites(["b.plain"], calls), "plain", "tests", "0")
    host.register(_sites(["c.last"], calls, trylast=True), "last", "tests", "0")
    model = torch.nn.Linear(2, 2)
    assert host.each(host.hook.rooflinekit_mixer_sites, model=model) == [
        (["a.first"], "first"), (["b.plain"], "plain"), (["c.last"], "last")]
    calls.clear()
    # not a firstresult hook: every implementation runs, the first answer in call order is taken
    assert host.first(host.hook.rooflinekit_mixer_sites, model=model) == (["a.first"], "first")
    assert calls == ["a.first", "b.plain", "c.last"]


def test_hookcall_monitoring_sees_every_call():
    host = PluginHost()
    seen = []
    host.pm.add_hookcall_monitoring(lambda name, impls, kwargs: seen.append(("before", name)),
                                    lambda outcome, name, impls, kwargs: seen.append(("after", name,
                                                                                      outcome.get_result())))
    spec, _ = _spec(host)
    assert seen == [("before", "rooflinekit_attention_spec"), ("after", "rooflinekit_attention_spec", spec)]
    host.each(host.hook.rooflinekit_hardware_dirs)
    assert seen[-1][:2] == ("after", "rooflinekit_hardware_dirs") and seen[-1][2]  # the built-in folder


def test_tracing_names_who_answered_on_every_call(capsys):
    host = PluginHost(trace=True)
    _spec(host)
    host.pm.hook.rooflinekit_attention_spec(module=torch.nn.Linear(2, 2), path="y", call=None)  # directly
    host.each(host.hook.rooflinekit_mixer_sites, model=torch.nn.Linear(2, 2))  # the mixer built-ins answer []
    traced = PluginHost(load_entry_points=False, trace=True)
    traced.each(traced.hook.rooflinekit_mixer_sites, model=None)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[:2] == ["[rooflinekit hooks] rooflinekit_attention_spec: answered by 'mha'",
                         "[rooflinekit hooks] rooflinekit_attention_spec: no plugin answered"]
    assert "[rooflinekit hooks] rooflinekit_mixer_sites: 'ssm' contributed" in lines[2:-1]
    assert lines[-1] == "[rooflinekit hooks] rooflinekit_mixer_sites: no plugin contributed"
    assert captured.out == ""


# -- failures and unusable answers ------------------------------------------------------------------


class _Raises:
    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(self, module, path, call):
        raise ValueError("boom")


def test_a_raising_implementation_is_named_once_and_the_next_answers():
    host = PluginHost()
    host.register(_Raises(), "raiser", "tests", "0")
    for _ in range(3):  # one warning for the run, however many layers hit it
        spec, plugin = _spec(host)
        assert plugin == "mha" and spec.num_heads == HEADS
    assert [w for w in host.warnings if "raiser" in w] == [
        "plugin 'raiser' failed in rooflinekit_attention_spec: ValueError: boom"]


class _Exits:
    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(self, module, path, call):
        sys.exit(3)


def test_an_exit_in_a_hook_stops_the_run_naming_the_plugin():
    host = PluginHost()
    host.register(_Exits(), "exiter", "tests", "0")
    with pytest.raises(UserError, match=r"plugin 'exiter' called sys.exit\(3\) in rooflinekit_attention_spec"):
        _spec(host)


class _Prints:
    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(self, module, path, call):
        print("chatty plugin")


def test_what_a_hook_prints_goes_to_stderr(capfd):
    host = PluginHost()
    host.register(_Prints(), "chatty", "tests", "0")
    assert _spec(host)[1] == "mha"
    captured = capfd.readouterr()
    assert "chatty plugin" in captured.err and "chatty plugin" not in captured.out


def test_an_answer_of_the_wrong_type_is_named_and_the_next_answers():
    host = PluginHost()
    host.register(_answering_value("not a spec"), "wrong", "tests", "0")
    spec, plugin = _spec(host)
    assert plugin == "mha" and spec.num_heads == HEADS
    assert host.warnings == ["plugin 'wrong' returned str from rooflinekit_attention_spec, expected "
                             "AttentionSpec; ignored"]


def _answering_value(value):
    class Answers:
        @hookimpl(tryfirst=True)
        def rooflinekit_attention_spec(self, module, path):
            return value

    return Answers()


def test_an_answer_its_rule_refuses_is_named_and_the_next_answers(monkeypatch):
    def no_heads(answer):
        return answers.type_problem(answer, AttentionSpec) or ("no heads" if answer.num_heads < 1 else None)

    monkeypatch.setitem(answers.VALIDATORS, "rooflinekit_attention_spec", no_heads)
    host = PluginHost()
    zero = AttentionSpec(arch="zero", num_heads=0, num_kv_heads=0, head_dim=8, v_head_dim=8)
    host.register(_answering_value(zero), "zero", "tests", "0")
    spec, plugin = _spec(host)
    assert plugin == "mha" and spec.num_heads == HEADS
    (warning,) = host.warnings
    assert warning.startswith("plugin 'zero' answered rooflinekit_attention_spec with ")
    assert warning.endswith(": no heads; ignored")


def test_every_rule_is_registered_once_per_hook():
    with pytest.raises(ValueError, match="already has a rule"):
        answers.validator("rooflinekit_attention_spec")(lambda answer: None)
    assert answers.problem("rooflinekit_attention_cost", "x") == "expected AttentionCost"
    assert answers.problem("rooflinekit_attention_window", 4096) is None


# -- register_flops ---------------------------------------------------------------------------------


def test_register_flops_refuses_a_second_formula_unless_overriding(monkeypatch):
    monkeypatch.setattr(formulas, "FLOP_FORMULAS", dict(formulas.FLOP_FORMULAS))

    def first(a, out=None, **kwargs):
        return 1

    def second(a, out=None, **kwargs):
        return 2

    formulas.register_flops("aten._rk_test_op")(first)
    with pytest.raises(ValueError, match=r"aten\._rk_test_op .*already has a FLOP formula.*override=True"):
        formulas.register_flops("aten._rk_test_op")(second)
    assert formulas.FLOP_FORMULAS["aten._rk_test_op"] is first
    with pytest.raises(ValueError, match="aten.mm"):  # a built-in's formula too
        formulas.register_flops("aten.mm")(second)
    formulas.register_flops("aten._rk_test_op", override=True)(second)
    assert formulas.FLOP_FORMULAS["aten._rk_test_op"] is second
    formulas.register_flops("aten._rk_test_op")(second)  # the same formula again is no conflict


# -- built-ins listed once --------------------------------------------------------------------------


def test_the_builtins_read_from_pyproject_are_the_installed_entry_points():
    installed = {ep.name: ep.value for ep in md.entry_points(group="rooflinekit")
                 if ep.dist is not None and ep.dist.metadata["Name"] == "rooflinekit"}
    if not installed:
        pytest.skip("rooflinekit's metadata is not installed (a bare source tree)")
    declared = builtin_entry_points()
    assert declared == installed, "pyproject.toml and the installed metadata differ: pip install -e ."
    assert {"mha", "gqa", "mla", "hardware_db"} <= set(declared)


def test_a_source_tree_without_metadata_registers_pyprojects_builtins(monkeypatch):
    monkeypatch.setattr(core_plugins.md, "entry_points", lambda group: [])
    host = PluginHost()
    assert {i.name for i in host.infos} == set(builtin_entry_points())
    assert {i.distribution for i in host.infos} == {"rooflinekit (source tree)"}
    assert host.warnings == [] and _spec(host)[1] == "mha"


# -- plugins written to the 0.1 plugin guide --------------------------------------------------------

#: docs/plugins.md of rooflinekit 0.1, "A plugin in two files": its imports, as written.
OLD_PLUGIN = textwrap.dedent(
    '''
    from rooflinekit.hookspecs import hookimpl


    @hookimpl(tryfirst=True)
    def rooflinekit_attention_spec(module, path, call):
        return None
    '''
)


@pytest.mark.parametrize("removed", sorted(REMOVED_01))
def test_the_01_module_paths_are_gone(removed):
    sys.modules.pop(removed, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(removed)


def test_a_plugin_written_to_the_01_guide_is_told_where_its_import_lives(tmp_path, monkeypatch):
    (tmp_path / "rk_old_windows.py").write_text(OLD_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rk_old_windows", raising=False)
    host = PluginHost()
    host._load(importlib.metadata.EntryPoint("old_windows", "rk_old_windows", "rooflinekit"), "rk-old", "0.1")
    assert not host.pm.has_plugin("old_windows")
    assert len(host.warnings) == 1
    line = host.warnings[0]
    assert line.startswith("plugin 'old_windows' (rk-old) failed to load: ModuleNotFoundError")
    assert "rooflinekit.hookspecs was rooflinekit 0.1's, removed in 0.3: import hookimpl from rooflinekit.plugin" in line


# -- hooks are called as attributes --------------------------------------------------------------------


def test_no_hook_is_called_by_its_name_as_a_string():
    """Every call site names its hook as an attribute of pluggy's relay (`host.hook.rooflinekit_...`),
    which editors and type checkers follow; nothing reaches pluggy's implementations to rewrite them."""
    from tests.conftest import ROOT

    by_name = re.compile(r"\.(call_first|call_all)\(|getattr\([^)]*\.hook,|\.implemented\(\s*[\"']")
    offenders = []
    for path in [p for d in ("rooflinekit", "plugins", "examples", "benchmarks") for p in (ROOT / d).rglob("*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if by_name.search(line) and not line.lstrip().startswith(("def ", "#", '"""')):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    allowed = {"rooflinekit/core/plugins.py"}  # the deprecated aliases themselves
    assert [o for o in offenders if o.split(":")[0] not in allowed] == []


def test_the_string_named_calls_still_answer_with_a_deprecation_warning():
    host = PluginHost()
    with pytest.warns(DeprecationWarning, match=r"PluginHost\.call_first\(NAME, \.\.\.\) is deprecated since rooflinekit 0\.3"):
        old = host.call_first("rooflinekit_attention_spec", expect=AttentionSpec, module=_mha(), path="x", call=None)
    assert old == host.first(host.hook.rooflinekit_attention_spec, module=_mha(), path="x", call=None)
    model = torch.nn.Linear(2, 2)
    with pytest.warns(DeprecationWarning, match=r"host\.each\(host\.hook\.NAME"):
        assert host.call_all("rooflinekit_mixer_sites", model=model) == host.each(host.hook.rooflinekit_mixer_sites,
                                                                                  model=model)


class _WrongAnswers:
    """Answers of the wrong type to the hooks whose callers once checked the type themselves."""

    @hookimpl(tryfirst=True)
    def rooflinekit_efficiency_source(self, source, hardware):
        return 3

    @hookimpl(tryfirst=True)
    def rooflinekit_workload_loader(self, path, options):
        return "not a ModelSource"

    @hookimpl(tryfirst=True)
    def rooflinekit_module_model(self, module, path, workload):
        return object()


@pytest.mark.parametrize(("hook", "arguments"), [
    ("rooflinekit_efficiency_source", {"source": "mine", "hardware": None}),
    ("rooflinekit_workload_loader", {"path": "x", "options": {}}),
    ("rooflinekit_module_model", {"module": torch.nn.Linear(2, 2), "path": "x", "workload": None, "deployment": None}),
])
def test_answers_the_callers_once_checked_are_checked_by_their_hooks_rule(hook, arguments):
    host = PluginHost(load_entry_points=False)
    host.register(_WrongAnswers(), "wrong")
    assert host.first(getattr(host.hook, hook), **arguments) == (None, None)
    assert any(w.startswith("plugin 'wrong' returned") and hook in w for w in host.warnings), host.warnings


def test_pluggy_registers_guarded_stand_ins_and_keeps_its_own_objects_as_it_made_them():
    """Every implementation pluggy holds is the one it found on the registered stand-in (nothing
    rewrites pluggy's HookImpl), and each stand-in reads the plugin's other attributes."""
    from rooflinekit.core.plugins import Guarded, plugin_of

    host = PluginHost()
    impls = [impl for caller in vars(host.pm.hook).values() if hasattr(caller, "get_hookimpls")
             for impl in caller.get_hookimpls()]
    assert len(impls) > 20
    for impl in impls:
        assert isinstance(impl.plugin, Guarded)
        assert any(impl.function is f for f in vars(impl.plugin).values()), impl.plugin_name
    mla = host.pm.get_plugin("mla")
    assert plugin_of(mla).__name__ == "rooflinekit_plugins.mla" and mla.PROVIDES == plugin_of(mla).PROVIDES
    assert host.pm.unregister(plugin_of(mla)) is mla and not host.pm.has_plugin("mla")
