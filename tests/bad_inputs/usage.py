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
    Case("compare-one-report", CAT, ["compare", "a.json"], ["Missing argument"]),
    Case("plot-missing-report", CAT, ["plot", "nope.json"], ["report not found: nope.json"]),
    Case("hardware-show-unknown", CAT, ["hardware", "show", "H9000"], ["unknown hardware 'H9000'"]),
    Case("calibrate-bad-device", CAT, ["calibrate", "--device", "tpu"], ["tpu"]),
    Case("plugins-bad-format", CAT, ["plugins", "-f", "yaml"], ["'yaml' is not one of"]),
]
