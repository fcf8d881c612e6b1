"""Plain data types that plugins receive and return (the plugin author's vocabulary)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class AttentionSpec:
    """What an attention layer is, as its architecture defines it (not as the code runs it).

    For MLA, `num_kv_heads` is 1 (one shared latent), `head_dim` is the latent plus rope width the
    absorbed form attends over (576) and `v_head_dim` the latent width (512); the per-head sizes
    live in the MLA fields. `window` caps the positions attended (sliding-window attention).
    """

    arch: str  # "mha" | "gqa" | "mqa" | "mla" | another plugin's name
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    window: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    mla_v_head_dim: int | None = None
    mode: str | None = None  # MLA: "absorbed" | "naive"
    plugin: str = ""
    notes: tuple[str, ...] = ()

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


@dataclass(frozen=True)
class AttentionWorkload:
    """What an attention cost formula needs: batch, query length, positions attended, cache bytes."""

    batch: int
    q_len: int
    context: int
    phase: str
    cache_itemsize: int  # bytes per cached element (2 for bf16, 1 for fp8)
    act_itemsize: int  # bytes per q / output element
    causal: bool | None = None  # from the call (is_causal, or no mask); None: causal in prefill

    @property
    def is_causal(self) -> bool:
        return self.causal if self.causal is not None else self.phase == "prefill"


@dataclass(frozen=True)
class AttentionCost:
    """Architecture-level cost of one attention layer for one step."""

    flops_model: float
    kv_bytes_min: float  # the KV cache (of the positions attended) read once
    bytes_min: float  # kv_bytes_min plus q read and output written once
    cache_bytes_per_token: float  # per layer
    flops_alt: dict[str, float] = field(default_factory=dict)  # other conventions, by name
    notes: tuple[str, ...] = ()
