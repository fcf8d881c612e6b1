"""A planned configuration as serving engines' command lines, checked against hand-written argv."""

from __future__ import annotations

from rooflinekit.core.plan import PlanConfig, Pool, Speculative
from rooflinekit.outputs.engine_flags import engine_commands, sglang, trtllm, trtllm_options, vllm
from rooflinekit.outputs.plan_text import commands_lines

AGG = PlanConfig(mode="aggregated", tp=2, ep=1, pp=1, replicas=4, weight_dtype="fp8", kv_dtype="fp8",
                 kernels="serving", batch=94, gpus=8, chunk=512, dtype="fp8")
DEP = PlanConfig(mode="disaggregated", tp=1, ep=16, pp=1, replicas=1, weight_dtype="fp8", kv_dtype="fp8",
                 kernels="serving", batch=64, gpus=32, dtype="fp8",
                 speculative=Speculative("MTP", 1, 0.7, 1.7, 0.001, 0.02),
                 prefill=Pool(1, 16, 1, 1, 1, 0.9), decode=Pool(1, 16, 1, 1, 64, 0.046), pool_ratio="16:16")


def test_an_aggregated_tp_configuration():
    assert vllm(AGG, "M") == ["vllm", "serve", "M", "--tensor-parallel-size", "2", "--max-num-seqs", "94",
                              "--enable-chunked-prefill", "--max-num-batched-tokens", str(512 + 94),
                              "--kv-cache-dtype", "fp8", "--quantization", "fp8", "--gpu-memory-utilization", "0.9"]
    assert sglang(AGG, "M") == ["python", "-m", "sglang.launch_server", "--model-path", "M", "--tp-size", "2",
                                "--max-running-requests", "94", "--chunked-prefill-size", "512",
                                "--kv-cache-dtype", "fp8_e4m3", "--quantization", "fp8", "--mem-fraction-static", "0.9"]
    assert trtllm(AGG, "M")[:12] == ["trtllm-serve", "M", "--tp_size", "2", "--pp_size", "1", "--max_batch_size",
                                     "94", "--max_num_tokens", "606", "--kv_cache_free_gpu_memory_fraction", "0.9"]
    assert trtllm_options(AGG) == "{kv_cache_config: {dtype: fp8}, enable_chunked_prefill: true}"


def test_data_parallel_attention_with_wide_expert_parallelism_in_pools():
    prefill, decode = vllm(DEP, "M", "prefill"), vllm(DEP, "M", "decode")
    for argv in (prefill, decode):
        assert argv[argv.index("--data-parallel-size") + 1] == "16" and "--enable-expert-parallel" in argv
    assert "--speculative-config" in decode and "--speculative-config" not in prefill
    assert '"kv_role": "kv_consumer"' in decode[-1] and '"kv_role": "kv_producer"' in prefill[-1]
    s = sglang(DEP, "M", "decode")
    assert s[s.index("--tp-size") + 1] == "16" and s[s.index("--dp-size") + 1] == "16"
    assert "--enable-dp-attention" in s and s[s.index("--ep-size") + 1] == "16"
    assert s[s.index("--max-running-requests") + 1] == str(64 * 16)  # the instance's: 64 per GPU
    assert s[-2:] == ["--disaggregation-mode", "decode"]
    assert s[s.index("--speculative-algorithm") + 1] == "NEXTN"
    t = trtllm(DEP, "M", "decode")
    assert t[t.index("--ep_size") + 1] == "16" and t[t.index("--tp_size") + 1] == "16"
    assert "enable_attention_dp: true" in trtllm_options(DEP, "decode")
    assert "num_nextn_predict_layers: 1" in trtllm_options(DEP, "decode")


def test_the_text_wraps_at_100_columns_and_reads_back_as_the_command():
    commands = engine_commands(DEP, "MODEL")
    assert [len(v) for v in commands.values()] == [2, 2, 4]  # trtllm: each command and its options file
    lines = commands_lines(commands)
    assert all(len(line) <= 100 for line in lines)
    read, current = [], None
    for line in lines:
        text = line.strip()
        if current is not None:
            current += " " + text.removesuffix("\\").strip()
        elif text.split(" ")[0] in ("vllm", "python", "trtllm-serve"):
            current = text.removesuffix("\\").strip()
        if current is not None and not text.endswith("\\"):
            read.append(current)
            current = None
    assert read == [line for lines in commands.values() for line in lines if not line.startswith("#")]
