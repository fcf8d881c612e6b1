"""The newer commands and options: `plan`'s targets and search space, pipeline parallelism
(--pp, --micro-batches), mixed steps (--mix, --chunk, --chunk-offset), and more values of the
older options every command takes (formats, --q-len, --memory-fraction, -O, hf:)."""

from __future__ import annotations

from bad_inputs.case import GQA, TINY, Case
from bad_inputs.configs import HF

CAT = "commands"
PLAN = ["plan", GQA, *TINY, "--gpus", "2", "--no-check"]


def _plan(name: str, args: list[str], needles: list[str]) -> Case:
    return Case(f"plan-{name}", CAT, [*PLAN, *args], needles)


PLANS = [
    _plan("isl-zero", ["--isl", "0"], ["--isl", "at least 1 token"]),
    _plan("isl-negative", ["--isl", "-4"], ["--isl"]),
    _plan("isl-words", ["--isl", "many"], ["--isl 'many'", "whole number of tokens"]),
    _plan("isl-fraction", ["--isl", "4.5"], ["--isl '4.5'"]),
    _plan("isl-nan", ["--isl", "nan"], ["--isl 'nan'"]),
    _plan("osl-zero", ["--osl", "0"], ["--osl", "at least 1 token"]),
    _plan("osl-words", ["--osl", "lots"], ["--osl 'lots'"]),
    _plan("osl-empty", ["--osl", ""], ["--osl"]),
    _plan("tpot-words", ["--tpot", "fast"], ["--tpot 'fast'", "50ms"]),
    _plan("tpot-negative", ["--tpot", "-5ms"], ["--tpot"]),
    _plan("tpot-zero", ["--tpot", "0"], ["--tpot"]),
    _plan("tpot-nan", ["--tpot", "nan"], ["--tpot"]),
    _plan("tpot-unit", ["--tpot", "5 parsecs"], ["--tpot"]),
    _plan("tpot-no-unit", ["--tpot", "40"], ["--tpot '40'", "40ms or 40s"]),
    _plan("ttft-no-unit", ["--ttft", "2"], ["--ttft '2'", "2ms or 2s"]),
    _plan("tp-above-gpus", ["--tp", "1,4"], ["--tp 4", "--gpus 4 or more"]),
    _plan("pp-above-gpus", ["--tp", "2", "--pp", "2,4"], ["--pp 2,4 x TP 2", "fewer stages"]),
    _plan("ttft-words", ["--ttft", "soon"], ["--ttft 'soon'"]),
    _plan("ttft-inf", ["--ttft", "inf"], ["--ttft"]),
    _plan("gpus-zero", ["--gpus", "0"], ["--gpus", "0"]),
    _plan("gpus-words", ["--gpus", "eight"], ["'eight' is not a valid integer"]),
    _plan("gpus-too-many", ["--gpus", "100000"], ["--gpus"]),
    _plan("weight-dtypes-unknown", ["--weight-dtypes", "bf16,int3"], ["--weight-dtypes", "choose from"]),
    _plan("weight-dtypes-empty", ["--weight-dtypes", ""], ["--weight-dtypes"]),
    _plan("weight-dtypes-commas", ["--weight-dtypes", ",,"], ["--weight-dtypes"]),
    _plan("kv-dtypes-unknown", ["--kv-dtypes", "fp4"], ["--kv-dtypes", "choose from"]),
    _plan("accept-without-draft", ["--accept", "0.5"], ["--accept", "--mtp N or --draft MODEL"]),
    _plan("accept-above-one", ["--mtp", "1", "--accept", "1.5"], ["--accept 1.5", "(0, 1]"]),
    _plan("accept-zero", ["--mtp", "1", "--accept", "0"], ["--accept", "(0, 1]"]),
    _plan("accept-negative", ["--mtp", "1", "--accept", "-0.2"], ["--accept", "(0, 1]"]),
    _plan("accept-nan", ["--mtp", "1", "--accept", "nan"], ["--accept"]),
    _plan("accept-words", ["--mtp", "1", "--accept", "most"], ["'most' is not a valid float"]),
    _plan("tp-words", ["--tp", "two"], ["--tp 'two'", "whole numbers"]),
    _plan("pp-words", ["--pp", "1,x"], ["--pp '1,x'"]),
    _plan("mode-unknown", ["--mode", "sideways"], ["--mode", "sideways"]),
    _plan("max-batch-zero", ["--max-batch", "0"], ["--max-batch"]),
    _plan("prefix-hit-one", ["--prefix-hit", "1"], ["--prefix-hit"]),
    _plan("mtp-zero", ["--mtp", "0"], ["--mtp"]),
    _plan("format-unknown", ["-f", "yaml"], ["'yaml' is not one of"]),
    Case("plan-no-model", CAT, ["plan"], ["Missing argument"]),
    Case("plan-missing-model", CAT, ["plan", "nope.py"], ["nope.py"]),
]

