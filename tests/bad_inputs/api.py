"""The Python API's arguments (rooflinekit.profile, profile_file, capture): each bad value raises a
RooflineError naming the argument (tests/bad_inputs/case.py, `api` cases), never a TypeError,
AttributeError or bare ValueError, and never a value silently rounded."""

from __future__ import annotations

import math
from pathlib import Path

import torch

import rooflinekit
from bad_inputs.case import EXAMPLES, Case

CAT = "api"
GQA = str(EXAMPLES / "llama_gqa.py")
TINY = {"layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512, "vocab": 1000}


def _file(**kwargs):
    def call(folder: Path):
        args = dict(kwargs)
        return rooflinekit.profile_file(args.pop("path", GQA), options=args.pop("options", TINY), **args)

    return call


def _module(**kwargs):
    def call(folder: Path):
        args = dict(kwargs)
        model = args.pop("model", None) or torch.nn.Linear(4, 4, device="meta")
        return rooflinekit.profile(model, torch.zeros(2, 3, 4, device="meta"), **args)

    return call


def _capture(**kwargs):
    def call(folder: Path):
        with rooflinekit.capture(**kwargs):
            pass

    return call


SHARED = {
    "batch-string-number": ({"batch": "4"}, ["batch=", "'4'"]),
    "batch-word": ({"batch": "four"}, ["batch=", "'four'"]),
    "batch-zero": ({"batch": 0}, ["batch=", "got 0"]),
    "batch-negative": ({"batch": -2}, ["batch="]),
    "batch-float": ({"batch": 2.5}, ["batch=", "2.5"]),
    "batch-bool": ({"batch": True}, ["batch="]),
    "batch-huge": ({"batch": 1 << 40}, ["batch="]),
    "context-float": ({"context": 4096.7}, ["context=", "4096.7"]),
    "context-nan": ({"context": math.nan}, ["context="]),
    "context-zero": ({"context": 0}, ["context="]),
    "context-huge": ({"context": 1 << 40}, ["context="]),
    "hardware-none": ({"hardware": None}, ["hardware=", "None"]),
    "hardware-number": ({"hardware": 800}, ["hardware="]),
    "hardware-empty": ({"hardware": ""}, ["hardware="]),
    "hardware-unknown": ({"hardware": "H9000"}, ["unknown hardware 'H9000'"]),
    "depth-zero": ({"depth": 0}, ["depth=", "got 0"]),
    "depth-negative": ({"depth": -1}, ["depth="]),
    "depth-string": ({"depth": "3"}, ["depth="]),
    "phase-train": ({"phase": "train"}, ["phase=", "train"]),
    "phase-number": ({"phase": 1}, ["phase="]),
    "group-layers-string": ({"group_layers": "yes"}, ["group_layers="]),
    "host-string": ({"host": "plugins"}, ["host="]),
}
FILE_ONLY = {
    "path-none": ({"path": None}, ["path="]),
    "path-number": ({"path": 5}, ["path="]),
    "path-missing": ({"path": "no_such_model.py"}, ["no_such_model.py"]),
    "options-string": ({"options": "layers=1"}, ["options="]),
    "options-number-key": ({"options": {5: 1}}, ["options="]),
    "dtype-unknown": ({"dtype": "fp4"}, ["dtype=", "fp4"]),
    "dtype-none": ({"dtype": None}, ["dtype="]),
    "device-number": ({"device": 0}, ["device="]),
    "device-unknown": ({"device": "tpu"}, ["unknown device 'tpu'"]),
    "weight-dtype-number": ({"weight_dtype": 4}, ["weight_dtype="]),
    "weight-dtype-unknown": ({"weight_dtype": "int3"}, ["int3"]),
    "kv-dtype-number": ({"kv_dtype": 8}, ["kv_dtype="]),
    "kv-dtype-unknown": ({"kv_dtype": "fp4"}, ["fp4"]),
    "group-size-zero": ({"weight_group_size": 0}, ["weight_group_size="]),
    "group-size-string": ({"weight_group_size": "64"}, ["weight_group_size="]),
    "quantize-embeddings-string": ({"quantize_embeddings": "yes"}, ["quantize_embeddings="]),
    "q-len-zero": ({"q_len": 0}, ["q_len="]),
    "q-len-float": ({"q_len": 2.0}, ["q_len="]),
    "q-len-prefill": ({"q_len": 2, "phase": "prefill"}, ["--q-len 2 applies to decode only"]),
    "tp-string": ({"tp": "2"}, ["tp="]),
    "tp-zero": ({"tp": 0}, ["tp="]),
    "ep-float": ({"ep": 1.5}, ["ep="]),
    "memory-fraction-zero": ({"memory_fraction": 0}, ["memory_fraction= must be a number from 0.01 to 1"]),
    "memory-fraction-nan": ({"memory_fraction": math.nan}, ["memory_fraction=", "nan"]),
    "memory-fraction-string": ({"memory_fraction": "most"}, ["memory_fraction="]),
    "memory-fraction-above-one": ({"memory_fraction": 1.5}, ["memory_fraction=", "1.5"]),
    "kernels-unknown": ({"kernels": "fast"}, ["kernels=", "fast"]),
    "deployment-dict": ({"deployment": {"tp": 2}}, ["deployment="]),
}

CASES = [
    *(Case(f"profile-file-{name}", CAT, [], needles, api=_file(**args)) for name, (args, needles) in SHARED.items()),
    *(Case(f"profile-file-{name}", CAT, [], needles, api=_file(**args)) for name, (args, needles) in FILE_ONLY.items()),
    *(Case(f"profile-{name}", CAT, [], needles, api=_module(**args)) for name, (args, needles) in SHARED.items()),
    *(Case(f"capture-{name}", CAT, [], needles, api=_capture(**args)) for name, (args, needles) in SHARED.items()),
    Case("profile-not-a-module", CAT, [], ["torch.nn.Module"], api=_module(model="a model")),
]
