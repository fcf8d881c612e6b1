"""The request's checks: a workload's and a deployment's values (phase, sizes, dtypes, settings
and the combinations that are modelled), one clear error each, and the `-O KEY=VALUE` model
options parsed. Apart from the model's loading (rooflinekit.stages.model_source) because the
command line and the Python API check a request before any model is loaded."""

from __future__ import annotations

import torch

from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.request import (
    MIXED,
    PHASES,
    Deployment,
    Workload,
    deployment_settings,
)
from rooflinekit.stages.mixed import validate_mixed

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
    # a mixed step's groups and chunk are checked by validate_request (validate_mixed)
    validate("decode" if w.phase == MIXED else w.phase, w.batch, w.context, w.dtype, w.device)


def validate_request(workload: Workload, deployment: Deployment) -> None:
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
