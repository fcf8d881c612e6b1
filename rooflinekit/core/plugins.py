"""Load plugins from the `rooflinekit` entry-point group and call their hooks through pluggy.

Hooks are called by pluggy itself (`pm.hook.<name>(**kwargs)`), so firstresult, tryfirst/trylast,
`wrapper=True` and old-style `hookwrapper=True` implementations and `pm.add_hookcall_monitoring`
behave as pluggy documents. What rooflinekit adds is done per implementation, once, when a plugin
is registered: pluggy is given a guarded stand-in for the plugin (`Guarded`), whose hook
implementations are the plugin's wrapped in a guard (`PluginHost._guard`) that keeps its prints off
stdout, names a failure in one warning and answers None instead (pluggy then asks the next
implementation), and checks the answer against the hook's rule (`rooflinekit.core.answers`): an
unusable answer is named and treated as None likewise. Nothing of pluggy's own objects is changed.

Who answered: pluggy returns answers without their plugins. Rather than tag the answers (wrappers
would then see tags instead of the real values), the host keeps a record per hook call, opened and
closed by its own `add_hookcall_monitoring`: each guard notes (answer, plugin) as it answers, and
each wrapper, which pluggy drives unchanged, notes any answer it puts in place of the ones it
received. `first` and `each` name each answer of pluggy's result by identity from that
record, so a wrapper sees, and may replace, the real answers, and a replaced answer is credited to
the wrapper that made it (and checked against the hook's rule as well).
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import inspect
import os
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pluggy

from rooflinekit.core import answers, hookspecs
from rooflinekit.core.errors import UserError
from rooflinekit.core.signals import interrupt_word
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.core.version import __version__

GROUP = "rooflinekit"
#: rooflinekit 0.1's module paths, removed in 0.3 after warning through 0.2: where their names live.
REMOVED_01 = {
    "rooflinekit.hookspecs": "import hookimpl from rooflinekit.plugin",
    "rooflinekit.specs": "import the hook types from rooflinekit.plugin",
    "rooflinekit.workload": "import ModelSource and Workload from rooflinekit.plugin",
    "rooflinekit.modelled": "import ModuleModel, emit and suppressed from rooflinekit.plugin",
    "rooflinekit.errors": "import UserError from rooflinekit.plugin",
    "rooflinekit.plugins": "import PluginHost from rooflinekit.plugin",
    "rooflinekit.pipeline": "use rooflinekit.profile (the Python API)",
    "rooflinekit_plugins.attention": "each architecture is its own built-in: rooflinekit_plugins.mha, .gqa, .mla",
}
#: rooflinekit's own pyproject.toml, whose `[project.entry-points.rooflinekit]` table is the one
#: list of the built-in plugins (read when running from a source tree without installed metadata).
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def builtin_entry_points(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """The built-in plugins, entry-point name -> target ("module" or "module:attr"), as
    pyproject.toml declares them; empty when the file is not rooflinekit's or is absent (an
    installed wheel, whose metadata carries the same table)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with open(pyproject, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    project = data.get("project", {})
    if project.get("name") != "rooflinekit":
        return {}
    return dict(project.get("entry-points", {}).get(GROUP, {}))


@dataclass
class PluginInfo:
    name: str
    module: str
    distribution: str
    version: str
    hooks: list[str] = field(default_factory=list)
    #: What the plugin provides, as it declares in a module attribute `PROVIDES` (a string or a
    #: tuple of strings: the architectures it recognises, "hardware entries", "model files", ...).
    provides: list[str] = field(default_factory=list)


class _Call:
    """The record of one hook call: who gave which answer (see the module's docstring)."""

    __slots__ = ("hook", "firstresult", "answers", "replaced", "named")

    def __init__(self, hook: str, firstresult: bool) -> None:
        self.hook = hook
        self.firstresult = firstresult
        #: (answer, plugin) of each plain implementation's usable answer, in call order.
        self.answers: list[tuple[object, str]] = []
        #: (answer, wrapper's plugin) of each answer a wrapper put in place of those it received.
        self.replaced: list[tuple[object, str]] = []
        #: (answer, plugin) of each usable answer of the call's result, in its order.
        self.named: list[tuple[object, str]] = []

    def knows(self, answer: object) -> bool:
        return any(a is answer for a, _ in self.answers) or any(a is answer for a, _ in self.replaced)


class Guarded:
    """A plugin as pluggy registers it: each of its hook implementations guarded (an attribute of
    this object, carrying the plugin's own marker), its other attributes read from the plugin."""

    def __init__(self, plugin: object, implementations: dict[str, Callable]) -> None:
        self.__dict__.update(implementations)
        self.__dict__["plugin"] = plugin

    def __getattr__(self, name: str):  # not a hook implementation: the plugin's own (PROVIDES, ...)
        return getattr(self.__dict__["plugin"], name)

    def __repr__(self) -> str:
        return f"<guarded {self.__dict__['plugin']!r}>"


def plugin_of(registered: object) -> object:
    """The plugin a registered object stands for (a Guarded stand-in's plugin)."""
    return registered.__dict__["plugin"] if isinstance(registered, Guarded) else registered


class _Manager(pluggy.PluginManager):
    """pluggy's manager, registering a guarded stand-in for each plugin (through the host's
    `register` or `pm.register` directly) under the plugin's own name."""

    def __init__(self, host: PluginHost) -> None:
        super().__init__(GROUP)
        self._rooflinekit_host = host

    def register(self, plugin: object, name: str | None = None) -> str | None:
        if plugin is None or isinstance(plugin, Guarded):
            return super().register(plugin, name)
        name = name or self.get_canonical_name(plugin)
        if any(plugin_of(p) is plugin for p in self.get_plugins()):
            raise ValueError(f"Plugin already registered under a different name: {name}={plugin}")
        return super().register(self._rooflinekit_host._guarded(plugin, name), name)

    def unregister(self, plugin: object | None = None, name: str | None = None) -> object | None:
        if plugin is not None and not isinstance(plugin, Guarded):  # the plugin, not its stand-in
            plugin = next((p for p in self.get_plugins() if plugin_of(p) is plugin), plugin)
        return super().unregister(plugin, name)


class PluginHost:
    """A pluggy manager plus the record of what loaded, what failed, and who answered."""

    def __init__(self, load_entry_points: bool = True, trace: bool | None = None,
                 disabled: set[str] | None = None) -> None:
        self.pm = _Manager(self)
        self.pm.add_hookspecs(hookspecs)
        self.infos: list[PluginInfo] = []
        self.warnings: list[str] = []
        self.trace = bool(os.environ.get("ROOFLINEKIT_TRACE_HOOKS")) if trace is None else trace
        #: Entry points not loaded: ROOFLINEKIT_DISABLE_PLUGINS=name,name (see what runs without them).
        self.disabled = _disabled_from_env() if disabled is None else set(disabled)
        self._warned: set[str] = set()
        self._local = threading.local()  # the records of the hook calls in progress, per thread
        self._firstresult: dict[str, bool] = {}
        self.pm.add_hookcall_monitoring(self._before, self._after)
        if load_entry_points:
            with stdout_to_stderr():  # what a plugin prints at import stays off stdout's report
                self.load_entry_points()

    def warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.warnings.append(message)

    # -- loading ------------------------------------------------------------------------------

    def load_entry_points(self) -> None:
        seen_builtin = False
        for ep in sorted(md.entry_points(group=GROUP), key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else "?"
            if dist_name == "rooflinekit":
                seen_builtin = True
            self._load(ep, dist_name, dist.version if dist is not None else "?")
        if not seen_builtin:  # a source tree without installed metadata: pyproject.toml's table
            for name, target in sorted(builtin_entry_points().items()):
                self._load(md.EntryPoint(name, target, GROUP), "rooflinekit (source tree)", __version__)

    def _load(self, ep: md.EntryPoint, distribution: str, version: str) -> None:
        if self.pm.has_plugin(ep.name) or ep.name in self.disabled:
            return
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:  # sys.exit() at import time too
            moved = REMOVED_01.get(getattr(exc, "name", None) or "") if isinstance(exc, ImportError) else None
            self.warn(f"plugin '{ep.name}' ({distribution}) failed to load: {type(exc).__name__}: {exc}"
                      + (f" ({exc.name} was rooflinekit 0.1's, removed in 0.3: {moved})" if moved else ""))
            return
        self.register(plugin, ep.name, distribution, version)

    def register(self, plugin, name: str, distribution: str = "", version: str = "") -> None:
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:  # pluggy validates hook signatures here
            self.warn(f"plugin '{name}' ({distribution}) rejected: {type(exc).__name__}: {exc}")
            return
        callers = self.pm.get_hookcallers(self.pm.get_plugin(name)) or []
        hooks = sorted(h.name for h in callers)
        unknown = sorted(h.name for h in callers if not h.has_spec())
        if unknown:  # a typo, or a hook of another rooflinekit release: it would never be called
            self.warn(f"plugin '{name}' ({distribution}) implements unknown hook {', '.join(unknown)}: "
                      "never called (the hook reference: rooflinekit/core/hookspecs.py, docs/plugins.md)")
        self.infos.append(
            PluginInfo(name, getattr(plugin, "__name__", type(plugin).__name__), distribution, version, hooks,
                       provides_of(plugin))
        )

    # -- one guard per implementation, at registration ----------------------------------------

    def _guarded(self, plugin: object, name: str) -> Guarded:
        """`plugin`'s stand-in: each hook implementation (pluggy's own discovery finds them) wrapped
        as its kind asks, with the plugin's marker, so pluggy reads the same options."""
        marker = GROUP + "_impl"
        implementations = {}
        for attr in dir(plugin):
            opts = self.pm.parse_hookimpl_opts(plugin, attr)
            if opts is None:
                continue
            function = getattr(plugin, attr)
            hook = opts.get("specname") or attr
            if opts.get("wrapper"):
                guarded = self._track_wrapper(function, name, hook)
            elif opts.get("hookwrapper"):
                guarded = self._track_hookwrapper(function, name, hook)
            else:
                guarded = self._guard(function, name, hook)
            setattr(guarded, marker, getattr(function, marker))
            implementations[attr] = guarded
        return Guarded(plugin, implementations)

    def _guard(self, function: Callable, plugin: str, hook: str) -> Callable:
        """`function` as pluggy calls it: stdout to stderr, a failure or an unusable answer named
        and answered as None, a usable answer noted in the call's record."""

        try:  # the parameter names, to give an answer's check the arguments it answered
            names = tuple(inspect.signature(function).parameters)
        except (TypeError, ValueError):  # a callable without a signature: its keyword arguments only
            names = ()

        @functools.wraps(function)
        def guarded(*args, **kwargs):
            try:
                with stdout_to_stderr():  # what a plugin prints stays off stdout's report
                    answer = function(*args, **kwargs)
            except UserError:
                raise  # a plugin's deliberate message to the user (e.g. a bad model file)
            except KeyboardInterrupt as exc:  # raised by the plugin, or a signal while it ran: say where
                # the same word every command uses for the signal ("terminated" after SIGTERM)
                raise type(exc)(f"{interrupt_word()} in plugin '{plugin}' ({hook})") from None
            except SystemExit as exc:  # not the plugin's to end the run silently: name it
                raise UserError(f"plugin '{plugin}' called sys.exit({exc.code!r}) in {hook}") from None
            except Exception as exc:
                self.warn(f"plugin '{plugin}' failed in {hook}: {type(exc).__name__}: {exc}")
                return None
            if answer is None:
                return None
            call = self._current(hook)
            reason = answers.problem(hook, answer, None, {**dict(zip(names, args, strict=False)), **kwargs})
            if reason is not None:
                self.warn(answers.warning(plugin, hook, answer, reason))
                return None
            if call is not None:
                call.answers.append((answer, plugin))
            return answer

        return guarded

    def _track_wrapper(self, function: Callable, plugin: str, hook: str) -> Callable:
        """A `wrapper=True` implementation, driven by pluggy as written; an answer it returns in
        place of those it received is noted as its own."""

        @functools.wraps(function)
        def tracked(*args, **kwargs):
            result = yield from function(*args, **kwargs)
            self._note_replaced(hook, plugin, result)
            return result

        return tracked

    def _track_hookwrapper(self, function: Callable, plugin: str, hook: str) -> Callable:
        """An old-style `hookwrapper=True` implementation, likewise: what it forces on the
        outcome is noted as its own."""

        @functools.wraps(function)
        def tracked(*args, **kwargs):
            teardown = function(*args, **kwargs)
            try:
                try:
                    first = next(teardown)
                except StopIteration:
                    return  # it did not yield: pluggy names the mistake
                outcome = yield first
                try:
                    teardown.send(outcome)
                except StopIteration:
                    if outcome.exception is None:
                        self._note_replaced(hook, plugin, outcome.get_result())
                    return
                yield  # a second yield: pluggy names the mistake
            finally:
                teardown.close()

        return tracked

    # -- the record of each hook call (pluggy's monitoring) -----------------------------------

    def _stack(self) -> list[_Call]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _current(self, hook: str) -> _Call | None:
        stack = self._stack()
        return stack[-1] if stack and stack[-1].hook == hook else None

    def _is_firstresult(self, hook: str) -> bool:
        if hook not in self._firstresult:
            caller = getattr(self.pm.hook, hook, None)
            spec = caller.spec if caller is not None else None
            self._firstresult[hook] = bool(spec is not None and spec.opts.get("firstresult"))
        return self._firstresult[hook]

    def _before(self, hook: str, impls, kwargs) -> None:
        self._stack().append(_Call(hook, self._is_firstresult(hook)))

    def _after(self, outcome: pluggy.Result, hook: str, impls, kwargs) -> None:
        call = self._stack().pop()
        self._local.last = call
        if outcome.exception is None:
            call.named = self._named(call, outcome.get_result())
        if self.trace:
            self._trace(call, outcome)

    def _note_replaced(self, hook: str, plugin: str, result: object) -> None:
        call = self._current(hook)
        if call is None or result is None:
            return
        for answer in self._items(call, result):
            if answer is not None and not call.knows(answer):
                call.replaced.append((answer, plugin))

    @staticmethod
    def _items(call: _Call, result: object) -> list:
        if result is None:
            return []
        if call.firstresult or not isinstance(result, (list, tuple)):
            return [result]
        return list(result)

    def _named(self, call: _Call, result: object) -> list[tuple[object, str]]:
        """(answer, plugin) for each answer of pluggy's result: a plain implementation's by
        identity, else the wrapper's that put it there (checked against the hook's rule)."""
        named, used = [], set()
        for answer in self._items(call, result):
            if answer is None:
                continue
            index = next((i for i, (a, _) in enumerate(call.answers) if a is answer and i not in used), None)
            if index is not None:
                used.add(index)
                named.append((answer, call.answers[index][1]))
                continue
            wrapper = next((p for a, p in call.replaced if a is answer), "?")
            reason = answers.problem(call.hook, answer)
            if reason is not None:
                self.warn(answers.warning(wrapper, call.hook, answer, reason))
                continue
            named.append((answer, wrapper))
        return named

    def _say(self, text: str) -> None:
        print(f"[rooflinekit hooks] {text}", file=sys.stderr)

    def _trace(self, call: _Call, outcome: pluggy.Result) -> None:
        if outcome.exception is not None:
            self._say(f"{call.hook}: stopped by {type(outcome.exception).__name__}: {outcome.exception}")
        elif call.firstresult:
            self._say(f"{call.hook}: answered by '{call.named[0][1]}'" if call.named
                      else f"{call.hook}: no plugin answered")
        elif call.named:
            for _, plugin in call.named:
                self._say(f"{call.hook}: '{plugin}' contributed")
        else:
            self._say(f"{call.hook}: no plugin contributed")

    # -- calling hooks ------------------------------------------------------------------------

    @staticmethod
    def implemented(caller: pluggy.HookCaller) -> bool:
        """Whether any plugin implements the hook of `caller` (asking it of every module is then skipped)."""
        return bool(caller.get_hookimpls())

    def _call(self, caller: pluggy.HookCaller, kwargs: dict) -> list[tuple[object, str]]:
        with stdout_to_stderr():  # wrappers' prints too stay off stdout's report
            caller(**kwargs)
        return self._local.last.named

    @property
    def hook(self) -> pluggy.HookRelay:
        """pluggy's hook relay: `host.hook.rooflinekit_attention_cost` is that hook's caller."""
        return self.pm.hook

    def first(self, caller: pluggy.HookCaller, **kwargs) -> tuple[object, str | None]:
        """(answer, plugin name) of the first usable answer of `caller` (`host.hook.rooflinekit_...`)
        in pluggy's call order, or (None, None).

        On a firstresult hook pluggy stops at that answer; on another hook every implementation
        runs and the first answer is taken. Failures and unusable answers (rooflinekit.core.answers)
        are named and skipped.
        """
        named = self._call(caller, kwargs)
        return named[0] if named else (None, None)

    def each(self, caller: pluggy.HookCaller, **kwargs) -> list[tuple[object, str]]:
        """Every usable (answer, plugin name) of `caller`, in pluggy's call order (on a firstresult
        hook, the one answer pluggy stops at), skipping failures and unusable answers."""
        return self._call(caller, kwargs)

    def call_first(self, hook_name: str, expect: type | tuple | None = None, **kwargs):
        """Deprecated since 0.3 (kept for plugins that ask other hooks): `first(host.hook.NAME, ...)`.
        `expect` is ignored: every hook's answers are checked by its rule."""
        _deprecated_call("call_first", "first")
        return self.first(getattr(self.pm.hook, hook_name), **kwargs)

    def call_all(self, hook_name: str, expect: type | tuple | None = None, **kwargs) -> list[tuple[object, str]]:
        """Deprecated since 0.3: `each(host.hook.NAME, ...)`. `expect` is ignored."""
        _deprecated_call("call_all", "each")
        return self.each(getattr(self.pm.hook, hook_name), **kwargs)


def _deprecated_call(old: str, new: str) -> None:
    warnings.warn(f"PluginHost.{old}(NAME, ...) is deprecated since rooflinekit 0.3: call "
                  f"host.{new}(host.hook.NAME, ...)", DeprecationWarning, stacklevel=3)


def provides_of(plugin: object) -> list[str]:
    """A plugin's `PROVIDES` declaration as a list of strings (a single string is one item)."""
    declared = getattr(plugin, "PROVIDES", None)
    if declared is None:
        return []
    if isinstance(declared, str):
        return [declared]
    try:
        return [str(item) for item in declared]
    except TypeError:
        return [str(declared)]


def _disabled_from_env() -> set[str]:
    return {n.strip() for n in os.environ.get("ROOFLINEKIT_DISABLE_PLUGINS", "").split(",") if n.strip()}


_HOST: PluginHost | None = None


def get_host() -> PluginHost:
    """The process-wide plugin host, loaded on first use."""
    global _HOST
    if _HOST is None:
        _HOST = PluginHost()
    return _HOST


def reset_host(host: PluginHost | None = None) -> None:
    """Replace the process-wide host (tests, or after installing a plugin at run time)."""
    global _HOST
    _HOST = host
