"""What a usable hook answer is: one rule per hook, checked in one place for every plugin.

The plugin host (`rooflinekit.core.plugins`) checks each implementation's non-None answer with
`problem(hook, answer)` as the implementation returns it. An answer with a problem is named in one
warning (`warning`) and treated as None, so pluggy goes on to the next implementation: a plugin
that answers wrongly hides no plugin after it.

A rule is a function of the answer returning None when the answer is fine, or a one-line reason
when it is not, registered for its hook with `@validator("rooflinekit_...")`. A type rule's
reason starts with "expected " (`type_problem`), which `warning` words as
"returned T from hook, expected X".

Only hooks whose answer types live in `rooflinekit.core` have rules here; the stages' own types
(`ModelSource`, `ModuleModel`) are checked by the caller's `expect=` argument of `call_first`.
"""

from __future__ import annotations

from collections.abc import Callable

from rooflinekit.core.specs import AttentionCost, AttentionShard, AttentionSpec, AttentionWindow

#: A rule: None if the answer is fine, else a one-line reason it is not.
Validator = Callable[[object], "str | None"]

#: Hook name -> its rule.
VALIDATORS: dict[str, Validator] = {}


def validator(hook: str) -> Callable[[Validator], Validator]:
    """Decorator: register `fn(answer) -> reason | None` as the rule of `hook` (one per hook)."""

    def register(fn: Validator) -> Validator:
        if hook in VALIDATORS:
            raise ValueError(f"{hook} already has a rule ({VALIDATORS[hook].__name__})")
        VALIDATORS[hook] = fn
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


def problem(hook: str, answer: object, expect: type | tuple[type, ...] | None = None) -> str | None:
    """Why `answer` to `hook` is unusable, or None: the caller's `expect` type first, then the
    hook's rule."""
    reason = type_problem(answer, expect)
    if reason is None and hook in VALIDATORS:
        try:
            reason = VALIDATORS[hook](answer)
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
# The answer types the hook reference (rooflinekit.core.hookspecs) states. A hook's checks of values
# (heads positive, costs finite, ...) belong in its rule here, after the type check.


@validator("rooflinekit_attention_spec")
@validator("rooflinekit_attention_spec_from_call")
def _attention_spec(answer: object) -> str | None:
    return type_problem(answer, AttentionSpec)


@validator("rooflinekit_attention_window")
def _attention_window(answer: object) -> str | None:
    return type_problem(answer, (int, AttentionWindow))


@validator("rooflinekit_attention_cost")
def _attention_cost(answer: object) -> str | None:
    return type_problem(answer, AttentionCost)


@validator("rooflinekit_serving_attention")
def _serving_attention(answer: object) -> str | None:
    """An AttentionCost whose FLOPs and bytes are finite and not negative, its bytes at least its cache's."""
    found = type_problem(answer, AttentionCost)
    if found is not None:
        return found
    values = (answer.flops_model, answer.kv_bytes_min, answer.bytes_min)
    if not all(isinstance(v, (int, float)) and 0 <= v < float("inf") for v in values):
        return "FLOPs and bytes must be finite numbers, not negative"
    if answer.bytes_min < answer.kv_bytes_min:
        return "bytes_min must include kv_bytes_min"
    return None


@validator("rooflinekit_attention_shard")
def _attention_shard(answer: object) -> str | None:
    return type_problem(answer, AttentionShard)


@validator("rooflinekit_op_formulas")
@validator("rooflinekit_tp_plan")
def _mapping(answer: object) -> str | None:
    return type_problem(answer, dict)


@validator("rooflinekit_hardware_dirs")
def _hardware_dirs(answer: object) -> str | None:
    return type_problem(answer, (list, tuple))


@validator("rooflinekit_advise_levers")
def _advise_levers(answer: object) -> str | None:
    return type_problem(answer, list)
