"""What a usable hook answer is: one rule per hook, checked in one place for every plugin.

The plugin host (`rooflinekit.core.plugins`) checks each implementation's non-None answer with
`problem(hook, answer)` as the implementation returns it. An answer with a problem is named in one
warning (`warning`) and treated as None, so pluggy goes on to the next implementation: a plugin
that answers wrongly hides no plugin after it.

A rule is a function of the answer returning None when the answer is fine, or a one-line reason
when it is not, registered for its hook with `@validator("rooflinekit_...")`. A type rule's
reason starts with "expected " (`type_problem`), which `warning` words as
"returned T from hook, expected X".

Every hook that returns an answer has its rule here; callers check nothing of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from rooflinekit.core.request import ModelSource
from rooflinekit.core.specs import (
    AttentionCost,
    AttentionShard,
    AttentionSpec,
    AttentionWindow,
    ModuleModel,
)

#: A rule: None if the answer is fine, else a one-line reason it is not.
Validator = Callable[[object], "str | None"]

#: Hook name -> its rule.
VALIDATORS: dict[str, Validator] = {}

#: A rule that also reads the hook's arguments: None if the answer is fine for them, else a reason.
ContextRule = Callable[[object, Mapping], "str | None"]

#: Hook name -> its rule against the arguments the plugin was asked with.
CONTEXT_RULES: dict[str, ContextRule] = {}


def validator(hook: str) -> Callable[[Validator], Validator]:
    """Decorator: register `fn(answer) -> reason | None` as the rule of `hook` (one per hook)."""

    def register(fn: Validator) -> Validator:
        if hook in VALIDATORS:
            raise ValueError(f"{hook} already has a rule ({VALIDATORS[hook].__name__})")
        VALIDATORS[hook] = fn
        return fn

    return register


def context_rule(hook: str) -> Callable[[ContextRule], ContextRule]:
    """Decorator: register `fn(answer, arguments) -> reason | None` for `hook`, checked after its
    plain rule, with the arguments the implementation was called with."""

    def register(fn: ContextRule) -> ContextRule:
        CONTEXT_RULES[hook] = fn
        return fn

    return register


def type_names(expect: type | tuple[type, ...]) -> str:
    """'AttentionSpec', or 'int/AttentionWindow' for several types."""
    return expect.__name__ if isinstance(expect, type) else "/".join(t.__name__ for t in expect)


def type_problem(answer: object, expect: type | tuple[type, ...] | None) -> str | None:
    """'expected X' when `answer` is not an instance of `expect` (None: anything goes)."""
    if expect is None or isinstance(answer, expect):
        return None
    return f"expected {type_names(expect)}"


def problem(hook: str, answer: object, expect: type | tuple[type, ...] | None = None,
            arguments: Mapping | None = None) -> str | None:
    """Why `answer` to `hook` is unusable, or None: the caller's `expect` type first, then the
    hook's rule, then (given the `arguments` it was asked with) its rule against them."""
    reason = type_problem(answer, expect)
    try:
        if reason is None and hook in VALIDATORS:
            reason = VALIDATORS[hook](answer)
        if reason is None and arguments is not None and hook in CONTEXT_RULES:
            reason = CONTEXT_RULES[hook](answer, arguments)
    except Exception as exc:  # an answer the rule cannot even read is no usable answer
        reason = f"its check failed ({type(exc).__name__}: {exc})"
    return reason


def warning(plugin: str, hook: str, answer: object, reason: str) -> str:
    """The one warning line for an unusable answer."""
    if reason.startswith("expected "):  # a type rule
        return f"plugin '{plugin}' returned {type(answer).__name__} from {hook}, {reason}; ignored"
    return f"plugin '{plugin}' answered {hook} with {_short(answer)}: {reason}; ignored"


def _short(answer: object) -> str:
    text = repr(answer)
    return text if len(text) <= 60 else f"{type(answer).__name__} {text[:50]}..."


# -- the rules ------------------------------------------------------------------------------------
# The answer types the hook reference (rooflinekit.core.hookspecs) states, then their values: counts
# finite and not negative, sizes whole numbers of at least 1, K/V heads within the heads. A value a
# rule lets through is one the stages can compute with; docs/plugins.md lists the rules per hook.

