"""Mixed steps (`--mix`, `--chunk`, `--chunk-offset`): decode groups at several contexts and a
chunked-prefill slice in one step, the weights read once, attention per segment.

Every expected number is computed here from separate plain profiles of each segment (decode at its
context and batch; the chunk as a prefill, or after P cached tokens as a decode step of q_len C over
P + C slots) and from closed forms (KV cache bytes: layers x sequences x context x 2 x Hkv x d x 2)."""

from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES, TINY_LLAMA, one_line_error

from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.core.errors import UserError
from rooflinekit.core.request import Deployment, Segment, Workload, mixed_workload
from rooflinekit.stages.model_source import load_source

GQA = EXAMPLES / "llama_gqa.py"
LLAMA8B = EXAMPLES / "configs" / "llama-3.1-8b.json"
BF16 = 2
MIX = ((64, 4), (128, 2))
CHUNK, OFFSET = 32, 16


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


def run(path, workload: Workload, options: dict):
    return run_profile(load_source(str(path), options), workload, Deployment("H800")).report


def plain(options: dict, phase: str, batch: int, context: int, q_len: int = 1) -> Workload:
    return Workload(phase, batch, context, options=tuple(sorted(options.items())), decode_q_len=q_len)


def separate(path, options: dict, mix, chunk: int, offset: int) -> list:
    """The plain profiles of each segment, built here without Workload.segments."""
    reports = [run(path, plain(options, "decode", n, c), options) for c, n in mix]
    if chunk:
        w = (plain(options, "prefill", 1, chunk) if offset == 0
             else plain(options, "decode", 1, offset + chunk, q_len=chunk))
        reports.append(run(path, w, options))
    return reports


def weights_read_whole(report, vocab: int, hidden: int, buffers: float = 0.0) -> float:
    """Weight bytes the step's products read whole: every parameter but the embedding table, whose
    rows are gathered per token (and so summed over the segments, not read once), less `buffers`
    the model reads as operands of its own copies (a rotary embedding's inv_freq, cast and expanded
    per forward: summed too)."""
    return report.model.param_bytes - vocab * hidden * BF16 - buffers


@pytest.fixture(scope="module")
def gqa_mix():
    w = mixed_workload(plain(TINY_LLAMA, "decode", 1, 64), MIX, CHUNK, OFFSET)
    return w, run(GQA, w, TINY_LLAMA), separate(GQA, TINY_LLAMA, MIX, CHUNK, OFFSET)


def test_mix_flops_are_the_segments_sum_and_weights_are_read_once(gqa_mix):
    w, mixed, parts = gqa_mix
    assert close(mixed.totals.flops, sum(p.totals.flops for p in parts))
    once = weights_read_whole(mixed, TINY_LLAMA["vocab"], TINY_LLAMA["hidden"])
    expected = sum(p.totals.bytes for p in parts) - (len(parts) - 1) * once
    assert close(mixed.totals.bytes, expected)
    assert w.tokens == 4 + 2 + CHUNK and mixed.workload.tokens == w.tokens


def test_mix_attention_rows_are_per_segment_at_their_own_context(gqa_mix):
    _, mixed, parts = gqa_mix
    labels = ["decode 64x4", "decode 128x2", f"chunk {CHUNK}@{OFFSET}"]
    assert [a.module for a in mixed.attention] == [f"layers.0.self_attn [{x}]" for x in labels]
    for row, part in zip(mixed.attention, parts, strict=True):
        (alone,) = part.attention
        for key in ("kv_bytes_min", "flops_model", "bytes_min", "kv_bytes_executed", "flops_executed"):
            assert close(getattr(row, key), getattr(alone, key)), key
    per_token = 2 * TINY_LLAMA["kv_heads"] * TINY_LLAMA["head_dim"] * BF16  # K and V, one layer
    assert close(mixed.attention[0].kv_bytes_min, 4 * 64 * per_token)
    assert close(mixed.attention[1].kv_bytes_min, 2 * 128 * per_token)
    assert close(mixed.attention[2].kv_bytes_min, (OFFSET + CHUNK) * per_token)


def test_mix_memory_holds_each_segments_cache(gqa_mix):
    _, mixed, parts = gqa_mix
    per_token = 2 * TINY_LLAMA["kv_heads"] * TINY_LLAMA["head_dim"] * BF16 * TINY_LLAMA["layers"]
    held = 4 * 64 + 2 * 128 + (OFFSET + CHUNK)
    assert close(mixed.memory.kv_cache_bytes, held * per_token)
    assert close(mixed.memory.kv_cache_bytes, sum(p.memory.kv_cache_bytes for p in parts))
    assert close(mixed.memory.activation_peak_bytes, sum(p.memory.activation_peak_bytes for p in parts))


def test_mix_workload_fields_and_segments(gqa_mix):
    w, mixed, _ = gqa_mix
    data = mixed.to_dict()["workload"]
    assert data["phase"] == "mixed" and data["batch"] == 7 and data["context"] == 128
    assert data["mix"] == [[64, 4], [128, 2]] and data["chunk"] == CHUNK and data["chunk_offset"] == OFFSET
    assert w.segments() == [Segment("decode", 4, 64, 1, 63), Segment("decode", 2, 128, 1, 127),
                            Segment("prefill", 1, OFFSET + CHUNK, CHUNK, OFFSET)]
    assert "mix" not in plain(TINY_LLAMA, "decode", 4, 64).to_dict()
    assert plain(TINY_LLAMA, "decode", 4, 64).segments() == [Segment("decode", 4, 64, 1, 63)]