PROFILE = ["profile", GQA, *TINY]
PIPELINE = [
    Case("profile-pp-zero", CAT, [*PROFILE, "--pp", "0"], ["--pp must be", "got 0"]),
    Case("profile-pp-negative", CAT, [*PROFILE, "--pp", "-2"], ["--pp must be"]),
    Case("profile-pp-words", CAT, [*PROFILE, "--pp", "two"], ["'two' is not a valid integer"]),
    Case("profile-pp-huge", CAT, [*PROFILE, "--pp", "1000000"], ["--pp must be"]),
    Case("profile-pp-more-than-layers", CAT, [*PROFILE, "--pp", "4"], ["--pp 4"]),
    Case("profile-micro-batches-zero", CAT, [*PROFILE, "--pp", "2", "--micro-batches", "0"],
         ["--micro-batches must be"]),
    Case("profile-micro-batches-without-pp", CAT, [*PROFILE, "--micro-batches", "2"], ["give --pp above 1"]),
    Case("profile-micro-batches-over-batch", CAT, [*PROFILE, "-O", "layers=2", "--pp", "2", "--micro-batches", "8"],
         ["--micro-batches 8 exceeds the batch 1"]),
    Case("profile-micro-batches-words", CAT, [*PROFILE, "--pp", "2", "--micro-batches", "some"],
         ["'some' is not a valid integer"]),
    Case("sweep-pp-zero", CAT, ["sweep", GQA, *TINY, "--pp", "0"], ["--pp must be"]),
    Case("advise-pp-zero", CAT, ["advise", GQA, *TINY, "--pp", "0"], ["--pp must be"]),
]
MIXED = [
    Case("profile-mix-words", CAT, [*PROFILE, "--mix", "lots"], ["--mix"]),
    Case("profile-mix-no-seqs", CAT, [*PROFILE, "--mix", "4096"], ["--mix"]),
    Case("profile-mix-zero-seqs", CAT, [*PROFILE, "--mix", "4096:0"], ["--mix"]),
    Case("profile-mix-zero-context", CAT, [*PROFILE, "--mix", "0:4"], ["--mix"]),
    Case("profile-mix-negative", CAT, [*PROFILE, "--mix", "-5:4"], ["--mix"]),
    Case("profile-mix-huge-context", CAT, [*PROFILE, "--mix", f"{1 << 30}:1"], ["--mix"]),
    Case("profile-mix-empty", CAT, [*PROFILE, "--mix", ""], ["--mix"]),
    Case("profile-mix-trailing-comma", CAT, [*PROFILE, "--mix", "64:2,"], ["--mix"]),
    Case("profile-chunk-zero", CAT, [*PROFILE, "--chunk", "0"], ["--chunk"]),
    Case("profile-chunk-negative", CAT, [*PROFILE, "--chunk", "-8"], ["--chunk"]),
    Case("profile-chunk-words", CAT, [*PROFILE, "--chunk", "big"], ["'big' is not a valid integer"]),
    Case("profile-chunk-offset-alone", CAT, [*PROFILE, "--chunk-offset", "64"], ["--chunk-offset"]),
    Case("profile-chunk-offset-negative", CAT, [*PROFILE, "--chunk", "16", "--chunk-offset", "-1"],
         ["--chunk-offset"]),
]
OLDER = [
    Case("profile-format-unknown", CAT, [*PROFILE, "-f", "pdf"], ["'pdf' is not one of"]),
    Case("sweep-format-unknown", CAT, ["sweep", GQA, *TINY, "-f", "xml"], ["'xml' is not one of"]),
    Case("compare-format-unknown", CAT, ["compare", "a.json", "b.json", "-f", "yaml"], ["'yaml' is not one of"]),
    Case("profile-q-len-words", CAT, [*PROFILE, "--q-len", "two"], ["'two' is not a valid integer"]),
    Case("profile-q-len-huge", CAT, [*PROFILE, "--q-len", "100000", "-s", "200000"], ["--q-len must be at most"]),
    Case("advise-q-len-zero", CAT, ["advise", GQA, *TINY, "--q-len", "0"], ["--q-len must be"]),
    Case("profile-memory-fraction-nan", CAT, [*PROFILE, "--memory-fraction", "nan"], ["--memory-fraction"]),
    Case("profile-memory-fraction-inf", CAT, [*PROFILE, "--memory-fraction", "inf"], ["--memory-fraction"]),
    Case("sweep-memory-fraction-zero", CAT, ["sweep", GQA, *TINY, "--memory-fraction", "0"], ["--memory-fraction"]),
    Case("profile-option-empty-key", CAT, [*PROFILE, "-O", "=5"], ["option name ''"]),
    Case("profile-option-unknown", CAT, [*PROFILE, "-O", "flavour=mint"], ["option flavour is not accepted"]),
    Case("sweep-option-not-kv", CAT, ["sweep", GQA, "-O", "layers"], ["'layers' is not KEY=VALUE"]),
    Case("advise-option-not-kv", CAT, ["advise", GQA, "-O", "heads"], ["'heads' is not KEY=VALUE"]),
    Case("profile-hf-unknown-type", CAT, ["profile", "hf:not_a_model_type"], ["not_a_model_type"], marks=HF),
    Case("sweep-hf-empty", CAT, ["sweep", "hf:"], ["hf:"], marks=HF),
    Case("advise-hf-empty", CAT, ["advise", "hf:"], ["hf:"], marks=HF),
]

CASES = [*PLANS, *PIPELINE, *MIXED, *OLDER]
