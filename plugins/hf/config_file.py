"""A transformers config read and checked before a model is built: the loader's errors, the
config.json's JSON, its model_type, layer counts and size bounds, and transformers' reason for
rejecting one. Standalone like `loader` (imports nothing from rooflinekit, nor torch)."""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from typing import Any

INSTALL_HINT = ("transformers is not installed: pip install 'rooflinekit[hf]'" if sys.version_info >= (3, 11) else
                "transformers is not installed: the releases rooflinekit reads (5.24 and later) need Python 3.11 "
                f"or later, this is Python {sys.version_info[0]}.{sys.version_info[1]}")

#: Keys of a hub config.json that would make transformers run remote code or quantize.
DROPPED_KEYS = ("auto_map", "quantization_config")

#: Keys that hold the number of decoder layers in a raw config.json (the standard name, and the
#: names some families map to it), at the top level or in a `text_config`.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
#: A model spec naming a model type instead of a file: its default config (`hf:llama`).
SPEC = "hf:"
#: How the full list of supported model types can be printed.
LIST_TYPES = ('python -c "import transformers.models.auto.modeling_auto as m; '
              'print(*sorted(m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))"')


class ConfigError(ValueError):
    """A config this loader cannot use: the message names the file and says why, in one line."""


class OptionError(ValueError):
    """A bad `-O KEY=VALUE` option for a config (the message names the option, not the file)."""


class SizeError(ConfigError):
    """A config beyond a size bound (`bound`: "layers" or "parameters"); the caller adds the bound."""

    def __init__(self, bound: str, message: str):
        super().__init__(message)
        self.bound = bound


def reason(exc: BaseException) -> str:
    """transformers' reason for rejecting a config, in one line: the innermost line of a (strict
    dataclass) validation error without its exception-class prefix, else `Type: message`."""
    text = str(exc)
    sentence = isinstance(exc, ValueError)
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str) and " " in exc.args[0]:
        text, sentence = exc.args[0], True  # a KeyError carrying a sentence: without the repr quotes
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[-1]
    inner = re.match(r"^[A-Za-z_][\w.]*(?:Error|Exception|Warning): (.+)$", text)
    if inner:
        text = inner.group(1)
    elif not sentence or len(lines) > 1:
        text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= 300 else text[:297] + "..."


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError as exc:  # also a broken install (missing dependency)
        raise ImportError(INSTALL_HINT) from exc
    return transformers, AutoConfig, AutoModelForCausalLM, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def supported_model_types() -> list[str]:
    """Model types AutoModelForCausalLM can build natively (no remote code)."""
    return sorted(_transformers()[3])


def _read_config(path: str) -> tuple[dict, str]:
    if path.startswith(SPEC):  # hf:MODEL_TYPE: the type's default config, nothing read
        model_type = path[len(SPEC):]
        if not model_type:
            raise ConfigError(f"{SPEC} needs a model type after it ({SPEC}llama); list them with {LIST_TYPES}")
        return {"model_type": model_type}, path
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no transformers config at {path}")
    try:
        with open(file, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read: {exc.strerror or exc}") from None
    if not raw.strip():
        raise ConfigError(f"{file} is empty: a transformers config is a JSON object")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file} is not a JSON text file (byte 0x{exc.object[exc.start:exc.start + 1].hex()} "
                          f"at offset {exc.start} is not UTF-8)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{file} is not a usable config: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file} does not hold a JSON object (a transformers config), but a "
                          f"{type(data).__name__}")
    return data, file


def _check_model_type(model_type: Any, file: str, causal_lm) -> str:
    if model_type is None or model_type == "":
        raise ConfigError(f"{file} has no model_type: a transformers config names its family "
                          "(\"model_type\": \"llama\", ...)")
    if not isinstance(model_type, str):
        raise ConfigError(f"{file}: model_type must be a string, got {json.dumps(model_type)[:60]}")
    if model_type in causal_lm:
        return model_type
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError:  # pragma: no cover - moved in some release
        CONFIG_MAPPING_NAMES = {}
    if model_type in CONFIG_MAPPING_NAMES:
        raise ConfigError(f"{file}: model_type {model_type!r} has no causal-LM class in transformers "
                          "(AutoModelForCausalLM), nor a masked-LM or sequence-to-sequence one; rooflinekit "
                          "builds language models")
    close = difflib.get_close_matches(model_type.lower(), sorted(causal_lm), n=3, cutoff=0.6)
    hint = (f"did you mean {', '.join(repr(c) for c in close)}?" if close
            else f"{len(causal_lm)} types are supported; list them with {LIST_TYPES}")
    raise ConfigError(f"{file}: unknown model_type {model_type!r} for transformers "
                      f"{_transformers()[0].__version__}: {hint}")


