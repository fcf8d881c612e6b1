"""Weight and KV cache formats, fp8 activations and multi-token decode: bad values, and requests a
model or hardware entry cannot serve, on every command that takes a workload."""

from __future__ import annotations

from bad_inputs.case import GQA, TINY, Case

CAT = "levers"
GPT2 = "{examples}/gpt2_mha.py"  # a make_inputs() without q_len

CASES = [
    Case("profile-unknown-weight-dtype", CAT, ["profile", GQA, "--weight-dtype", "int3", *TINY],
         ["unknown --weight-dtype 'int3'", "int4"]),
    Case("sweep-unknown-weight-dtype", CAT, ["sweep", GQA, "--weight-dtype", "nf4", *TINY],
         ["unknown --weight-dtype 'nf4'"]),
    Case("profile-unknown-kv-dtype", CAT, ["profile", GQA, "--kv-dtype", "fp4", *TINY], ["unknown --kv-dtype 'fp4'"]),
    Case("sweep-unknown-kv-dtype", CAT, ["sweep", GQA, "--kv-dtype", "e4m3", *TINY], ["unknown --kv-dtype 'e4m3'"]),
    Case("profile-fp8-dtype-no-peak", CAT, ["profile", GQA, "--dtype", "fp8", "-H", "A100", *TINY],
         ["hardware 'A100 SXM 80GB'", "no fp8 peak", "--dtype fp8"]),
    Case("sweep-fp8-dtype-no-peak", CAT, ["sweep", GQA, "--dtype", "fp8", "-H", "A100", "-b", "1", "-s", "64", *TINY],
         ["hardware 'A100 SXM 80GB'", "no fp8 peak"]),
    Case("profile-fp8-dtype-int8-weights", CAT, ["profile", GQA, "--dtype", "fp8", "--weight-dtype", "int8", *TINY],
         ["--dtype fp8", "not int8"]),
    Case("profile-group-size-zero", CAT, ["profile", GQA, "--weight-dtype", "int4", "--weight-group-size", "0", *TINY],
         ["--weight-group-size must be", "got 0"]),
    Case("profile-group-size-without-format", CAT, ["profile", GQA, "--weight-group-size", "64", *TINY],
         ["--weight-group-size applies to fp8, int8 and int4", "not bf16"]),
    Case("profile-group-size-not-int", CAT, ["profile", GQA, "--weight-group-size", "big", *TINY],
         ["'big' is not a valid integer"]),
    Case("profile-quantize-embeddings-alone", CAT, ["profile", GQA, "--quantize-embeddings", *TINY],
         ["--quantize-embeddings", "--weight-dtype"]),
    Case("profile-format-measured", CAT, ["profile", GQA, "--weight-dtype", "int4", "--device", "cpu", "--measure",
                                          *TINY], ["--weight-dtype", "drop --measure"]),
    Case("profile-q-len-prefill", CAT, ["profile", GQA, "--phase", "prefill", "--q-len", "4", *TINY],
         ["--q-len applies to decode only"]),
    Case("profile-q-len-one-prefill", CAT, ["profile", GQA, "--phase", "prefill", "--q-len", "1", *TINY],
         ["--q-len applies to decode only"]),
    Case("sweep-q-len-prefill", CAT, ["sweep", GQA, "--phase", "prefill", "--q-len", "2", *TINY],
         ["--q-len applies to decode only"]),
    Case("profile-q-len-zero", CAT, ["profile", GQA, "--q-len", "0", *TINY], ["--q-len must be", "at least 1, got 0"]),
    Case("profile-q-len-negative", CAT, ["profile", GQA, "--q-len", "-3", *TINY], ["--q-len must be", "got -3"]),
    Case("profile-q-len-over-context", CAT, ["profile", GQA, "--q-len", "8", "-s", "4", *TINY],
         ["--q-len 8 exceeds the context 4"]),
    Case("sweep-q-len-over-a-context", CAT, ["sweep", GQA, "--q-len", "8", "-s", "64,4", "-b", "1", *TINY],
         ["--q-len 8 exceeds the context 4"]),
    Case("profile-q-len-model-without-it", CAT, ["profile", GPT2, "--q-len", "2",
                                                 "-O", "layers=1"],
         ["--q-len 2", "make_inputs()", "gpt2_mha.py", "takes no q_len"]),
    Case("profile-q-len-as-option", CAT, ["profile", GQA, "--q-len", "2", "-O", "q_len=3", *TINY],
         ["option q_len", "--q-len N"]),
]
