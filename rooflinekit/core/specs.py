"""Plain data types that plugins receive and return (the plugin author's vocabulary)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class AttentionSpec:
    """What an attention layer is, as its architecture defines it (not as the code runs it).

    The core knows no architecture: `arch` is the name a plugin gave (the built-ins: "mha", "gqa",
    "mqa", "mla"), `mode` a variant of it (MLA: "absorbed" or "naive"), and `extra` carries the
    fields one architecture needs (MLA: kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
    v_head_dim), written into the JSON report's attention row as given (keep them JSON values).
    For MLA, `num_kv_heads` is 1 (one shared latent), `head_dim` is the latent plus rope width the
    absorbed form attends over (576) and `v_head_dim` the latent width (512). `plugin` is filled
    by the core with the name of the plugin that recognised the layer.

    `window` caps the positions attended (sliding-window attention: each query sees itself and the
    `window - 1` positions before it); `chunk` is chunked attention (Llama
    4's `attention_chunk_size`: a query sees the keys of its own chunk of `chunk` positions up to
    itself). Both are independent of the architecture; the core sets them from the
    `rooflinekit_attention_window` hook when the recognising plugin left them unset, and
    `rooflinekit.core.keys` counts the positions and pairs they leave.
    """

    arch: str  # the recognising plugin's name for the architecture ("mha", "gqa", "mla", ...)
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    window: int | None = None
    mode: str | None = None  # a variant of the architecture (MLA: "absorbed" | "naive")
    extra: Mapping[str, Any] = field(default_factory=dict)  # architecture-specific fields
    plugin: str = ""  # set by the core: the plugin that recognised the layer
    notes: tuple[str, ...] = ()
    chunk: int | None = None  # chunked attention: keys of the query's own chunk only
    #: A layer that keeps a fixed-size state per sequence instead of a per-position K/V cache
    #: (an SSM, linear attention, an RNN, a short convolution): no window applies, its cost gives
    #: `cache_bytes_per_sequence`, and its executed cache traffic is its state's reads and writes.
    fixed_state: bool = False

    @property
    def group_size(self) -> float:
        return self.num_heads / self.num_kv_heads

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class AttentionCall:
    """An attention computation seen at run time, for plugins that recognise from shapes.

    Shapes are those of the fused call (F.scaled_dot_product_attention) or of the QK^T operands.
    `kv_heads_unique` is the number of distinct K/V heads after undoing a repeat/expand the code
    made before the call (a repeat_kv copy), or None when no repeat was seen.
    """

    module: str
    module_class: str
    q_shape: tuple[int, ...]
    k_shape: tuple[int, ...]
    v_shape: tuple[int, ...]
    enable_gqa: bool = False
    kv_heads_unique: int | None = None
    fused: bool = True
    #: The most keys any query row of the call's attention mask lets through, where the mask holds
    #: values (a real device, not meta); None without a mask or values. Below the key length, the
    #: mask is banded (a sliding window written into the mask).
    mask_keys: int | None = None


@dataclass(frozen=True)
class AttentionWindow:
    """Which keys a query sees, as the `rooflinekit_attention_window` hook may answer it.

    `window`: positions each query attends, itself included (0: full attention). `chunk`: chunked
    attention, keys of the query's own chunk of `chunk` positions (0: none). `notes` say where the
    answer came from and what was assumed; they join the layer's notes.
    """

    window: int = 0
    chunk: int = 0
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttentionWorkload:
    """What an attention cost formula needs: batch, query length, positions attended, cache bytes."""

    batch: int
    q_len: int
    context: int
    phase: str
    cache_itemsize: int  # bytes per cached element (2 for bf16, 1 for fp8)
    act_itemsize: int  # bytes per q / output element
    causal: bool | None = None  # from the call (is_causal, or no mask); None: causal unless one query
    #: Whether the deployment sets the cache format (--kv-dtype, or fp8 activations): a fixed state
    #: the code keeps at a dtype of its own (a float32 recurrent state) is then costed at
    #: `cache_itemsize` too. None: given where `cache_itemsize` differs from `act_itemsize`.
    cache_format_given: bool | None = None

    @property
    def cache_format_set(self) -> bool:
        """Whether the cache's element size was set by the deployment (`cache_format_given`)."""
        if self.cache_format_given is not None:
            return self.cache_format_given
        return self.cache_itemsize != self.act_itemsize

    @property
    def is_causal(self) -> bool:
        """Causal as the call says; else in prefill and in multi-token decode (new tokens see each
        other causally; one decode query sees every key either way)."""
        return self.causal if self.causal is not None else (self.phase == "prefill" or self.q_len > 1)


