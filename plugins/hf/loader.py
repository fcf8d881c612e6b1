"""Prototype loader: a transformers `config.json` as a rooflinekit model source.

    source = load_hf_config("examples/configs/llama-3.1-8b.json", {})
    model = source.build_model()                      # under torch.device("meta") + default dtype
    kwargs = source.make_inputs(batch, context, phase)   # decode: q_len=N for N new tokens per sequence

Standalone on purpose (imports nothing from rooflinekit); it follows the model-file contract:
`build_model()` and `make_inputs()` are called with the target device (meta by default) and the
default dtype already in effect, so every tensor here is created without an explicit device.
Reading and checking the config before anything is built is `config_file`.

Options (the `options` dict of `load_hf_config`):
    attn_implementation   "sdpa" (default) or "eager"
    experts_implementation
                          MoE experts kernel (MoE models only): "grouped_mm" (default; runs on
                          meta: sort/histc/cumsum + two aten._grouped_mm), "batched_mm" (runs on
                          meta, but gathers one weight copy per token-expert pair), "eager"
                          (transformers' loop over hit experts: .nonzero(), fails on meta), or any
                          name registered with transformers' ExpertsInterface.register(name, fn)
    cache                 KV cache: "static" (default: StaticCache with exactly `context` slots;
                          decode writes the new K/V in place with index_copy_, as the model-file
                          contract describes) or "dynamic" (DynamicCache: each step's torch.cat
                          copies the whole cache, which a byte count then sees)
    logits                "last" (default: lm_head on the last position only, as serving does; in
                          multi-token decode on the q_len new positions) or "all"
    layers                int: override num_hidden_layers (quick runs); every per-layer list of
                          the config (layer_types, ...) is cut to the first `layers` entries
    config                dict of further config overrides
    task                  "auto" (default), "causal", "encoder" or "seq2seq": what the config is
                          built as (auto: an encoder-decoder config as seq2seq, a masked-LM type not
                          configured as a decoder as an encoder, else a causal LM; tasks)
    encoder_len           int: source positions of a seq2seq model's encoder (default: the context;
                          fixed by speech encoders)
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch

from . import stacks, tasks
from .cache import CacheStep, build_cache, config_cache, run_one_token
from .config_file import (
    DROPPED_KEYS,
    ConfigError,
    OptionError,
    SizeError,
    _at,
    _check_layers,
    _check_model_type,
    _first_built,
    _raw_layer_counts,
    _read_config,
    _rejection,
    _transformers,
    cached_kv_heads,
    check_text_config,
    field_holding,
    reason,
)
from .kv import NOTE as KV_NOTE
from .kv import fit as fit_kv_layers
from .layers import changes, cut_layers, merged
from .meta import known_lengths, meta_forward
from .values import known

ATTN_IMPLEMENTATIONS = ("sdpa", "eager")
EXPERTS_IMPLEMENTATIONS = ("grouped_mm", "batched_mm", "eager")
CACHES = ("dynamic", "static")
LOGITS = ("last", "all")
OPTIONS = ("attn_implementation", "experts_implementation", "cache", "logits", "layers", "config", "task",
           "encoder_len")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise OptionError(f"option {name}={value!r}: use one of {', '.join(choices)}")
    return value


def _check_experts(value: Any) -> str:
    if value in EXPERTS_IMPLEMENTATIONS:
        return value
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

        registered = tuple(ALL_EXPERTS_FUNCTIONS.keys())
    except ImportError:
        registered = ()
    if value in registered:
        return value
    raise OptionError(
        f"option experts_implementation={value!r}: use one of "
        f"{', '.join(dict.fromkeys(EXPERTS_IMPLEMENTATIONS + registered))}"
    )


class HFModelSource:
    """A causal LM described by a transformers config, built without weights."""

    def __init__(self, config, file: str, options: dict, notes: list[str], *,
                 max_parameters: float | None = None,
                 empty_layers: Callable[[torch.nn.Module], frozenset[int]] | None = None):
        self.config = config
        self.path = file
        self.notes = notes
        #: Parameters the built model may hold (None: no bound); see load_hf_config.
        self.max_parameters = max_parameters
        #: The cache layer indices of a built model that nothing reads, asked at each step's inputs
        #: (None: every layer's cache is filled); this source's own, no other load's.
        self._empty_layers = empty_layers
        self.model_type = config.model_type
        self.attn_implementation = _check_choice(
            "attn_implementation", options.get("attn_implementation", "sdpa"), ATTN_IMPLEMENTATIONS
        )
        self.experts_implementation = _check_experts(
            options.get("experts_implementation", "grouped_mm")
        )
        self.cache = _check_choice("cache", options.get("cache", "static"), CACHES)
        self.logits = _check_choice("logits", options.get("logits", "last"), LOGITS)
        try:
            self.task = tasks.choose_task(config, _check_choice("task", options.get("task", "auto"),
                                                                   tasks.TASKS))
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        self.encoder_len = options.get("encoder_len")
        if self.encoder_len is not None and (isinstance(self.encoder_len, bool) or not isinstance(
                self.encoder_len, int) or self.encoder_len < 1):
            raise OptionError(f"option encoder_len={self.encoder_len!r}: give a whole number of source positions")
        if self.task == "causal" and getattr(config, "is_decoder", None) is False \
                and config.model_type in tasks.mappings()["encoder"]:
            config.is_decoder = True  # a BERT-style type as a causal LM (BertLMHeadModel) is a decoder
        self._auto = tasks.auto_class(self.task)
        self._model_class = tasks.model_class(config, self.task)
        part = tasks.config_part(config, self._model_class)
        if part is not None:  # MusicGen: the causal LM is built from the composite config's decoder
            name, self.config = part
            notes.append(f"{self._model_class.__name__} is built from the config's `{name}` "
                         f"({type(self.config).__name__}), as the class takes")
            config = self.config
        params = inspect.signature(self._model_class.forward).parameters
        # transformers 5.x renamed `past_key_values` to `cache` (the old name still works, with a warning)
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in params
        self._has_position_ids = "position_ids" in params  # not RWKV's, for one
        self._built: weakref.ref | None = None  # the last model built: its cache states are shaped by its code

    @property
    def class_name(self) -> str:
        """The transformers class built (BertForMaskedLM, LlamaForCausalLM, ...)."""
        return self._model_class.__name__

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]

    # -- the model-file contract ------------------------------------------------------------

    def build_model(self) -> torch.nn.Module:
        # the Auto class of the task, or the class itself where another mapping holds it (speech seq2seq)
        from_config = (self._auto.from_config if type(self.config) in self._auto._model_mapping
                       else self._model_class._from_config)
        kwargs = {}
        can_set = getattr(self._model_class, "_can_set_experts_implementation", None)
        if can_set is not None and can_set():
            # only MoE classes (@use_experts_implementation) accept it; dense ones raise on it
            kwargs["experts_implementation"] = self.experts_implementation
        # the caller's default dtype wins over the config's "dtype"/"torch_dtype"
        kwargs["dtype"] = torch.get_default_dtype()
        try:
            model = from_config(self.config, attn_implementation=self.attn_implementation, **kwargs)
        except ValueError as exc:
            # Some classes (Gemma2 in transformers 5.x, for one) refuse sdpa: run them eager, as
            # transformers would advise, and say so rather than fail on the default.
            if self.attn_implementation != "sdpa" or "attention implementation" not in str(exc):
                raise
            model = from_config(self.config, attn_implementation="eager", **kwargs)
            self.attn_implementation = "eager"
            self.notes.append(f"{self._model_class.__name__} does not support attn_implementation=sdpa "
                              "in this transformers: built with eager attention (matmuls) instead")
        except KeyError as exc:  # a value transformers' validation let through and its code looks up
            where = field_holding(self.config.to_dict(), exc.args[0] if exc.args else None)
            if where is None:
                raise
            raise ConfigError(f"{self.path}: transformers cannot build a model from this config: {where} = "
                              f"{exc.args[0]!r} is not a value it knows") from None
        except ImportError as exc:  # a tower needing a package not installed (Gemma-3n's vision: timm)
            text = tasks.text_part(self.config, self.task)
            if text is None:
                raise
            missing = " ".join(str(exc).split())[:120]
            self.config, self._model_class = text
            self.notes.append(f"the multimodal model cannot be built here ({missing}): its text model "
                              f"{self._model_class.__name__} is built alone, as a text-only forward runs it")
            return self.build_model()
        model.eval()
        tasks.tag_roles(model, self.task)  # encoder / decoder / cross-attention layers
        if tasks.tag_prefix(model, self.config):
            self.notes.append(tasks.PREFIX_NOTE.format(n=tasks.prepended_positions(self.config)))
        language = tasks.default_language(model, self.config)
        if language is not None:
            self.notes.append(f"{type(model).__name__}: language adapters of {language!r} (the config's first "
                              "language; the model needs one set)")
        meta_forward(model, self.notes)  # values a meta tensor cannot give, from the workload (meta.py)
        self._built = weakref.ref(model)
        if self.max_parameters is not None:  # the estimate before building may miss a family's extras
            n = sum(p.numel() for p in model.parameters())
            if n > self.max_parameters:
                raise SizeError("parameters", f"{self.path}: {n:.3g} parameters once built: too large to analyse")
        return model

    def make_inputs(self, batch: int, context: int, phase: str, q_len: int = 1) -> dict:
        """Inputs of one step; in decode, `q_len` new tokens per sequence (multi-token decode: the
        model's own causal mask, aligned to the cache's end, lets new token i see the tokens before it)."""
        if phase not in ("prefill", "decode"):
            raise ValueError(f"unknown phase {phase!r}: use prefill or decode")
        if batch < 1 or context < 1:
            raise ValueError(f"batch and context must be at least 1, got {batch}, {context}")
        if q_len != 1 and (phase != "decode" or self.task in ("encoder", "seq2seq") or not 1 <= q_len <= context):
            raise ValueError(f"q_len={q_len}: multi-token decode is for decoder-only models in decode, "
                             f"1 <= q_len <= context")
        if self.task != "causal":
            try:
                return self._task_inputs(batch, context, phase)
            except tasks.StepError as exc:
                raise OptionError(f"{self._model_class.__name__}: {exc}") from None
        q_len = context if phase == "prefill" else q_len
        past = context - q_len
        # CPM-Ant: learned prompt positions ahead of every sequence, which its cache holds too; its
        # forward takes the whole sequence every step and drops what the cache holds itself
        prefix = tasks.prepended_positions(self.config)
        ids = context if prefix else q_len
        kwargs: dict[str, Any] = {
            # one row per codebook of each sequence where the model reads several (MusicGen's 4)
            "input_ids": known(lambda: torch.zeros(batch * self._codebooks(), ids, dtype=torch.long)),
            "use_cache": True,
            # no attention_mask: a 2D mask makes the sdpa mask path read it (padding_mask.sum())
        }
        if self._has_position_ids:
            # explicit positions: the model would otherwise derive them from the cache length
            kwargs["position_ids"] = known(
                lambda: torch.arange(past, context, dtype=torch.long).unsqueeze(0).expand(batch, -1))
        # A cache is passed in both phases: without one, transformers' mask code inspects
        # position_ids for packed sequences ((mask == 0).all() -> data-dependent on meta). A model
        # with its own cache class makes its own at prefill (the parameter is then None).
        param, cache = self._make_cache(batch, past + prefix, context + prefix)
        if param is not None:
            kwargs[param] = cache
            known_lengths(cache, past + prefix, self.notes)  # meta: lengths from the workload (meta.py)
        if self._has_logits_to_keep and self.logits == "last":
            # the last position; every new token's in multi-token decode (a verify step checks each)
            kwargs["logits_to_keep"] = 1 if phase == "prefill" else q_len
        return kwargs

    def _task_inputs(self, batch: int, context: int, phase: str) -> dict:
        """An encoder's or an encoder-decoder's inputs (tasks)."""
        if self.task == "encoder":
            kwargs = tasks.encoder_inputs(batch, context, phase)
            if tasks.ENCODER_NOTE not in self.notes:
                self.notes.append(tasks.ENCODER_NOTE)
            return kwargs
        step = tasks.Seq2SeqStep(batch, context, phase, self.encoder_len)
        kwargs = tasks.seq2seq_inputs(self._model(), self.config, step, self._cache_kwarg, self.cache, self.notes)
        known_lengths(kwargs[self._cache_kwarg], context - 1 if phase == "decode" else 0, self.notes)
        return kwargs

    # -- KV cache -----------------------------------------------------------------------------

    def kv_shapes(self, batch: int, length: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Shapes of what each attention layer passes to `cache.update(k, v, layer_idx)`."""
        c = self.config.get_text_config(decoder=True)
        heads = c.num_attention_heads
        kv_heads = cached_kv_heads(c)
        if getattr(c, "kv_lora_rank", None) and getattr(c, "qk_rope_head_dim", None):
            if self._mla_caches_latent():
                # MLA, transformers >= ~5.14: the compressed latent and the shared rotary key are
                # cached, one "head" each; kv_b_proj expands them to per-head K/V after the update.
                return (batch, 1, length, c.kv_lora_rank), (batch, 1, length, c.qk_rope_head_dim)
            # older MLA code caches the expanded per-head K (nope + rope) and V
            k_dim = c.qk_nope_head_dim + c.qk_rope_head_dim
            return (batch, kv_heads, length, k_dim), (batch, kv_heads, length, c.v_head_dim)
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        v_dim = getattr(c, "v_head_dim", None) or head_dim  # MiMo-V2: 192-wide K, 128-wide V
        return (batch, kv_heads, length, head_dim), (batch, kv_heads, length, v_dim)

    def _mla_caches_latent(self) -> bool:
        """Whether the model's MLA attention caches latents (it then has an `expand_kv` method)."""
        module = sys.modules.get(self._model_class.__module__)
        members = vars(module).values() if module is not None else ()
        return any(
            isinstance(obj, type) and issubclass(obj, torch.nn.Module) and hasattr(obj, "expand_kv")
            for obj in members
        )

    def _codebooks(self) -> int:
        """Token rows per sequence: `num_codebooks` for the decoder part of a multi-codebook audio
        model (MusicGen's `*_decoder` config: input_ids of batch x codebooks rows), else 1 (Moshi,
        whose config counts codebooks too, takes one row per sequence)."""
        n = getattr(self.config, "num_codebooks", None)
        decoder_part = str(getattr(self.config, "model_type", "")).endswith("_decoder")
        return n if decoder_part and isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1

    def _model(self) -> torch.nn.Module:
        """The model last built (make_inputs before build_model builds one: caches and states are
        shaped by the model's own code)."""
        model = self._built() if self._built is not None else None
        return model if model is not None else self.build_model()

    def _make_cache(self, batch: int, past: int, context: int) -> tuple[str | None, Any]:
        """(forward parameter, cache) after `past` positions: K/V for attention layers, states of the
        model's own shapes for recurrent and linear-attention layers (cache.py); the layers this
        source was told nothing reads stay empty."""
        model = self._model()
        skip = self._empty_layers(model) if self._empty_layers is not None else frozenset()
        step = CacheStep(self.cache, self.kv_shapes, batch, past, context, skip)
        if stacks.stack_configs(self.config) is not None:  # BLT: a cache per stack of layers (stacks.py)
            return self._cache_kwarg, stacks.stack_cache(self.config, step, self.notes)
        try:
            param, cache = build_cache(model, self.config, step, self.notes)
        except (KeyError, AttributeError) as exc:
            if self.cache != "static":
                raise
            try:  # transformers' StaticCache has no layer class for this config (DeepSeek-V4's kinds)
                param, cache = build_cache(model, self.config, dataclasses.replace(step, kind="dynamic"),
                                           self.notes)
            except Exception:
                raise exc from None
            self.notes.append(f"transformers' StaticCache cannot hold this config's layers ({reason(exc)}): a "
                              "DynamicCache instead, whose torch.cat copies the whole cache each step")
        if cache is not None and param is not None and fit_kv_layers(
                model, cache, self.kv_shapes,
                lambda: run_one_token(model, param, batch, cache=config_cache(self.config, "dynamic", context))):
            if KV_NOTE not in self.notes:
                self.notes.append(KV_NOTE)
        if param in ("past_key_values", "cache"):
            param = self._cache_kwarg  # transformers 5's name where the forward takes both
        return param, cache


