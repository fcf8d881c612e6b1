"""The model source: load the user's model (a model file, or a loader plugin's source), build it on
the target device, make phase inputs (the request's checks: rooflinekit.stages.request_checks).

The model-file contract
-----------------------
A model file defines two functions:

    build_model(**options) -> torch.nn.Module
    make_inputs(batch, context, phase, **options) -> tuple | dict

`make_inputs` returns the forward's positional args (a tuple) or keyword args (a dict). Both are
called with the target device (meta by default) and the default dtype already in effect, so they
allocate nothing on meta. Each receives the `--option KEY=VALUE` pairs its signature accepts.

`context` is the number of key/value positions each new token attends to:
- prefill: `context` new tokens per sequence, attending causally among themselves;
- decode: one new token per sequence, with a KV cache whose `context` slots hold context-1 earlier
  tokens plus the new token's own K/V (written into the last slot), so it attends `context` positions.

Multi-token decode (`--q-len N`, speculative decoding's or MTP's verify step): `make_inputs` is also
given `q_len=N` when its signature names `q_len` (a file whose make_inputs does not is refused for
N > 1). The cache's `context` slots then hold context-N earlier tokens plus the N new tokens' K/V
(the last N slots); new token i (0-based) attends the context-N+i+1 positions up to itself (causal
among the new tokens, the mask aligned to the bottom right).

Quantized weights and caches (the format settings of rooflinekit.core.settings) and fp8 activations
(`dtype="fp8"`) are not run: the model runs in bf16 and its capture is transformed
(rooflinekit.transforms.quantize).
"""

from __future__ import annotations

import importlib.util
import inspect
import linecache
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from rooflinekit.core.errors import ModelError, UserError, WorkloadError
from rooflinekit.core.limits import limit, over
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.request import ModelSource, Workload
from rooflinekit.core.swap import setting, swapped
from rooflinekit.stages.request_checks import torch_dtype
from rooflinekit.stages.restated import restated

#: The built-in plugins that load models (the entry points named in pyproject.toml).
LOADERS = frozenset({"modelfile", "hf"})


def _builtin_plugins_file() -> str | None:
    """The built-in plugins' package file, found without importing it (a frame of theirs, such as
    the transformers loader's dispatch mode answering meta reads, is not the model's)."""
    try:
        spec = importlib.util.find_spec("rooflinekit_plugins")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin else None


#: Folders of code that is not the model's: torch, rooflinekit itself (its capture runs every op)
#: and its built-in plugins.
_LIBRARY_DIRS = tuple(os.path.realpath(os.path.dirname(f)) + os.sep
                      for f in (torch.__file__, os.path.dirname(__file__), _builtin_plugins_file()) if f)


def _user_frame(exc: BaseException, path: str) -> str:
    """'model.py:12: ValueError: boom' from the deepest frame in the user's file; for a model that
    is not one file (a transformers config), the deepest frame of the model's own code rather than
    torch's or rooflinekit's (a meta kernel raising is not where the model did it)."""
    frames = traceback.extract_tb(exc.__traceback__)
    target = os.path.realpath(path)
    mine = [f for f in frames if os.path.realpath(f.filename) == target]
    if not mine:
        mine = [f for f in frames if not os.path.realpath(f.filename).startswith(_LIBRARY_DIRS)]
    frame = mine[-1] if mine else (frames[-1] if frames else None)
    where = f"{Path(frame.filename).name}:{frame.lineno}: " if frame else ""
    code = f" (in `{frame.line.strip()}`)" if frame and frame.line else ""
    return f"{where}{type(exc).__name__}: {first_line(exc)}{code}"


