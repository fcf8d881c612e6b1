"""Measured mode asked for where it cannot run, or with values it cannot use (docs/measured.md)."""

from __future__ import annotations

import pytest
import torch

from bad_inputs.case import GQA, TINY, Case

CAT = "measured"
CPU = ["--device", "cpu", "--dtype", "fp32"]
NO_CUDA = (pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here: the run would succeed"),)

CASES = [
    Case("measure-on-meta", CAT, ["profile", GQA, "--measure", *TINY], ["--measure", "--device cpu", "meta device"]),
    Case("measure-on-meta-explicit", CAT, ["profile", GQA, "--device", "meta", "--measure", *TINY],
         ["meta device"]),
    Case("trace-without-measure", CAT, ["profile", GQA, "--trace", "{dir}/t.json", *TINY], ["--trace", "--measure"]),
    Case("trace-on-cpu-without-measure", CAT, ["profile", GQA, *CPU, "--trace", "{dir}/t.json", *TINY],
         ["--trace", "--measure"]),
    Case("trace-with-no-measure", CAT, ["profile", GQA, *CPU, "--no-measure", "--trace", "{dir}/t.json", *TINY],
         ["--trace", "--measure"]),
    Case("repeats-zero", CAT, ["profile", GQA, *CPU, "--measure", "--repeats", "0", *TINY], ["--repeats", "got 2 and 0"]),
    Case("repeats-negative", CAT, ["profile", GQA, *CPU, "--measure", "--repeats", "-3", *TINY], ["--repeats"]),
    Case("repeats-absurd", CAT, ["profile", GQA, *CPU, "--measure", "--repeats", "1000000000", *TINY], ["--repeats"]),
    Case("repeats-not-a-number", CAT, ["profile", GQA, *CPU, "--measure", "--repeats", "five", *TINY],
         ["'five' is not a valid integer"]),
    Case("warmup-negative", CAT, ["profile", GQA, *CPU, "--measure", "--warmup", "-1", *TINY], ["--warmup", "got -1"]),
    Case("warmup-absurd", CAT, ["profile", GQA, *CPU, "--measure", "--warmup", "99999999", *TINY], ["--warmup"]),
    Case("measure-with-tp", CAT, ["profile", GQA, *CPU, "--measure", "--tp", "2", *TINY], ["--tp/--ep", "--measure"]),
    Case("measure-with-ep", CAT, ["profile", GQA, *CPU, "--measure", "--ep", "2", *TINY], ["--tp/--ep", "--measure"]),
    Case("measure-unknown-compare-hardware", CAT,
         ["profile", GQA, *CPU, "--measure", "--compare-hardware", "H9000", *TINY], ["unknown hardware 'H9000'"]),
    Case("measure-cuda-without-cuda", CAT, ["profile", GQA, "--device", "cuda", *TINY], ["cuda"], marks=NO_CUDA),
]