def test_a_mix_of_one_group_is_the_plain_decode_profile():
    alone = run(GQA, plain(TINY_LLAMA, "decode", 4, 64), TINY_LLAMA)
    mixed = run(GQA, mixed_workload(plain(TINY_LLAMA, "decode", 1, 1), ((64, 4),)), TINY_LLAMA)
    assert mixed.totals.flops == alone.totals.flops and mixed.totals.bytes == alone.totals.bytes
    assert mixed.totals.time_bound_s == alone.totals.time_bound_s
    assert [o.flops for o in mixed.ops] == [o.flops for o in alone.ops]
    assert [o.bytes for o in mixed.ops] == [o.bytes for o in alone.ops]
    (a,), (b,) = mixed.attention, alone.attention
    assert (a.kv_bytes_min, a.flops_model, a.kv_bytes_executed) == (b.kv_bytes_min, b.flops_model, b.kv_bytes_executed)
    assert mixed.memory.kv_cache_bytes == alone.memory.kv_cache_bytes
    assert mixed.memory.activation_peak_bytes == alone.memory.activation_peak_bytes


def test_a_chunk_alone_at_offset_zero_is_the_plain_prefill():
    alone = run(GQA, plain(TINY_LLAMA, "prefill", 1, CHUNK), TINY_LLAMA)
    mixed = run(GQA, mixed_workload(plain(TINY_LLAMA, "decode", 1, 1), (), CHUNK, 0), TINY_LLAMA)
    assert mixed.totals.flops == alone.totals.flops and mixed.totals.bytes == alone.totals.bytes
    assert mixed.workload.tokens == CHUNK


def test_mix_on_a_model_file_without_q_len_needs_offset_zero():
    mha = EXAMPLES / "gpt2_mha.py"
    opts = {"layers": 1}
    step = mixed_workload(plain(opts, "decode", 1, 1), ((64, 2),), 16, 8)
    with pytest.raises(UserError, match="takes no q_len"):
        run(mha, step, opts)
    mixed = run(mha, mixed_workload(plain(opts, "decode", 1, 1), ((64, 2),), 16, 0), opts)
    parts = separate(mha, opts, ((64, 2),), 16, 0)
    assert close(mixed.totals.flops, sum(p.totals.flops for p in parts))


def test_measure_refuses_a_mixed_step():
    step = mixed_workload(plain(TINY_LLAMA, "decode", 1, 1, ), ((64, 2),))
    step = Workload(**{**step.__dict__, "device": "cpu"})
    with pytest.raises(UserError, match="drop --measure"):
        run_profile(load_source(str(GQA), TINY_LLAMA), step, Deployment("H800"), options=ReportOptions(measure=True))


def test_cli_mix_json(invoke):
    args = [GQA, *[f"-O{k}={v}" for k, v in TINY_LLAMA.items()], "-H", "H800", "--mix", "64:4,128:2",
            "--chunk", CHUNK, "--chunk-offset", OFFSET, "-f", "json"]
    result = invoke("profile", *args)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["workload"]["mix"] == [[64, 4], [128, 2]] and len(data["attention"]) == 3
    assert data["attention"][2]["extra"]["segment"] == {"phase": "prefill", "batch": 1, "context": 48,
                                                        "q_len": CHUNK, "offset": OFFSET}


@pytest.mark.parametrize("args,needle", [
    (["--mix", "64:0"], "sequences must be 1"),
    (["--mix", "0:4"], "context must be 1"),
    (["--mix", "64"], "is not CONTEXT:SEQUENCES"),
    (["--mix", "64:x"], "is not CONTEXT:SEQUENCES"),
    (["--chunk", "0"], "--chunk must be at least 1"),
    (["--chunk", "8", "--chunk-offset", "-1"], "--chunk-offset must be at least 0"),
    (["--chunk-offset", "4"], "give --chunk N too"),
    (["--mix", "64:2", "-b", "4"], "drop --batch"),
    (["--mix", "64:2", "--phase", "decode", "-s", "128"], "drop --phase, --context"),
    (["--mix", "64:2", "--q-len", "128"], "exceeds the context 64"),
])
def test_cli_mix_bad_inputs(invoke, args, needle):
    result = invoke("profile", GQA, "-O", "layers=1", *args)
    one_line_error(result, needle)


@pytest.mark.hf
def test_mix_on_a_transformers_config():
    opts = {"layers": 2}
    config = json.loads(LLAMA8B.read_text())
    mix = ((256, 4), (512, 2))
    w = mixed_workload(plain(opts, "decode", 1, 1), mix, 64, 128)
    mixed = run(LLAMA8B, w, opts)
    parts = separate(LLAMA8B, opts, mix, 64, 128)
    assert close(mixed.totals.flops, sum(p.totals.flops for p in parts))
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    inv_freq = head_dim // 2 * 4  # the rotary embedding's fp32 buffer, read by a copy in each forward
    once = weights_read_whole(mixed, config["vocab_size"], config["hidden_size"], inv_freq)
    assert close(mixed.totals.bytes, sum(p.totals.bytes for p in parts) - (len(parts) - 1) * once)
    per_token = 2 * config["num_key_value_heads"] * head_dim * BF16
    held = 4 * 256 + 2 * 512 + (128 + 64)
    assert close(mixed.memory.kv_cache_bytes, opts["layers"] * held * per_token)
    assert len(mixed.attention) == 3 * opts["layers"]
