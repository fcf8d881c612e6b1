"""What the expected time says in words beyond its figures: two-batch overlap, and the factors it
states and leaves to the user (clocks, the expert-parallel load)."""

from __future__ import annotations

#: What two-batch overlap is and where engines run it (Deployment.overlap; docs/accounting.md).
TWO_BATCH_WORDS = (
    "two-batch overlap: the step's tokens run as two micro-batches, one's collectives under the other's "
    "kernels; each kernel is priced at half the tokens (FLOPs and activation bytes halved, its weights "
    "read once per micro-batch, an MoE record's those of the experts half the tokens touch) and each "
    "collective at half its message, and the step is the longer stream: max(2 x kernels and launches at "
    "half, 2 x collectives at half); the fill of the first layer is left out. As DeepSeek's serving runs "
    "prefill and decode (DeepSeek-V3/R1 Inference System Overview, "
    "https://github.com/deepseek-ai/open-infra-index, 2025-03) and SGLang's --enable-two-batch-overlap "
    "(SGLang large-scale EP blog, 2025-05: decode -27% at 32 tokens per GPU, +25.5% at 256)"
)


#: The clock behind the fractions (a stated factor: it is not applied).
CLOCK_WORDS = (
    "clocks (stated, not applied): the fractions are of datasheet peaks, each computed at a stated clock "
    "(NVIDIA's H100 SXM tensor-core peaks at 1,830 MHz, not the 1,980 MHz boost (cudnn-frontend PR #650: "
    "132 SMs x 4,096 bf16 FLOP/clock x 1.83 GHz = 989 TFLOP/s), and the kernel measurements behind them "
    "ran at whatever clock the part held; a part held below that by its power limit runs slower (DeepGEMM"
    " issue #120: 1,980 -> 1,575 MHz with computation and communication overlapped)"
)
#: The expert-parallel load (a stated factor: --ep-imbalance applies a measured one).
EP_LOAD_WORDS = (
    "expert-parallel load (stated; --ep-imbalance applies one): the busiest rank is priced at {f:g}x the mean "
    "tokens{uniform}. Measured: TensorRT-LLM tech blog 4, Table 1 (DeepSeek-R1 on 32 GB200): max/mean 2.56 "
    "without expert load balancing, 1.11 with EPLB at EP 32 (288 slots); the step's expert kernels and all-to-all "
    "scale with it"
)


def stated_factors(ep: int, ep_imbalance: float) -> list[str]:
    """What the expected time leaves to the user, in words: the clocks, and under expert
    parallelism the load of the busiest rank."""
    lines = [CLOCK_WORDS]
    if ep > 1:
        uniform = " (1: the uniform expectation, as perfectly balanced routing gives)" if ep_imbalance == 1.0 else ""
        lines.append(EP_LOAD_WORDS.format(f=ep_imbalance, uniform=uniform))
    return lines