#: The most heads, head width or window a spec may state: far past any model, small enough that
#: the products the costs form stay inside 64-bit sizes.
MAX_SIZE = 1 << 24

#: The most bytes a layer's cache may hold per token or per sequence: 1 TiB, past the memory of any
#: accelerator (the largest in hardware_db holds 288 GB), so that a larger answer is a mistake.
MAX_CACHE_BYTES = float(1 << 40)

#: The numbers of a fixed-state spec's `extra` that its cost reads (`rooflinekit.plugin.state_spec`).
STATE_COUNTS = ("state_elements", "conv_elements", "flops_per_token", "io_per_token")
STATE_ITEMSIZES = ("state_itemsize", "conv_itemsize")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count_problem(name: str, value: object) -> str | None:
    """'NAME must be ...' unless `value` is a finite number at least 0 (FLOPs, bytes)."""
    if not _is_number(value) or not 0 <= value < float("inf"):
        return f"{name} must be a finite number, not negative (got {value!r})"
    return None


def _size_problem(name: str, value: object, least: int = 1) -> str | None:
    """'NAME must be ...' unless `value` is a whole number from `least` to MAX_SIZE."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_SIZE:
        return f"{name} must be a whole number from {least} to {MAX_SIZE:,} (got {value!r})"
    return None


def _strings_problem(name: str, value: object) -> str | None:
    """'NAME must be ...' unless `value` is a tuple or list of strings (a lone string is not)."""
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        return f"{name} must be a tuple of strings (got {_short(value)})"
    return None


def _first(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r is not None), None)


def spec_problem(spec: object) -> str | None:
    """Why an AttentionSpec cannot be costed, or None: its type, names, sizes, heads and window."""
    found = type_problem(spec, AttentionSpec)
    if found is not None:
        return found
    if not isinstance(spec.arch, str) or not spec.arch:
        return f"arch must be a non-empty string (got {spec.arch!r})"
    found = _first(*(_size_problem(n, getattr(spec, n)) for n in ("num_heads", "num_kv_heads", "head_dim",
                                                                     "v_head_dim")))
    if found is not None:
        return found
    if spec.num_kv_heads > spec.num_heads:
        return f"num_kv_heads {spec.num_kv_heads} exceeds num_heads {spec.num_heads} (K/V heads are shared by heads)"
    if spec.num_heads % spec.num_kv_heads:
        return f"num_heads {spec.num_heads} is not a multiple of num_kv_heads {spec.num_kv_heads}"
    for name in ("window", "chunk"):
        value = getattr(spec, name)
        if value is not None and value != 0:
            found = found or _size_problem(name, value)
    if found is not None:
        return found
    if spec.mode is not None and not isinstance(spec.mode, str):
        return f"mode must be a string or None (got {spec.mode!r})"
    if not isinstance(spec.extra, Mapping):
        return f"extra must be a mapping (got {_short(spec.extra)})"
    if not isinstance(spec.fixed_state, bool):
        return f"fixed_state must be True or False (got {spec.fixed_state!r})"
    return _first(_state_problem(spec) if spec.fixed_state else None, _strings_problem("notes", spec.notes))


def _state_problem(spec: AttentionSpec) -> str | None:
    """Why a fixed-state spec's sizes cannot be costed: each count present, finite, not negative; an
    element size above 0; the state per sequence within MAX_CACHE_BYTES."""
    x = spec.extra
    missing = [k for k in STATE_COUNTS if k not in x]
    if missing:
        return f"a fixed-state spec needs extra[{missing[0]!r}] (rooflinekit.plugin.state_spec sets it)"
    found = _first(*(_count_problem(f"extra[{k!r}]", x[k]) for k in STATE_COUNTS))
    if found is not None:
        return found
    for key in STATE_ITEMSIZES:
        value = x.get(key)
        if value is not None and (not _is_number(value) or not 0 < value < float("inf")):
            return f"extra[{key!r}] must be a number of bytes above 0 (got {value!r})"
    widest = max(x.get(k) or 4 for k in STATE_ITEMSIZES)  # an element at most fp32 where not stated
    per_sequence = x["state_elements"] * widest + x["conv_elements"] * widest
    if per_sequence > MAX_CACHE_BYTES:
        return (f"a state of {per_sequence:.3g} B per sequence is past any device's memory "
                f"({MAX_CACHE_BYTES:.3g} B at most)")
    return None


def cost_problem(cost: object) -> str | None:
    """Why an AttentionCost cannot be placed, or None: every count finite and not negative, the
    bytes at least the cache's."""
    found = type_problem(cost, AttentionCost)
    if found is not None:
        return found
    found = _first(*(_count_problem(n, getattr(cost, n)) for n in (
        "flops_model", "kv_bytes_min", "bytes_min", "cache_bytes_per_token", "cache_bytes_per_sequence")))
    if found is not None:
        return found
    if cost.bytes_min < cost.kv_bytes_min:
        return "bytes_min must include kv_bytes_min"
    for name in ("cache_bytes_per_token", "cache_bytes_per_sequence"):
        if getattr(cost, name) > MAX_CACHE_BYTES:
            return (f"{name} of {getattr(cost, name):.3g} B is past any device's memory "
                    f"({MAX_CACHE_BYTES:.3g} B at most)")
    if not isinstance(cost.flops_alt, Mapping):
        return f"flops_alt must be a mapping of names to FLOPs (got {_short(cost.flops_alt)})"
    found = _first(*(_count_problem(f"flops_alt[{k!r}]", v) for k, v in cost.flops_alt.items()))
    return found or _strings_problem("notes", cost.notes)


