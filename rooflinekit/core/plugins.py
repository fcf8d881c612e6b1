"""Load plugins from the `rooflinekit` entry-point group and call their hooks safely."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import sys
from dataclasses import dataclass, field

import pluggy

from rooflinekit.core import hookspecs
from rooflinekit.core.errors import UserError
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.core.version import __version__

GROUP = "rooflinekit"
#: Built-ins, registered directly only when the package's own entry points are not installed
#: (running from a source tree without `pip install`).
BUILTINS = {
    "mha": "rooflinekit_plugins.mha",
    "gqa": "rooflinekit_plugins.gqa",
    "mla": "rooflinekit_plugins.mla",
    "hardware_db": "rooflinekit_plugins.hardware",
    "modelfile": "rooflinekit_plugins.modelfile",
    "hf": "rooflinekit_plugins.hf",
    "moe": "rooflinekit_plugins.moe",
    "parallel": "rooflinekit_plugins.parallel",
    "sliding_window": "rooflinekit_plugins.sliding_window",
    "ssm": "rooflinekit_plugins.ssm",
    "linear_attention": "rooflinekit_plugins.linear_attention",
    "rwkv": "rooflinekit_plugins.rwkv",
    "xlstm": "rooflinekit_plugins.xlstm",
    "fixed_state": "rooflinekit_plugins.fixed_state",
    "encoder_decoder": "rooflinekit_plugins.encoder_decoder",
}


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


class PluginHost:
    """A pluggy manager plus the record of what loaded, what failed, and who answered."""

    def __init__(self, load_entry_points: bool = True, trace: bool | None = None,
                 disabled: set[str] | None = None) -> None:
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.infos: list[PluginInfo] = []
        self.warnings: list[str] = []
        self.trace = bool(os.environ.get("ROOFLINEKIT_TRACE_HOOKS")) if trace is None else trace
        #: Entry points not loaded: ROOFLINEKIT_DISABLE_PLUGINS=name,name (see what runs without them).
        self.disabled = _disabled_from_env() if disabled is None else set(disabled)
        self._warned: set[str] = set()
        if load_entry_points:
            with stdout_to_stderr():  # what a plugin prints at import stays off stdout's report
                self.load_entry_points()

    def warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.warnings.append(message)

    def load_entry_points(self) -> None:
        seen_builtin = False
        for ep in sorted(md.entry_points(group=GROUP), key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else "?"
            if dist_name == "rooflinekit":
                seen_builtin = True
            if self.pm.has_plugin(ep.name) or ep.name in self.disabled:
                continue
            try:
                plugin = ep.load()
            except (Exception, SystemExit) as exc:  # sys.exit() at import time too
                self.warn(f"plugin '{ep.name}' ({dist_name}) failed to load: {type(exc).__name__}: {exc}")
                continue
            self.register(plugin, ep.name, dist_name, dist.version if dist is not None else "?")
        if not seen_builtin:

            for name, module_name in BUILTINS.items():
                if self.pm.has_plugin(name) or name in self.disabled:
                    continue
                try:
                    plugin = importlib.import_module(module_name)
                except Exception as exc:
                    self.warn(f"built-in plugin '{name}' failed to load: {type(exc).__name__}: {exc}")
                    continue
                self.register(plugin, name, "rooflinekit (source tree)", __version__)

    def register(self, plugin, name: str, distribution: str = "", version: str = "") -> None:
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:  # pluggy validates hook signatures here
            self.warn(f"plugin '{name}' ({distribution}) rejected: {type(exc).__name__}: {exc}")
            return
        callers = self.pm.get_hookcallers(plugin) or []
        hooks = sorted(h.name for h in callers)
        unknown = sorted(h.name for h in callers if not h.has_spec())
        if unknown:  # a typo, or a hook of another rooflinekit release: it would never be called
            self.warn(f"plugin '{name}' ({distribution}) implements unknown hook {', '.join(unknown)}: "
                      "never called (see rooflinekit/hookspecs.py for the hook names)")
        self.infos.append(
            PluginInfo(name, getattr(plugin, "__name__", type(plugin).__name__), distribution, version, hooks,
                       provides_of(plugin))
        )

    def implemented(self, hook_name: str) -> bool:
        """Whether any plugin implements `hook_name` (asking it of every module is then skipped)."""
        return bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    def _impls(self, hook_name: str):
        # pluggy calls implementations last-registered first (tryfirst/trylast respected).
        return list(reversed(getattr(self.pm.hook, hook_name).get_hookimpls()))

    def _say(self, text: str) -> None:
        if self.trace:
            print(f"[rooflinekit hooks] {text}", file=sys.stderr)

    def _answers(self, hook_name: str, expect: type | tuple | None, kwargs: dict):
        """Yield (answer, plugin name) for each implementation's usable answer, in call order.

        Lazy, so that `call_first` calls no plugin after the first answer. A plugin that raises
        (other than a deliberate UserError) or answers the wrong type is warned about and skipped.
        """
        for impl in self._impls(hook_name):
            try:
                with stdout_to_stderr():  # what a plugin prints stays off stdout's report
                    result = impl.function(*[kwargs[a] for a in impl.argnames])
            except UserError:
                raise  # a plugin's deliberate message to the user (e.g. a bad model file)
            except KeyboardInterrupt:  # raised by the plugin, or Ctrl-C while it ran: say where
                raise KeyboardInterrupt(f"interrupted in plugin '{impl.plugin_name}' ({hook_name})") from None
            except SystemExit as exc:  # not the plugin's to end the run silently: name it
                raise UserError(f"plugin '{impl.plugin_name}' called sys.exit({exc.code!r}) in {hook_name}") from None
            except Exception as exc:
                self.warn(f"plugin '{impl.plugin_name}' failed in {hook_name}: {type(exc).__name__}: {exc}")
                continue
            if result is None:
                continue
            if expect is not None and not isinstance(result, expect):
                names = expect.__name__ if isinstance(expect, type) else "/".join(t.__name__ for t in expect)
                self.warn(
                    f"plugin '{impl.plugin_name}' returned {type(result).__name__} from {hook_name}, "
                    f"expected {names}; ignored"
                )
                continue
            yield result, impl.plugin_name

    def call_first(self, hook_name: str, expect: type | tuple | None = None, **kwargs):
        """(answer, plugin name) from the first plugin that answers non-None, skipping failures."""
        for result, name in self._answers(hook_name, expect, kwargs):
            self._say(f"{hook_name}: answered by '{name}'")
            return result, name
        self._say(f"{hook_name}: no plugin answered")
        return None, None

    def call_all(self, hook_name: str, expect: type | tuple | None = None, **kwargs) -> list[tuple[object, str]]:
        """Every non-None (answer, plugin name), skipping failures and wrong types."""
        results = []
        for result, name in self._answers(hook_name, expect, kwargs):
            self._say(f"{hook_name}: '{name}' contributed")
            results.append((result, name))
        return results


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
