"""Usage errors: bad option values and missing arguments, for every command."""

from __future__ import annotations

from bad_inputs.case import GQA, TINY, Case

CAT = "usage"
CASES = [
    Case("profile-no-model", CAT, ["profile"], ["Missing argument 'MODEL'"]),
    Case("profile-bad-phase", CAT, ["profile", GQA, "--phase", "train", *TINY], ["unknown phase 'train'"]),
    Case("profile-zero-batch", CAT, ["profile", GQA, "-b", "0", *TINY], ["batch must be at least 1"]),
    Case("profile-batch-not-int", CAT, ["profile", GQA, "-b", "four"], ["'four' is not a valid integer"]),
    Case("profile-bad-dtype", CAT, ["profile", GQA, "--dtype", "fp4", *TINY], ["unknown dtype 'fp4'"]),
    Case("profile-bad-device", CAT, ["profile", GQA, "--device", "tpu", *TINY], ["unknown device 'tpu'"]),
    Case("profile-option-not-kv", CAT, ["profile", GQA, "-O", "layers"], ["'layers' is not KEY=VALUE"]),
    Case("profile-unknown-hardware", CAT, ["profile", GQA, "-H", "H9000", *TINY], ["unknown hardware 'H9000'"]),
    Case("sweep-bad-batches", CAT, ["sweep", GQA, "-b", "1,x"], ["--batch"]),
    Case("profile-memory-fraction-zero", CAT, ["profile", GQA, "--memory-fraction", "0", *TINY],
         ["--memory-fraction must be in (0, 1]"]),
    Case("sweep-memory-fraction-above-one", CAT, ["sweep", GQA, "--memory-fraction", "1.5", *TINY],
         ["--memory-fraction must be in (0, 1]", "1.5"]),
    Case("advise-memory-fraction-negative", CAT, ["advise", GQA, "--memory-fraction", "-0.5", *TINY],
         ["--memory-fraction must be in (0, 1]", "-0.5"]),
    Case("advise-memory-fraction-not-number", CAT, ["advise", GQA, "--memory-fraction", "most"],
         ["'most' is not a valid float"]),
    Case("advise-no-model", CAT, ["advise"], ["Missing argument 'MODEL'"]),
    Case("advise-bad-format", CAT, ["advise", GQA, "-f", "yaml", *TINY], ["'yaml' is not one of"]),
    Case("advise-q-len-prefill", CAT, ["advise", GQA, "--phase", "prefill", "--q-len", "2", *TINY], ["--q-len"]),
    Case("compare-one-report", CAT, ["compare", "a.json"], ["Missing argument"]),
    Case("plot-missing-report", CAT, ["plot", "nope.json"], ["report not found: nope.json"]),
    Case("hardware-show-unknown", CAT, ["hardware", "show", "H9000"], ["unknown hardware 'H9000'"]),
    Case("calibrate-bad-device", CAT, ["calibrate", "--device", "tpu"], ["tpu"]),
    Case("plugins-bad-format", CAT, ["plugins", "-f", "yaml"], ["'yaml' is not one of"]),
    Case("profile-table-without-csv", CAT, ["profile", GQA, *TINY, "--table", "ops"], ["--table applies to -f csv"]),
    Case("profile-bad-table", CAT, ["profile", GQA, *TINY, "-f", "csv", "--table", "layers"],
         ["'layers' is not one of"]),
    Case("profile-negative-ops", CAT, ["profile", GQA, *TINY, "--ops", "-1"], ["--ops", "-1"]),
    Case("profile-plot-ops-without-plot", CAT, ["profile", GQA, *TINY, "--plot-ops"], ["--plot-ops needs --plot"]),
    Case("profile-plot-ops-and-depth", CAT, ["profile", GQA, *TINY, "--plot", "c.png", "--plot-ops", "--plot-depth",
                                             "2"], ["--plot-depth and --plot-ops"]),
]