@validator("rooflinekit_attention_spec")
@validator("rooflinekit_attention_spec_from_call")
def _attention_spec(answer: object) -> str | None:
    """An AttentionSpec with an arch, heads, widths from 1, K/V heads dividing the heads, a window
    and chunk from 1 when set."""
    return spec_problem(answer)


@validator("rooflinekit_attention_window")
def _attention_window(answer: object) -> str | None:
    """A window from 0 (0: full attention), or an AttentionWindow whose window and chunk are whole
    numbers from 0 and whose notes are strings."""
    if isinstance(answer, bool):
        return "expected int/AttentionWindow"
    found = type_problem(answer, (int, AttentionWindow))
    if found is not None:
        return found
    if isinstance(answer, int):
        return _size_problem("the window", answer, least=0)
    return _first(_size_problem("window", answer.window, least=0), _size_problem("chunk", answer.chunk, least=0),
                  _strings_problem("notes", answer.notes))


@validator("rooflinekit_attention_cost")
def _attention_cost(answer: object) -> str | None:
    """An AttentionCost whose FLOPs and bytes are finite and not negative, its bytes at least its cache's."""
    return cost_problem(answer)


@validator("rooflinekit_serving_attention")
def _serving_attention(answer: object) -> str | None:
    """As rooflinekit_attention_cost: finite counts, not negative, bytes_min including kv_bytes_min."""
    return cost_problem(answer)


@validator("rooflinekit_attention_shard")
def _attention_shard(answer: object) -> str | None:
    """An AttentionShard whose spec is a usable AttentionSpec, with the cache's split named, its
    kept-whole patterns strings, widths whole numbers and colwise shares in (0, 1]."""
    found = type_problem(answer, AttentionShard)
    if found is not None:
        return found
    found = spec_problem(answer.spec)
    if found is not None:
        return f"its spec: {found}" if not found.startswith("expected ") else \
            f"its spec must be an AttentionSpec (got {_short(answer.spec)})"
    if not isinstance(answer.kv, str) or not answer.kv:
        return f"kv must be a non-empty string (got {answer.kv!r})"
    found = _first(_strings_problem("replicated", answer.replicated),
                   _size_problem("replicated_below", answer.replicated_below, least=0),
                   None if answer.out_head_dim is None else _size_problem("out_head_dim", answer.out_head_dim))
    if found is not None:
        return found
    if not isinstance(answer.colwise_shares, Mapping):
        return f"colwise_shares must be a mapping (got {_short(answer.colwise_shares)})"
    for width, share in answer.colwise_shares.items():
        if _size_problem("a colwise_shares width", width) or not _is_number(share) or not 0 < share <= 1:
            return f"colwise_shares must map output widths to shares in (0, 1] (got {width!r}: {share!r})"
    if not isinstance(answer.note, str):
        return f"note must be a string (got {answer.note!r})"
    return None