def load_hf_config(path: str, options: dict | None = None, *, max_layers: int | None = None,
                   max_parameters: float | None = None,
                   empty_layers: Callable[[torch.nn.Module], frozenset[int]] | None = None) -> HFModelSource:
    """A transformers config.json (file, or directory holding one) as a model source.

    A config transformers rejects, or one no decoder can run, raises ConfigError naming the file and
    the reason; one with more than `max_layers` decoder layers or (estimated before building,
    counted after) more than `max_parameters` parameters raises SizeError (None: no bound).
    `empty_layers(model)`, asked at each step's inputs, names the cache layers that stay empty
    because nothing reads them (None: none).
    """
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise OptionError(f"unknown option {', '.join(unknown)}: accepted are {', '.join(OPTIONS)}")
    _, auto_config, _, causal_lm = _transformers()

    data, file = _read_config(path)
    notes = []
    for key in DROPPED_KEYS:
        if key in data:
            data.pop(key)
            notes.append(f"ignored {key} from {os.path.basename(file)}")
    model_type = _check_model_type(data.get("model_type"), file, set(causal_lm) | tasks.known_types())
    overrides = options.get("config") or {}
    if not isinstance(overrides, dict):
        raise OptionError("option config must be a dict of config overrides")
    data.update(overrides)
    layers = options.get("layers")
    data.pop("model_type")
    given = dict(data)
    if layers is not None:
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise OptionError(f"option layers={layers!r}: give a whole number of decoder layers, at least 1")
        _check_layers(layers, "option layers", file, max_layers)
        # every count and per-layer field the file gives, cut to the first `layers` layers, each
        # keeping its own kind (sliding/full/linear attention, rope or not, dense or MoE): layers.py
        data, _ = cut_layers(data, layers)
    for key, value in _raw_layer_counts(data):  # before transformers builds per-layer lists
        _check_layers(value, key, file, max_layers)
    try:
        config = auto_config.for_model(model_type, **data)  # no file or network access
    except Exception as exc:  # transformers' own validation: ValueError, TypeError, strict dataclass errors...
        own = _rejection(auto_config, model_type, given) if layers is not None else None
        if own is not None:  # the file as given is rejected already: its error, not the cut's
            raise ConfigError(f"{file}: transformers rejects this {model_type} config: {own}") from None
        raise ConfigError(f"{file}: transformers rejects this {model_type} config{_at(layers)}: "
                          f"{reason(exc)}") from None
    if layers is not None:
        # what the file left to transformers' defaults (hf:TYPE, a text_config's layers, a default
        # layer_types): cut as built, and built again from the file with the cut fields only (what
        # the config class derives from them, it derives again)
        built = config.to_dict()
        cut, changed = cut_layers(built, layers)
        if changed:
            try:
                config = _first_built(auto_config, model_type, [
                    merged(data, changes(built, cut)),  # sub-configs: their cut fields only
                    merged(data, changes(built, cut, whole=True)),  # sub-configs as their parent filled them
                    merged(data, {k: v for k, v in changes(built, cut).items()  # the top level only (Moshi:
                                  if not isinstance(v, dict)}),  # its depth decoder then keeps its layers)
                ])
            except Exception as exc:
                raise ConfigError(f"{file}: transformers rejects this {model_type} config{_at(layers)} "
                                  f"(cut: {', '.join(changed[:6])}): {reason(exc)}") from None
    check_text_config(config.get_text_config(decoder=True), file, max_layers, max_parameters)
    return HFModelSource(config, file, options, notes, max_parameters=max_parameters, empty_layers=empty_layers)
