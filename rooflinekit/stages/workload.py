"""Workloads: load the user's model file, build the model on the target device, make phase inputs.

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
from rooflinekit.core.request import (
    MIXED,
    PHASES,
    Deployment,
    ModelSource,
    Workload,
    deployment_settings,
)
from rooflinekit.stages.mixed import validate_mixed
from rooflinekit.stages.restated import restated

DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
}
#: Activation dtypes that are modelled, not run: the model runs in the dtype given here and the
#: capture is transformed (rooflinekit.transforms.quantize: fp8 products at the fp8 peak).
MODELLED_DTYPES = {"fp8": torch.bfloat16}
#: The most tokens per sequence a multi-token decode step verifies.
MAX_Q_LEN = 1 << 12


def torch_dtype(workload: Workload) -> torch.dtype:
    """The dtype the model runs in (an fp8 workload runs in bf16; its capture is transformed)."""
    return MODELLED_DTYPES.get(workload.dtype) or DTYPES[workload.dtype]


#: The largest batch and context a workload takes: far past any real serving batch or context
#: window, and small enough that shapes such as batch x heads x context x head_dim stay inside
#: torch's 64-bit sizes (beyond them torch fails with a C++ frame dump).
MAX_BATCH = 1 << 20
MAX_CONTEXT = 1 << 24


def validate(phase: str, batch: int, context: int, dtype: str, device: str) -> None:
    """One clear error per bad argument."""
    if phase not in PHASES:
        raise WorkloadError(f"unknown phase '{phase}': use one of {', '.join(PHASES)}")
    if batch < 1:
        raise WorkloadError(f"batch must be at least 1, got {batch}")
    if batch > MAX_BATCH:
        raise WorkloadError(f"batch must be at most {MAX_BATCH:,} sequences, got {batch}")
    if context < 1:
        raise WorkloadError(f"context must be at least 1, got {context}")
    if context > MAX_CONTEXT:
        raise WorkloadError(f"context must be at most {MAX_CONTEXT:,} positions, got {context}")
    if dtype not in DTYPES and dtype not in MODELLED_DTYPES:
        raise WorkloadError(f"unknown dtype '{dtype}': use one of bf16, fp16, fp32, fp8")
    if device.split(":")[0] not in ("meta", "cpu", "cuda"):
        raise WorkloadError(f"unknown device '{device}': use meta, cpu or cuda")


def check_workload(workload: Workload) -> None:
    """A workload built in code (a plugin's lever, a Python API call) checked as the command line
    checks the user's: its fields' types first (a string batch, a float context), then `validate`.
    One clear error per bad field, naming it."""
    w = workload
    for name in ("phase", "dtype", "device"):
        value = getattr(w, name)
        if not isinstance(value, str):
            raise WorkloadError(f"{name} must be a string, got {value!r}")
    for name in ("batch", "context"):
        value = getattr(w, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise WorkloadError(f"{name} must be a whole number, got {value!r}")
    if not isinstance(w.options, tuple) or not all(isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str)
                                                   for o in w.options):
        raise WorkloadError(f"options must be (name, value) pairs, got {w.options!r}")
    # a mixed step's groups and chunk are checked by validate_levers (validate_mixed)
    validate("decode" if w.phase == MIXED else w.phase, w.batch, w.context, w.dtype, w.device)


def validate_levers(workload: Workload, deployment: Deployment) -> None:
    """One clear error per bad setting (each by its rule, rooflinekit.core.settings), multi-token
    decode length, or combination of settings that is not modelled."""
    w, d = workload, deployment
    validate_deployment(d)
    fmt = d.weight_format(w.dtype_key)
    if d.weight_group_size is not None and fmt not in ("fp8", "int8", "int4"):
        raise WorkloadError(f"--weight-group-size applies to fp8, int8 and int4 weights, not {fmt}: "
                            "give --weight-dtype too")
    if d.quantize_embeddings and d.weight_dtype is None and w.dtype_key != "fp8":
        raise WorkloadError("--quantize-embeddings quantizes the embedding and head in the weight format: give "
                            "--weight-dtype too")
    if w.dtype_key == "fp8" and fmt not in ("fp8", "int4"):
        raise WorkloadError(f"--dtype fp8 runs the weight products in fp8: their weights must be fp8 or int4, "
                            f"not {fmt} (drop --weight-dtype or give fp8)")
    q = w.decode_q_len
    if isinstance(q, bool) or not isinstance(q, int) or q < 1:
        raise WorkloadError(f"--q-len must be a whole number of at least 1, got {q!r}")
    if q != 1 and w.phase not in ("decode", MIXED):
        raise WorkloadError(f"--q-len {q} applies to decode only: a prefill step's new tokens are its context "
                            "(drop --q-len, or use --phase decode)")
    if q > MAX_Q_LEN:
        raise WorkloadError(f"--q-len must be at most {MAX_Q_LEN:,} tokens per sequence, got {q}")
    if w.mixed:
        validate_mixed(w, (MAX_BATCH, MAX_CONTEXT))
    elif q > w.context:
        raise WorkloadError(f"--q-len {q} exceeds the context {w.context}: the cache's context slots hold the "
                            "new tokens too (give a context of at least the q-len)")
    if w.mixed and d.overlap != "none":
        raise WorkloadError(f"--overlap {d.overlap} with a mixed step (--mix): a chunked-prefill step is not priced "
                            "as two micro-batches; leave out one of them")
    if d.pp > 1 and d.micro_batches is not None and d.micro_batches > w.batch:
        raise WorkloadError(f"--micro-batches {d.micro_batches} exceeds the batch {w.batch}: a micro-batch holds at "
                            "least one sequence (give at most --batch micro-batches)")


def check_settings(deployment: Deployment) -> None:
    """Each setting's value by its own rule (rooflinekit.core.settings), one WorkloadError naming
    the first bad one as the command line spells it."""
    for setting in deployment_settings():
        setting.check(getattr(deployment, setting.name))


def validate_deployment(deployment: Deployment) -> None:
    """Each setting by its rule (`check_settings`), then the combinations that are not modelled:
    one clear error each."""
    d = deployment
    check_settings(d)
    if d.tp > 1 and d.ep > 1 and d.tp != d.ep:
        raise WorkloadError(
            f"--tp {d.tp} with --ep {d.ep}: only --ep equal to --tp (experts spread over the GPUs that "
            "split attention) or --ep alone (data-parallel attention) is modelled")
    if d.micro_batches is not None and d.pp == 1:
        raise WorkloadError(f"--micro-batches {d.micro_batches} splits a pipeline-parallel step: give --pp above 1 too")
    if (d.redundant_experts or d.ep_imbalance != 1.0) and d.ep == 1:
        raise WorkloadError("--redundant-experts and --ep-imbalance describe expert parallelism: give --ep above 1 too")
    if d.overlap != "none" and d.pp > 1:
        raise WorkloadError(f"--overlap {d.overlap} with --pp {d.pp}: a pipeline stage's expected time does not "
                            "model micro-batch overlap; leave out one of them")


#: The built-in plugins that load models (the entry points named in pyproject.toml).
LOADERS = frozenset({"modelfile", "hf"})


def parse_options(pairs: tuple[str, ...] | list[str]) -> dict[str, object]:
    """KEY=VALUE strings to a dict; values become int, float, bool, None or stay strings."""
    options: dict[str, object] = {}
    for pair in pairs:
        if "=" not in pair:
            raise WorkloadError(f"option '{pair}' is not KEY=VALUE (e.g. --option layers=4)")
        key, raw = pair.split("=", 1)
        key = key.strip().replace("-", "_")
        if not key.isidentifier():
            raise WorkloadError(f"option name '{key}' is not a valid Python identifier")
        options[key] = _coerce(raw.strip())
    return options


def _coerce(raw: str) -> object:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


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
    wrote_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise ModelError(f"syntax error in {path}:{exc.lineno}: {exc.msg}") from None
    except SystemExit as exc:
        raise exit_error(exc, str(file), "importing the model file") from None
    except Exception as exc:
        raise ModelError(f"importing {path} failed: {_user_frame(exc, str(file))}") from exc
    finally:
        sys.dont_write_bytecode = wrote_bytecode
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
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype(workload))
    try:
        with torch.device(workload.device):
            yield
    finally:
        torch.set_default_dtype(previous)


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
        try:
            with module_budget(source.path):
                model = source.build_model(**_accepted(source.build_model, options))
        except UserError:
            raise
        except SystemExit as exc:
            raise exit_error(exc, source.path, "build_model()") from None
        except Exception as exc:
            raise ModelError(f"build_model() failed: {_user_frame(exc, source.path)}") from exc
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


def _make_inputs(source: ModelSource, workload: Workload, options: dict[str, object]) -> object:
    """make_inputs(batch, context, phase) with the options and q_len it accepts, checked."""
    given = _accepted(source.make_inputs, options)
    q_len = q_len_argument(source, workload)
    if q_len and "q_len" in given:
        raise WorkloadError("option q_len: give a decode step's new tokens per sequence with --q-len N")
    try:
        inputs = source.make_inputs(workload.batch, workload.context, workload.phase, **given, **q_len)
    except UserError:
        raise
    except SystemExit as exc:
        raise exit_error(exc, source.path, "make_inputs()") from None
    except Exception as exc:
        raise ModelError(f"make_inputs() failed: {_user_frame(exc, source.path)}") from exc
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
