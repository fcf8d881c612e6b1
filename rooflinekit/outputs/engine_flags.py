"""A planned configuration as the command lines serving engines take (vLLM, SGLang, TensorRT-LLM).

One function per engine turns a `PlanConfig` into the argv of the engine's server: parallel sizes
(TP, PP, data-parallel attention with expert parallelism), the batch (max sequences), the tokens
a step carries (chunked prefill: the chunk plus the batch's decode tokens), the KV cache format,
fp8 weights (W8A8), the memory fraction and speculative decoding. Options as the engines document
them (vLLM 0.11 `vllm serve`, SGLang 0.5 `sglang.launch_server`, TensorRT-LLM 1.x `trtllm-serve`
with its `--extra_llm_api_options` YAML); a format an engine names otherwise is written its way
(SGLang's fp8 cache is `fp8_e4m3`; int4 weight-only is AWQ's; int8 weight-only has no flag: it
is the checkpoint's). Data-parallel attention: vLLM's DP size, SGLang's and TensorRT-LLM's
attention DP over a TP size of all the instance's GPUs; SGLang's running requests are the
instance's (the batch per GPU x DP).
A disaggregated configuration gives each pool's command (prefill and decode), with the engine's
disaggregation flag where it has one. What the plan assumed and an engine does not take (the
per-sequence acceptance rate, the arrival rate) is not written; two-batch overlap is SGLang's
`--enable-two-batch-overlap` and is not written for the other two.
"""

from __future__ import annotations

import shlex

from rooflinekit.core.plan import PlanConfig

ENGINES = ("vllm", "sglang", "trtllm")
#: The weight formats each engine's fp8 / int4 quantization flag stands for (None: as loaded).
_QUANT = {"fp8": "fp8", "fp8-weight-only": "fp8", "w4a16": "awq", "int4": "awq", "w8a16": None, "int8": None}


def _step_tokens(c: PlanConfig, batch: int) -> int:
    """Tokens one step may carry: the prefill chunk plus a decode token per sequence."""
    return (c.chunk or 0) + batch


def _dp(tp: int, ep: int) -> int:
    return ep if tp == 1 and ep > 1 else 1


def vllm(c: PlanConfig, model: str, role: str | None = None, experts: int | None = None) -> list[str]:
    tp, ep, pp, batch = _pool(c, role)
    dp = _dp(tp, ep)
    argv = ["vllm", "serve", model, "--tensor-parallel-size", str(tp)]
    if pp > 1:
        argv += ["--pipeline-parallel-size", str(pp)]
    if dp > 1:
        argv += ["--data-parallel-size", str(dp)]
    if ep > 1:
        argv += ["--enable-expert-parallel"]
    if _redundant(c, role):
        argv += ["--enable-eplb", "--eplb-config", f'{{"num_redundant_experts": {_redundant(c, role)}}}']
    argv += ["--max-num-seqs", str(batch)]
    if c.chunk and role is None:
        argv += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(_step_tokens(c, batch))]
    if c.kv_dtype == "fp8":
        argv += ["--kv-cache-dtype", "fp8"]
    if _QUANT.get(c.weight_dtype):
        argv += ["--quantization", _QUANT[c.weight_dtype]]
    argv += ["--gpu-memory-utilization", "0.9"]
    if c.speculative and role != "prefill":
        method = "mtp" if c.speculative.draft == "MTP" else "draft_model"
        argv += ["--speculative-config",
                 f'{{"method": "{method}", "num_speculative_tokens": {c.speculative.k}}}']
    if role is not None:
        kind = "kv_producer" if role == "prefill" else "kv_consumer"
        argv += ["--kv-transfer-config", f'{{"kv_connector": "NixlConnector", "kv_role": "{kind}"}}']
    return argv


