"""Built-in plugin: load a transformers config.json (the `hf` extra) as a model source."""

from __future__ import annotations

from pathlib import Path

from rooflinekit.plugin import UserError, hookimpl
from rooflinekit.stages.workload import ModelSource

PROVIDES = ("transformers configs",)


def _is_config(path: str) -> bool:
    p = Path(path)
    return p.suffix == ".json" or (p.is_dir() and (p / "config.json").is_file())


@hookimpl(trylast=True)
def rooflinekit_workload_loader(path, options):
    if not _is_config(path):
        return None
    try:
        from rooflinekit_plugins.hf_loader import load_hf_config
    except ImportError as exc:  # pragma: no cover - the module itself imports nothing optional
        raise UserError(str(exc)) from None
    try:
        source = load_hf_config(str(path), options)
    except ImportError as exc:
        raise UserError(str(exc)) from None
    except (ValueError, FileNotFoundError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: {exc}") from None
    return ModelSource(
        name=source.name,
        path=source.path,
        build_model=source.build_model,
        make_inputs=source.make_inputs,
        kind=f"transformers config ({source.model_type})",
        notes=source.notes,  # the same list: building may add to it (an attention fallback)
        options_handled=True,
    )