@context_rule("rooflinekit_attention_shard")
def _shard_within_layer(answer: AttentionShard, arguments: Mapping) -> str | None:
    """One GPU's share of a layer is no larger than the layer: heads, K/V heads, widths and the
    spec's numeric sizes at most the unsharded spec's."""
    whole = arguments.get("spec")
    if not isinstance(whole, AttentionSpec):
        return None
    part = answer.spec
    for name in ("num_heads", "num_kv_heads", "head_dim", "v_head_dim"):
        if getattr(part, name) > getattr(whole, name):
            return f"its spec has {name} {getattr(part, name)}, more than the layer's {getattr(whole, name)}"
    for key, value in part.extra.items():
        before = whole.extra.get(key)
        if _is_number(value) and _is_number(before) and value > before:
            return f"its spec has extra[{key!r}] {value!r}, more than the layer's {before!r}"
    return None


@validator("rooflinekit_op_formulas")
def _formulas(answer: object) -> str | None:
    """A dict of op names (or op packets) to callables."""
    found = type_problem(answer, dict)
    if found is not None:
        return found
    for key, value in answer.items():
        if not callable(value):
            return f"the formula for {key!r} must be callable (got {type(value).__name__})"
        if isinstance(key, str) and not key:
            return "an op name must not be empty"
    return None


@validator("rooflinekit_tp_plan")
def _mapping(answer: object) -> str | None:
    """A dict (its entries are checked one by one where the plan is read: a bad entry is named and
    skipped, the rest of the plan kept)."""
    return type_problem(answer, dict)


@validator("rooflinekit_hardware_dirs")
def _hardware_dirs(answer: object) -> str | None:
    """A list (its entries are checked one by one where the folders are read)."""
    return type_problem(answer, (list, tuple))


@validator("rooflinekit_mixer_sites")
def _mixer_sites(answer: object) -> str | None:
    """A module path, or an iterable of them (a generator is read where the sites are gathered,
    its failure named there); a mapping or a number is not."""
    if isinstance(answer, str):
        return None
    if isinstance(answer, (Mapping, bytes)) or not isinstance(answer, Iterable):
        return "expected str/list of module paths"
    if isinstance(answer, (list, tuple, set, frozenset)):
        bad = next((p for p in answer if not isinstance(p, str)), _OK)
        if bad is not _OK:
            return f"every site must be a module path (a string), got {_short(bad)}"
    return None


_OK = object()


@validator("rooflinekit_advise_levers")
def _advise_levers(answer: object) -> str | None:
    """A list (each proposal is checked where the levers are gathered: a bad one is named and
    dropped, the plugin's others kept)."""
    return type_problem(answer, list)


@validator("rooflinekit_efficiency_source")
def _efficiency_source(answer: object) -> str | None:
    """The path of an efficiency file, as a string (the file itself is read and checked where it is used)."""
    return type_problem(answer, str) or (None if answer.strip() else "an empty path")


@validator("rooflinekit_kernel_times")
def _kernel_times(answer: object) -> str | None:
    """A database of measured kernels: a `label` string and a callable `seconds`."""
    if isinstance(getattr(answer, "label", None), str) and callable(getattr(answer, "seconds", None)):
        return None
    return "expected an object with label (str) and seconds(query)"


@validator("rooflinekit_workload_loader")
def _workload_loader(answer: object) -> str | None:
    """A ModelSource."""
    return type_problem(answer, ModelSource)


@validator("rooflinekit_module_model")
def _module_model(answer: object) -> str | None:
    """A ModuleModel."""
    return type_problem(answer, ModuleModel)


@validator("rooflinekit_option_transform")
def _option_transform(answer: object) -> str | None:
    """A Transform (name, applies, apply) or a callable of the functional form."""
    if callable(answer):
        return None
    if all(callable(getattr(answer, m, None)) for m in ("applies", "apply")) and \
            isinstance(getattr(answer, "name", None), str):
        return None
    return "expected a Transform (name, applies, apply) or a callable"