def sglang(c: PlanConfig, model: str, role: str | None = None, experts: int | None = None) -> list[str]:
    tp, ep, pp, batch = _pool(c, role)
    dp = _dp(tp, ep)
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(tp * dp)]
    if dp > 1:
        argv += ["--dp-size", str(dp), "--enable-dp-attention"]
    if ep > 1:
        argv += ["--ep-size", str(ep)]
    if _redundant(c, role):
        argv += ["--ep-num-redundant-experts", str(_redundant(c, role))]
    if pp > 1:
        argv += ["--pp-size", str(pp)]
    argv += ["--max-running-requests", str(batch * dp)]
    if c.chunk and role is None:
        argv += ["--chunked-prefill-size", str(c.chunk)]
    if c.kv_dtype == "fp8":
        argv += ["--kv-cache-dtype", "fp8_e4m3"]
    if _QUANT.get(c.weight_dtype):
        argv += ["--quantization", _QUANT[c.weight_dtype]]
    argv += ["--mem-fraction-static", "0.9"]
    if c.speculative and role != "prefill":
        algorithm = "NEXTN" if c.speculative.draft == "MTP" else "STANDALONE"
        argv += ["--speculative-algorithm", algorithm, "--speculative-num-steps", str(c.speculative.k),
                 "--speculative-num-draft-tokens", str(c.speculative.k + 1)]
    if c.overlap == "two-batch" and ep > 1:
        argv += ["--enable-two-batch-overlap"]
    if role is not None:
        argv += ["--disaggregation-mode", role]
    return argv


def trtllm(c: PlanConfig, model: str, role: str | None = None, experts: int | None = None) -> list[str]:
    tp, ep, pp, batch = _pool(c, role)
    dp = _dp(tp, ep)
    argv = ["trtllm-serve", model, "--tp_size", str(tp * dp), "--pp_size", str(pp)]
    if ep > 1:
        argv += ["--ep_size", str(ep)]
    argv += ["--max_batch_size", str(batch), "--max_num_tokens", str(_step_tokens(c, batch) if c.chunk else batch),
             "--kv_cache_free_gpu_memory_fraction", "0.9"]
    options = trtllm_options(c, role, experts)
    if options:
        argv += ["--extra_llm_api_options", f"extra-{role or 'llm'}.yml"]
    return argv


def trtllm_options(c: PlanConfig, role: str | None = None, experts: int | None = None) -> str:
    """TensorRT-LLM's `--extra_llm_api_options` YAML for `c` (a flow mapping; "" when none);
    `experts`: the model's routed experts (its load balancer's slots add the redundant copies)."""
    tp, ep, _, _ = _pool(c, role)
    options = []
    if _dp(tp, ep) > 1:
        options.append("enable_attention_dp: true")
    if _redundant(c, role) and experts:  # expert slots: the routed experts and their redundant copies
        options.append(f"moe_config: {{load_balancer: {{num_slots: {experts + _redundant(c, role)}}}}}")
    if c.kv_dtype == "fp8":
        options.append("kv_cache_config: {dtype: fp8}")
    if c.chunk and role is None:
        options.append("enable_chunked_prefill: true")
    if c.speculative and role != "prefill" and c.speculative.draft == "MTP":
        options.append(f"speculative_config: {{decoding_type: MTP, num_nextn_predict_layers: {c.speculative.k}}}")
    return "{" + ", ".join(options) + "}" if options else ""


def _redundant(c: PlanConfig, role: str | None) -> int:
    """Redundant expert copies of the instance a command starts."""
    if role == "prefill" and c.prefill is not None:
        return c.prefill.redundant_experts
    if role == "decode" and c.decode is not None:
        return c.decode.redundant_experts
    return c.redundant_experts


def _pool(c: PlanConfig, role: str | None) -> tuple[int, int, int, int]:
    """(tp, ep, pp, batch) of the instance a command starts: the aggregated one, or a pool's."""
    if role == "prefill" and c.prefill is not None:
        return c.prefill.tp, c.prefill.ep, c.prefill.pp, 1
    if role == "decode" and c.decode is not None:
        return c.decode.tp, c.decode.ep, c.decode.pp, c.decode.batch
    return c.tp, c.ep, c.pp, c.batch


BUILDERS = {"vllm": vllm, "sglang": sglang, "trtllm": trtllm}


def engine_commands(c: PlanConfig, model: str, experts: int | None = None) -> dict[str, list[str]]:
    """Each engine's shell-quoted command lines for `c`: one per instance kind (aggregated; or the
    prefill pool's, then the decode pool's), each started as many times as the configuration's
    replicas or pool instances say; TensorRT-LLM's extra options file follows its command as
    `# extra-ROLE.yml: {...}`."""
    out: dict[str, list[str]] = {}
    roles = ("prefill", "decode") if c.mode == "disaggregated" else (None,)
    for name, build in BUILDERS.items():
        lines = []
        for role in roles:
            lines.append(shlex.join(build(c, model, role, experts)))
            if name == "trtllm" and trtllm_options(c, role, experts):
                lines.append(f"# extra-{role or 'llm'}.yml: {trtllm_options(c, role, experts)}")
        out[name] = lines
    return out
