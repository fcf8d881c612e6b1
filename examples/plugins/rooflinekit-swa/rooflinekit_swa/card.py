"""Workload loader: a ``*.swa.toml`` model card (the dimensions of a Mistral-style model) as a model.

    # mistral-7b-v0.1.swa.toml
    name = "Mistral-7B-v0.1"
    layers = 32
    sliding_window = 4096
    ...

Every key but ``name`` and ``source`` is an argument of ``rooflinekit_swa.model.build_model`` (or
``make_inputs``); ``-O KEY=VALUE`` on the command line overrides the card (``-O layers=2``).
"""

from __future__ import annotations

import functools
import inspect
import sys

from rooflinekit.plugin import ModelSource, UserError, hookimpl

from rooflinekit_swa import model

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - rooflinekit depends on tomli for Python 3.10
    import tomli as tomllib

SUFFIX = ".swa.toml"
PROVIDES = ("model cards (*.swa.toml)",)
INFO_KEYS = ("name", "source")


def _params(fn) -> set[str]:
    return set(inspect.signature(fn).parameters) - {"batch", "context", "phase"}


def load_card(path: str) -> ModelSource:
    try:
        with open(path, "rb") as fh:
            card = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise UserError(f"cannot read model card {path}: {exc.strerror or exc}") from None
    dims = {k: v for k, v in card.items() if k not in INFO_KEYS}
    build_keys, input_keys = _params(model.build_model), _params(model.make_inputs)
    unknown = sorted(set(dims) - build_keys - input_keys)
    if unknown:
        raise UserError(f"{path}: unknown key {', '.join(unknown)} (known: "
                        f"{', '.join(sorted(build_keys | input_keys))})")
    notes = [f"model card {path}" + (f" ({card['source']})" if "source" in card else "")]
    return ModelSource(
        name=str(card.get("name", path)),
        path=str(path),
        build_model=functools.partial(model.build_model, **{k: v for k, v in dims.items() if k in build_keys}),
        make_inputs=functools.partial(model.make_inputs, **{k: v for k, v in dims.items() if k in input_keys}),
        kind="swa model card",
        notes=notes,
    )


@hookimpl(tryfirst=True)
def rooflinekit_workload_loader(path, options):
    if str(path).endswith(SUFFIX):
        return load_card(str(path))
    return None
