"""Built-in plugin: load a transformers config.json (the `hf` extra) as a model source.

The hook implementations are here; the loader and its helpers (`loader`, `config_file`, `cache`,
`kv`, `layers`, `meta`, `tasks`) are modules of this package that import nothing from rooflinekit,
and are imported when the hook answers (they import torch).
"""

from __future__ import annotations

import functools
from pathlib import Path

from rooflinekit.plugin import (
    ModelSource,
    UserError,
    cached,
    hookimpl,
    limit,
    module_tree,
    older_than_tested,
    over,
    skipped_layers,
    under,
)

PROVIDES = ("transformers configs",)
#: `hf:MODEL_TYPE`: transformers' default config of that model type (`hf:llama`).
SPEC = "hf:"


def _is_config(path: str) -> bool:
    if str(path).startswith(SPEC):
        return True
    p = Path(path)
    return p.suffix == ".json" or (p.is_dir() and (p / "config.json").is_file())


def _user_error(exc: Exception, file: str, doing: str) -> UserError:
    """One line for a loader failure: the loader's own message when it names the file, a size bound
    with its limit, else the file, what was being done and transformers' reason."""
    from .config_file import ConfigError, OptionError, SizeError, reason

    if isinstance(exc, SizeError):
        return over(exc.bound, str(exc))
    if isinstance(exc, ConfigError):
        return UserError(str(exc))
    if isinstance(exc, OptionError):
        return UserError(f"{file}: {exc}")
    if isinstance(exc, ImportError):
        return UserError(str(exc))
    return UserError(f"{file}: {doing}: {reason(exc)}")


def _guarded(fn, file: str, doing: str):
    """`fn` with transformers' exceptions turned into one line naming the config file."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError:
            raise
        except Exception as exc:
            raise _user_error(exc, file, doing) from None

    return call


def skipped_cache_layers(model) -> frozenset[int]:
    """The `layer_idx` of the attention modules inside the layers a sweep's design capture stands in
    for (rooflinekit.plugin.skipped_layers): nothing reads their cache, so the loader leaves it empty.
    Handed to each source the hook loads (`load_hf_config(empty_layers=...)`), asked at each step."""
    skipped = skipped_layers()
    if not skipped:
        return frozenset()
    return cached(model, ("skipped_cache_layers", skipped), lambda: _layer_indices(model, skipped))


def _layer_indices(model, skipped: frozenset[str]) -> frozenset[int]:
    inside, outside = set(), set()
    for path, module in module_tree(model):
        idx = getattr(module, "layer_idx", None)
        if isinstance(idx, int):
            (inside if under(path, skipped) else outside).add(idx)
    return frozenset(inside - outside)


@hookimpl(trylast=True)
def rooflinekit_workload_loader(path, options):
    if not _is_config(path):
        return None
    too_old = older_than_tested("transformers")
    if too_old:
        raise UserError(f"{path}: {too_old}")
    try:
        from .loader import load_hf_config
    except ImportError as exc:  # pragma: no cover - the module itself imports nothing optional
        raise UserError(str(exc)) from None
    try:
        source = load_hf_config(str(path), options, max_layers=int(limit("layers")),
                                max_parameters=limit("parameters"), empty_layers=skipped_cache_layers)
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from None
    except UserError:
        raise
    except Exception as exc:  # transformers raises ValueError, TypeError, KeyError, its own classes...
        raise _user_error(exc, str(path), "cannot load this transformers config") from None
    return ModelSource(
        name=source.name,
        path=source.path,
        build_model=_guarded(source.build_model, source.path, "transformers cannot build a model from this config"),
        make_inputs=_guarded(source.make_inputs, source.path, "transformers cannot make this config's inputs"),
        kind=f"transformers config ({source.model_type}: {source.class_name})",
        notes=source.notes,  # the same list: building may add to it (an attention fallback)
        options_handled=True,
    )


@hookimpl
def rooflinekit_module_model(module, path, workload, deployment):
    """BLT's entropy patcher, whose patch boundaries are values of its own output (patcher.py)."""
    if type(module).__name__ not in ("BltPatcher",):
        return None
    from .patcher import patcher_model

    return patcher_model(module)