@dataclass(frozen=True)
class AttentionCost:
    """Architecture-level cost of one attention layer for one step."""

    flops_model: float
    kv_bytes_min: float  # the KV cache (of the positions attended) read once
    bytes_min: float  # kv_bytes_min plus q read and output written once
    cache_bytes_per_token: float  # per layer
    flops_alt: dict[str, float] = field(default_factory=dict)  # other conventions, by name
    notes: tuple[str, ...] = ()
    #: A fixed state per sequence (per layer) that does not grow with context: recurrent, SSM,
    #: linear-attention and convolution states. For such a layer `kv_bytes_min` is that state
    #: read (when there is a past) and written once per step, for the whole batch.
    cache_bytes_per_sequence: float = 0.0


@dataclass(frozen=True)
class AttentionShard:
    """How one attention layer splits under planned tensor parallelism N (`--tp N`), as the
    `rooflinekit_attention_shard` hook answers it for the layer's architecture.

    The core splits the layer's projections by structure (the output projection rowwise, the
    others colwise) and re-costs one GPU's spec; this says what depends on the architecture.
    """

    #: One GPU's spec: heads / N, the K/V heads one GPU holds, a note added; re-costed as is.
    spec: AttentionSpec
    #: How the cache splits, for the report: "split", "replicated" (N > H_kv: each GPU holds one
    #: K/V head, each head on N / H_kv GPUs) or the plugin's own word ("latent replicated").
    kv: str = "split"
    #: fnmatch patterns of the layer's Linear children (by name) that every GPU runs whole (MLA's
    #: low-rank down projections) ...
    replicated: tuple[str, ...] = ()
    #: ... and any of its Linear children with fewer output features than this.
    replicated_below: int = 0
    #: Per-head width of the attention output the output projection reads (None: `v_head_dim`).
    out_head_dim: int | None = None
    #: Output features -> the share of them one GPU computes, for colwise Linear children whose
    #: share is not 1/N (K/V projections of K/V heads replicated over GPUs).
    colwise_shares: Mapping[int, float] = field(default_factory=dict)
    #: One sentence for the layer's notes: what one GPU holds.
    note: str = ""


class ModuleModel:
    """Base class for analytic stand-ins. Subclasses implement `forward` and set `assumption`."""

    #: One sentence stating the model's assumption, shown in every report that used it.
    assumption: str = ""
    #: How the counts it emits scale, for sweeps that fit counts over a grid
    #: (rooflinekit.stages.fitted_capture): "polynomial" if they are polynomials of degree at most 1 in batch
    #: and 2 in context, as ops' own counts are, so a sweep may evaluate them from a few captures;
    #: None (the default: data-dependent, e.g. the distinct experts an MoE batch touches) makes
    #: every sweep point a capture of its own.
    scaling: str | None = None

    def forward(self, module: Any, path: str, args: tuple, kwargs: dict) -> Any:
        """The module's output for `args`/`kwargs`, emitting modelled records (`emit`) as it goes."""
        raise NotImplementedError

    @property
    def assumption_note(self) -> str:
        return f"{type(self).__name__}: {self.assumption}"
