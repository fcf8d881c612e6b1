"""transformers models that are not decoder-only LMs: encoders (BERT-style masked LMs) and
encoder-decoders (T5, BART, Whisper-style sequence-to-sequence models), as model sources.

- **encoder**: one step over every position (prefill only), bidirectional attention, no KV cache,
  the masked-LM head on every position.
- **seq2seq**: prefill is the encoder over `encoder_len` source positions (default: the context)
  and the decoder's first token, which writes the cross-attention K/V once; decode is one target
  token against a self-attention cache of `context` positions and the cross-attention K/V of the
  `encoder_len` source positions, read every step.

Every attention module of such a model is tagged with `attention_role` ("encoder", "decoder" or
"cross"), which the built-in `encoder_decoder` plugin reads to cost each layer over its own query
and key lengths. Standalone like `loader` (imports nothing from rooflinekit).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from .values import known

TASKS = ("auto", "causal", "encoder", "seq2seq")


class StepError(ValueError):
    """A step this model cannot take (an encoder's decode, a context beyond learned positions)."""
#: Module names of cross-attention blocks in transformers' encoder-decoders (BART/Whisper family,
#: T5, BERT-style decoders, ProphetNet).
CROSS_NAMES = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn", "cross_attention")
ROLE_ATTR = "attention_role"

ENCODER_NOTE = ("encoder: one step over every position with bidirectional attention; no KV cache is kept "
                "(K and V are this step's activations); the masked-LM head runs on every position")
SEQ2SEQ_NOTE = ("encoder-decoder: prefill runs the encoder over {enc} source positions and the decoder's first "
                "token, which writes the cross-attention K/V once; decode is one target token against a "
                "self-attention cache of the context and the cross-attention K/V of the {enc} source "
                "positions, read every step")


def mappings() -> dict[str, dict[str, str]]:
    """transformers' model-type -> class-name mappings per task."""
    from transformers.models.auto import modeling_auto as m

    return {
        "causal": m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "encoder": m.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        "seq2seq": {**m.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES, **m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES},
    }


def known_types() -> set[str]:
    """Every model type one of the three tasks can build."""
    return {t for names in mappings().values() for t in names}


def choose_task(config, requested: str) -> str:
    """The task a config is built for: as requested, else an encoder-decoder config as seq2seq, a
    masked-LM type that is not configured as a decoder as an encoder, anything else as a causal LM."""
    names = mappings()
    model_type = config.model_type
    if requested != "auto":
        if model_type not in names[requested]:
            have = [t for t in ("causal", "encoder", "seq2seq") if model_type in names[t]]
            raise ValueError(f"option task={requested}: transformers has no {requested} class for {model_type!r} "
                             f"(it has: {', '.join(have) or 'none'})")
        return requested
    if getattr(config, "is_encoder_decoder", False) and model_type in names["seq2seq"]:
        return "seq2seq"
    decoder = bool(getattr(config, "is_decoder", False)) or bool(getattr(config, "causal", False))
    if model_type in names["encoder"] and not decoder:
        return "encoder"
    if model_type in names["causal"]:
        return "causal"
    return "seq2seq" if model_type in names["seq2seq"] else "encoder"


def auto_class(task: str):
    """The transformers Auto class that builds a model for `task` from a config."""
    import transformers

    return {"causal": transformers.AutoModelForCausalLM, "encoder": transformers.AutoModelForMaskedLM,
            "seq2seq": transformers.AutoModelForSeq2SeqLM}[task]


def model_class(config, task: str) -> type:
    """The class `auto_class(task)` builds for `config` (speech seq2seq models: their own mapping)."""
    import transformers

    mapping = auto_class(task)._model_mapping
    if type(config) in mapping:
        return mapping[type(config)]
    if task == "seq2seq":
        speech = transformers.AutoModelForSpeechSeq2Seq._model_mapping
        if type(config) in speech:
            return speech[type(config)]
    raise KeyError(f"no {task} class for {type(config).__name__}")


def config_part(config, cls: type) -> tuple[str, Any] | None:
    """(name, sub-config) when `cls` takes a config of another class that `config` holds as a part
    (MusicGen's causal LM takes the composite config's `decoder`), else None."""
    wanted = getattr(cls, "config_class", None)
    if not isinstance(wanted, type) or isinstance(config, wanted):
        return None
    return next(((name, value) for name, value in vars(config).items() if isinstance(value, wanted)), None)


def text_part(config, task: str) -> tuple[Any, type] | None:
    """(text config, its causal-LM class) of a multimodal config whose text model transformers can
    build alone as a causal LM, else None."""
    text = getattr(config, "text_config", None)
    if task != "causal" or text is None or text is config:
        return None
    try:
        return text, model_class(text, "causal")
    except KeyError:
        return None


def default_language(model: torch.nn.Module, config) -> str | None:
    """Set a language-adapter model's language (X-MOD needs one before its forward) to the config's
    first, when it has none; the language set, or None."""
    setter = getattr(model, "set_default_language", None)
    languages = getattr(config, "languages", None)
    if not callable(setter) or not languages or getattr(config, "default_language", None) is not None:
        return None
    setter(languages[0])
    return languages[0]


#: Families whose forward puts learned positions ahead of every sequence, by the config field
#: giving how many (CPM-Ant's 32 prompt positions): their cache holds them too, and their forward
#: takes the whole sequence every step, dropping what the cache holds itself.
PREPENDED = {"cpmant": "prompt_length"}
#: The attribute through which an attention module declares the positions every sequence holds
#: before its own tokens (read by rooflinekit's attribution: a decode step's keys are the context
#: plus these).
PREFIX_ATTR = "attention_prefix"
PREFIX_NOTE = ("{n} learned prompt positions precede every sequence (CPM-Ant): the cache holds the context plus "
               "{n} positions, the attention costed over them; the forward is given the whole sequence every step "
               "and drops what the cache holds, as transformers' generate() gives it")


def prepended_positions(config) -> int:
    """Positions a model puts ahead of every sequence (PREPENDED), 0 for others."""
    field = PREPENDED.get(getattr(config, "model_type", None))
    value = getattr(config, field, 0) if field else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tag_prefix(model: torch.nn.Module, config) -> int:
    """Set PREFIX_ATTR on every module of a model that prepends positions; how many (0: none)."""
    prefix = prepended_positions(config)
    if prefix:
        for module in model.modules():
            setattr(module, PREFIX_ATTR, prefix)
    return prefix


def _path_of(model: torch.nn.Module, target: torch.nn.Module | None) -> str | None:
    if target is None:
        return None
    return next((name for name, m in model.named_modules() if m is target), None)


def tag_roles(model: torch.nn.Module, task: str) -> None:
    """Set `attention_role` on the modules of an encoder ("encoder") or an encoder-decoder (the
    encoder's "encoder", the decoder's cross-attention blocks "cross", the rest of it "decoder")."""
    if task == "encoder":
        for module in model.modules():
            setattr(module, ROLE_ATTR, "encoder")
        return
    if task != "seq2seq":
        return
    get_encoder = getattr(model, "get_encoder", None)
    encoder = _path_of(model, get_encoder() if callable(get_encoder) else None)
    for name, module in model.named_modules():
        parts = name.split(".")
        if encoder is not None and (name == encoder or name.startswith(encoder + ".")):
            role = "encoder"
        elif any(p in CROSS_NAMES for p in parts):
            role = "cross"
        elif "decoder" in parts or any(p.startswith("decoder") for p in parts):
            role = "decoder"
        else:
            continue
        setattr(module, ROLE_ATTR, role)


# -- inputs ---------------------------------------------------------------------------------------


def encoder_inputs(batch: int, context: int, phase: str) -> dict:
    """An encoder's step: every one of `context` positions, no cache, no mask (bidirectional)."""
    if phase != "prefill":
        raise StepError("an encoder has no decode step (it reads every position at once): use --phase prefill")
    return {"input_ids": known(lambda: torch.zeros(batch, context, dtype=torch.long))}


def _params(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def encoder_length(config, model: torch.nn.Module, context: int, requested: int | None) -> tuple[int, str | None]:
    """Source positions the encoder reads: fixed by a speech encoder (Whisper's 1500 frames after
    its convolutions), else `requested` or the context. A note when it is not the context."""
    if "input_features" in _params(model):
        fixed = getattr(config, "max_source_positions", None)
        if not isinstance(fixed, int) or fixed < 1:
            raise ValueError(f"{type(model).__name__} reads audio features but its config has no max_source_positions")
        return fixed, (f"{type(model).__name__}: the encoder's length is fixed at {fixed} positions "
                       "(max_source_positions: a 30 s window of audio features)")
    if requested is not None:
        return requested, None
    return context, None


def _source_inputs(config, model: torch.nn.Module, batch: int, enc_len: int) -> dict:
    if "input_features" in _params(model):
        mel = getattr(config, "num_mel_bins", 80)
        frames = 2 * enc_len  # Whisper's two convolutions: the second has stride 2
        return {"input_features": torch.zeros(batch, mel, frames)}
    return {"input_ids": known(lambda: torch.zeros(batch, enc_len, dtype=torch.long))}


def _check_positions(config, context: int) -> None:
    """A decoder with learned positions cannot hold more than it has (Whisper: 448)."""
    for name in ("max_target_positions",):
        limit = getattr(config, name, None)
        if isinstance(limit, int) and 0 < limit < context:
            raise StepError(f"context {context} is beyond the decoder's {limit} learned positions ({name}): "
                             f"profile it at a context of at most {limit}")


@dataclass(frozen=True)
class Seq2SeqStep:
    """One encoder-decoder step: sequences, target positions (the context), the phase, and the
    source positions asked for (`encoder_len`; None: the context)."""

    batch: int
    context: int
    phase: str
    encoder_len: int | None = None


def seq2seq_inputs(model: torch.nn.Module, config, step: Seq2SeqStep, cache_param: str, cache_kind: str,
                   notes: list[str]) -> dict:
    """Inputs of one encoder-decoder step (see the module docstring for what each phase runs)."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache
    from transformers.modeling_outputs import BaseModelOutput

    batch, context = step.batch, step.context
    enc_len, note = encoder_length(config, model, context, step.encoder_len)
    for text in (note, SEQ2SEQ_NOTE.format(enc=enc_len)):
        if text and text not in notes:
            notes.append(text)
    start = known(lambda: torch.zeros(batch, 1, dtype=torch.long))
    source = _source_inputs(config, model, batch, enc_len)
    if step.phase == "prefill":
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        return {**source, "decoder_input_ids": start, cache_param: cache, "use_cache": True}
    _check_positions(config, context)
    # The caches' shapes from one step of the model's own code (outside any capture: on meta it
    # allocates nothing): K/V per self-attention layer, cross-attention K/V of the source.
    probe = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with torch.no_grad():
        out = model(**source, decoder_input_ids=start, **{cache_param: probe}, use_cache=True)
    encoded = getattr(out, "encoder_last_hidden_state", None)
    if encoded is None:
        raise ValueError(f"{type(model).__name__} returned no encoder output to decode against")
    past = context - 1
    self_cache = _self_cache(probe.self_attention_cache, cache_kind, batch, past, context)
    cache = EncoderDecoderCache(self_cache, probe.cross_attention_cache)  # is_updated: cross K/V are read
    return {"decoder_input_ids": start, "encoder_outputs": BaseModelOutput(last_hidden_state=torch.empty_like(encoded)),
            cache_param: cache, "use_cache": True}


def _self_cache(probed, kind: str, batch: int, past: int, context: int):
    """A self-attention cache of `past` positions with the probed layers' K/V shapes ("static":
    `context` slots written in place; "dynamic": torch.cat growth)."""
    from transformers.cache_utils import Cache, DynamicCache, StaticLayer

    dtype = torch.get_default_dtype()
    shapes = [(layer.keys.shape, layer.values.shape) for layer in probed.layers]
    if kind == "static":
        cache: Any = Cache(layers=[StaticLayer(max_cache_len=context) for _ in shapes])
        for layer, (k, v) in zip(cache.layers, shapes, strict=True):
            layer.lazy_initialization(torch.empty((batch, k[1], 0, k[-1]), dtype=dtype),
                                      torch.empty((batch, v[1], 0, v[-1]), dtype=dtype))
    else:
        cache = DynamicCache()
    if past > 0:
        for i, (k, v) in enumerate(shapes):
            cache.update(torch.empty((batch, k[1], past, k[-1]), dtype=dtype),
                         torch.empty((batch, v[1], past, v[-1]), dtype=dtype), i)
    return cache