def _check_layers(value: Any, what: str, file: str, max_layers: int | None) -> None:
    """A layer count (when it is an int: other types are transformers' to reject)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return
    if value < 1:
        raise ConfigError(f"{file}: {what} is {value}: a model needs at least 1 decoder layer")
    if max_layers is not None and value > max_layers:
        raise SizeError("layers", f"{file}: {what} is {value:,}: analyse a model this deep at fewer layers "
                                  "(-O layers=N), the per-layer figures are the same")


def _raw_layer_counts(data: dict):
    """(key, value) of every layer count in a raw config (top level and text_config)."""
    for prefix, scope in (("", data), ("text_config.", data.get("text_config"))):
        if isinstance(scope, dict):
            for key in LAYER_KEYS:
                if key in scope:
                    yield prefix + key, scope[key]


def _count(c, *names: str, default: float = 0.0) -> float:
    """The first of `names` that `c` holds as a positive number (a list: its largest)."""
    for name in names:
        value = getattr(c, name, None)
        if isinstance(value, (list, tuple)):
            value = max((v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)), default=None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return float(default)


def estimate_parameters(c) -> float:
    """Parameters of a decoder text config, from its sizes alone (before building anything): embeddings
    and head, then per layer the Q/K/V/O projections and a gated MLP, or every routed and shared expert
    of one (on every layer but DeepSeek's `first_k_dense_replace`). For bounding the work, not for
    reporting: within 1% of the built count for the shipped configs, norms and biases left out."""
    h = _count(c, "hidden_size")
    layers = _count(c, "num_hidden_layers")
    vocab = _count(c, "vocab_size")
    heads = _count(c, "num_attention_heads", default=1.0)
    kv = _count(c, "num_key_value_heads", default=heads)
    d = _count(c, "head_dim", default=h / heads)
    inter = _count(c, "intermediate_size", "ffn_dim", "n_inner", default=4 * h)
    experts = _count(c, "n_routed_experts", "num_local_experts", "num_experts")
    expert_inter = _count(c, "moe_intermediate_size", "expert_intermediate_size", default=inter)
    shared = _count(c, "n_shared_experts", "num_shared_experts")
    dense = min(layers, _count(c, "first_k_dense_replace")) if experts else layers  # DeepSeek's first dense layers
    attention = h * d * (heads + 2 * kv) + heads * d * h
    embeddings = vocab * h * (1 if getattr(c, "tie_word_embeddings", False) is True else 2)
    return (embeddings + layers * attention + dense * 3 * h * inter
            + (layers - dense) * 3 * h * expert_inter * (experts + shared))


def check_text_config(c, file: str, max_layers: int | None = None, max_parameters: float | None = None) -> None:
    """What transformers lets through but no decoder can run, and sizes beyond the bounds."""
    _check_layers(getattr(c, "num_hidden_layers", None), "num_hidden_layers", file, max_layers)
    for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size"):
        value = getattr(c, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ConfigError(f"{file}: {name} is {value}: it must be at least 1")
    heads, kv = getattr(c, "num_attention_heads", None), getattr(c, "num_key_value_heads", None)
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (heads, kv)) and heads % kv:
        raise ConfigError(f"{file}: num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv})")
    if max_parameters is not None:
        n = estimate_parameters(c)
        if n > max_parameters:
            sizes = ", ".join(f"{k} {int(_count(c, k)):,}" for k in ("hidden_size", "num_hidden_layers", "vocab_size"))
            raise SizeError("parameters", f"{file}: about {n:.3g} parameters ({sizes}): too large to analyse")


def cached_kv_heads(c) -> int:
    """K/V heads transformers' code caches for a text config: num_key_value_heads, but one for
    Falcon-style `multi_query` (Falcon's new_decoder_architecture caches K/V already expanded to
    every query head, as a config without num_key_value_heads implies)."""
    if getattr(c, "multi_query", False) and not getattr(c, "new_decoder_architecture", False):
        return 1
    return getattr(c, "num_key_value_heads", None) or c.num_attention_heads


def field_holding(data: Any, value: Any, prefix: str = "") -> str | None:
    """The dotted name of the (first) field of a config dict holding the string `value`, or None."""
    if not isinstance(value, str) or not value:
        return None
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, item in items:
        name = f"{prefix}{key}" if isinstance(data, dict) else f"{prefix.rstrip('.')}[{key}]"
        if item == value:
            return name
        found = field_holding(item, value, f"{name}.") if isinstance(item, (dict, list)) else None
        if found:
            return found
    return None


def _first_built(auto_config, model_type: str, candidates: list[dict]):
    """The config built from the first candidate transformers accepts; else its error on the first."""
    first = None
    for data in candidates:
        try:
            return auto_config.for_model(model_type, **data)
        except Exception as exc:  # noqa: BLE001 - try the next; report the first
            first = first or exc
    raise first


def _rejection(auto_config, model_type: str, data: dict) -> str | None:
    """transformers' reason for rejecting the config as given, or None (also for a layer count past
    4,096: not built at such a size just to tell whose error it is)."""
    if any(isinstance(v, int) and v > 4096 for _, v in _raw_layer_counts(data)):
        return None
    try:
        auto_config.for_model(model_type, **data)
    except Exception as exc:  # noqa: BLE001 - any rejection
        return reason(exc)
    return None


def _at(layers: int | None) -> str:
    return "" if layers is None else f" cut to {layers} layers (-O layers={layers})"