def first_line(exc: BaseException) -> str:
    """An exception's message up to its first line break: torch's C++ errors append a frame dump
    ("Exception raised from ... frame #0: ...") that is no use on one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0] + (" ..." if len(lines) > 1 else "")


def exit_error(exc: SystemExit, path: str, stage: str) -> ModelError:
    """A model that calls sys.exit() (raises SystemExit) while `stage` runs: one line naming the
    model file (and the line that exited, when it is in that file) instead of a silent exit."""
    frames = traceback.extract_tb(exc.__traceback__)
    target = os.path.realpath(path)
    mine = [f for f in frames if os.path.realpath(f.filename) == target]
    at = f" at {Path(path).name}:{mine[-1].lineno}" if mine else ""
    return ModelError(f"{stage} exited with sys.exit({exc.code!r}){at}: the model ({path}) must raise an "
                      "exception, not end the run")


def load_model_file(path: str) -> ModelSource:
    """Import a user's model file and check it follows the contract."""
    file = Path(path)
    if not file.exists():
        raise ModelError(f"model file not found: {path}")
    if file.is_dir():
        raise ModelError(f"{path} is a folder: give a model .py file or a config .json")
    name = f"rooflinekit_user_model_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ModelError(f"cannot import {path}: give a Python file (.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # The user's folder is theirs: no __pycache__ written beside their model file.
    with swapped(sys, "dont_write_bytecode", True):
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise ModelError(f"syntax error in {path}:{exc.lineno}: {exc.msg}") from None
        except SystemExit as exc:
            raise exit_error(exc, str(file), "importing the model file") from None
        except Exception as exc:
            raise ModelError(f"importing {path} failed: {_user_frame(exc, str(file))}") from exc
        finally:
            linecache.checkcache(str(file))
    missing = [f for f in ("build_model", "make_inputs") if not callable(getattr(module, f, None))]
    if missing:
        raise ModelError(
            f"{path} does not define {' and '.join(missing)}(): a model file needs "
            "build_model() -> nn.Module and make_inputs(batch, context, phase) (see `rooflinekit profile --help`)"
        )
    return ModelSource(
        name=file.stem, path=str(file), build_model=module.build_model, make_inputs=module.make_inputs
    )


def _accepted(fn: Callable, options: dict[str, object]) -> dict[str, object]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(options)
    return {k: v for k, v in options.items() if k in params}


def _without_restated(source: ModelSource, options: dict[str, object]) -> dict[str, object]:
    """`options` less those neither build_model nor make_inputs takes that a plugin states on the
    captured counts instead (rooflinekit.stages.restated: `-O mode=absorbed` on naive MLA code)."""
    used = set(_accepted(source.build_model, options)) | set(_accepted(source.make_inputs, options))
    untaken = {k: v for k, v in options.items() if k not in used}
    if not untaken:
        return options
    gone = restated(untaken, get_host())
    return {k: v for k, v in options.items() if k not in gone}


def check_options(source: ModelSource, options: dict[str, object]) -> None:
    """An option that neither function accepts is a typo: say so rather than ignore it."""
    used = set(_accepted(source.build_model, options)) | set(_accepted(source.make_inputs, options))
    unknown = sorted(set(options) - used)
    if unknown:
        raise ModelError(
            f"option {', '.join(unknown)} is not accepted by build_model() or make_inputs() in {source.path}"
        )


def multi_token_note(workload: Workload) -> str | None:
    """What a multi-token decode step is taken to be, for the report's notes (None for one token)."""
    n, c = workload.decode_q_len, workload.context
    if workload.phase != "decode" or n <= 1:
        return None
    return (f"multi-token decode: {n} new tokens per sequence (a speculative or MTP verify step), the cache's "
            f"{c} slots holding {c - n} earlier tokens and the new tokens' K/V; new token i attends the "
            f"{c - n + 1} + i positions up to itself (causal among the new tokens): {n * c - n * (n - 1) // 2} "
            "query-key pairs per sequence and head in model FLOPs")


def q_len_argument(source: ModelSource, workload: Workload) -> dict[str, int]:
    """`{"q_len": N}` for a decode step when make_inputs() names a `q_len` parameter; a multi-token
    decode step (N > 1) of a make_inputs() that does not is refused, rather than run at one token."""
    if workload.phase != "decode":
        return {}
    try:
        params = inspect.signature(source.make_inputs).parameters
    except (TypeError, ValueError):
        params = {}
    named = "q_len" in params and params["q_len"].kind is not inspect.Parameter.VAR_KEYWORD
    if named:
        return {"q_len": workload.decode_q_len}
    if workload.decode_q_len > 1:
        raise WorkloadError(f"--q-len {workload.decode_q_len}: make_inputs() of {source.path} takes no q_len "
                            "argument; give it one (make_inputs(batch, context, phase, q_len=1)) that makes "
                            "q_len new tokens per sequence in decode")
    return {}


@dataclass
class Built:
    """A model on its device and the inputs for one phase."""

    model: torch.nn.Module
    inputs: object


@contextmanager
def in_effect(workload: Workload) -> Iterator[None]:
    """The workload's device and default dtype, for building and for the forward alike."""
    with setting(torch.get_default_dtype, torch.set_default_dtype, torch_dtype(workload)), torch.device(workload.device):
        yield


_INIT_METHODS = {"normal_", "uniform_", "trunc_normal_", "fill_", "zero_", "random_", "exponential_",
                 "bernoulli_", "cauchy_", "log_normal_", "geometric_", "copy_"}


class _SkipMetaInit(TorchFunctionMode):
    """While building on meta, in-place initialisers are skipped: there is no data to fill.

    Besides saving work, this avoids the one-off import cost of the Python meta kernels of
    random initialisers (seconds on first use).
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in _INIT_METHODS:
            target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


@contextmanager
def module_budget(path: str) -> Iterator[None]:
    """While the model is built: at most `limit("modules")` module registrations, so that an absurd
    size (`-O layers=100000`) fails in seconds with one line instead of building for minutes."""
    budget = int(limit("modules"))
    count = 0

    def count_module(module, name, submodule):
        nonlocal count
        count += 1
        if count > budget:
            raise over("modules", f"build_model() of {path} registered more than {budget:,} modules: analyse "
                                  "a model this large at fewer layers (e.g. -O layers=N), the per-layer "
                                  "figures are the same")

    handle = torch.nn.modules.module.register_module_module_registration_hook(count_module)
    try:
        yield
    finally:
        handle.remove()


#: torch's RNG seed while build_model() and make_inputs() run.
BUILD_SEED = 0


def build(source: ModelSource, workload: Workload) -> Built:
    """Build the model and inputs with the workload's device and default dtype in effect."""
    options = dict(workload.options)
    if source.options_handled:
        options = {}
    options = _without_restated(source, options)
    check_options(source, options)
    skip = _SkipMetaInit() if workload.device == "meta" else nullcontext()
    # Seeded, so that runs repeat where values matter (data-dependent MoE routing on cpu/cuda);
    # the caller's CPU RNG state is restored afterwards.
    with in_effect(workload), skip, torch.random.fork_rng(devices=[]):
        torch.manual_seed(BUILD_SEED)
        with _user_call(source, "build_model()"), module_budget(source.path):
            model = source.build_model(**_accepted(source.build_model, options))
        if not isinstance(model, torch.nn.Module):
            raise ModelError(
                f"build_model() returned {type(model).__name__}, expected a torch.nn.Module"
            )
        if model.training:  # eval mode, once: a sweep's model built once stays in it
            model.eval()
        inputs = _make_inputs(source, workload, options)
    return Built(model=model, inputs=inputs)


def inputs_for(source: ModelSource, workload: Workload) -> object:
    """make_inputs() of `workload` for a model already built (each segment of a mixed step), with
    the workload's device, dtype and seed in effect as `build` has them."""
    options = {} if source.options_handled else dict(workload.options)
    skip = _SkipMetaInit() if workload.device == "meta" else nullcontext()
    with in_effect(workload), skip, torch.random.fork_rng(devices=[]):
        torch.manual_seed(BUILD_SEED)
        return _make_inputs(source, workload, options)


@contextmanager
def _user_call(source: ModelSource, what: str) -> Iterator[None]:
    """A call into the model file (`what`: "build_model()", "make_inputs()"): its failure as one line
    naming the file's frame, its exit as one line; rooflinekit's own errors pass as they are."""
    try:
        yield
    except UserError:
        raise
    except SystemExit as exc:
        raise exit_error(exc, source.path, what) from None
    except Exception as exc:
        raise ModelError(f"{what} failed: {_user_frame(exc, source.path)}") from exc


def _make_inputs(source: ModelSource, workload: Workload, options: dict[str, object]) -> object:
    """make_inputs(batch, context, phase) with the options and q_len it accepts, checked."""
    given = _accepted(source.make_inputs, options)
    q_len = q_len_argument(source, workload)
    if q_len and "q_len" in given:
        raise WorkloadError("option q_len: give a decode step's new tokens per sequence with --q-len N")
    with _user_call(source, "make_inputs()"):
        inputs = source.make_inputs(workload.batch, workload.context, workload.phase, **given, **q_len)
    if not isinstance(inputs, (tuple, dict, list)):
        raise ModelError(
            f"make_inputs() returned {type(inputs).__name__}, expected a tuple (or list) of positional "
            "args or a dict of keyword args"
        )
    return inputs


#: A model spec a loader plugin answers rather than a file: `SCHEME:NAME` (`hf:llama`), the scheme
#: two or more letters (so that a Windows drive, `C:\\model.py`, stays a path).
MODEL_SPEC = re.compile(r"^[A-Za-z][A-Za-z0-9_+.-]+:(?![/\\])")


def load_source(path: str, options: dict, host: PluginHost | None = None) -> ModelSource:
    """The ModelSource a loader plugin makes of `path`: a model file, a config, or a model spec
    such as `hf:MODEL_TYPE` (transformers' default config of that type)."""
    host = host or get_host()
    if not Path(path).exists() and not MODEL_SPEC.match(str(path)):
        raise ModelError(f"model file not found: {path}")
    before = len(host.warnings)
    # options a plugin states on the captured counts are not the loader's to check (the model's
    # build_model/make_inputs still get them where they take them: `build`)
    options = {k: v for k, v in options.items() if k not in restated(options, host)}
    source, plugin = host.first(host.hook.rooflinekit_workload_loader, path=path, options=options)
    if source is None:
        # a loader that failed or answered the wrong type is why: name it rather than the file types
        blamed = [w for w in host.warnings[before:] if "rooflinekit_workload_loader" in w]
        if blamed:
            raise ModelError(f"cannot load {path}: {blamed[0].removesuffix('; ignored')}")
        off = sorted(host.disabled & LOADERS)
        raise ModelError(
            f"don't know how to load {path}: give a model .py file (build_model/make_inputs), a "
            "transformers config .json or hf:MODEL_TYPE"
            + (f" (the loader plugin(s) {', '.join(off)} are disabled by ROOFLINEKIT_DISABLE_PLUGINS)" if off else "")
        )
    bad = [f for f in ("build_model", "make_inputs") if not callable(getattr(source, f, None))]
    if bad:
        raise ModelError(f"cannot load {path}: plugin '{plugin}' answered rooflinekit_workload_loader with a "
                         f"ModelSource whose {' and '.join(bad)} {'is' if len(bad) == 1 else 'are'} not callable")
    return source
