"""The request in every output: deployment settings never ride in the model's options, every output
names a non-default deployment in words, and no output prints a Python dict or writes a private key."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.codec import upgrade_deployment
from rooflinekit.core.report import Report
from rooflinekit.core.request import Deployment
from rooflinekit.outputs.advice_plot import advice_figure
from rooflinekit.outputs.chart_data import chart_for

GQA = ROOT / "examples" / "llama_gqa.py"
REQUEST = ["-O", "layers=1", "--tp", "2", "--weight-dtype", "int4", "--kv-dtype", "fp8", "-H", "H800"]
WORDS = "TP 2, int4 weights, fp8 KV"


def _private_keys(value, where="") -> list[str]:
    """Every key that starts with `_`, anywhere in a JSON value."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k).startswith("_"):
                found.append(f"{where}.{k}")
            found += _private_keys(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _private_keys(v, f"{where}[{i}]")
    return found


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Every command's every format for one request with TP, formats and a model option."""
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    tmp = tmp_path_factory.mktemp("words")

    def run(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert result.exit_code == 0, result.stderr
        return result.stdout

    common = [GQA, "--phase", "decode", *REQUEST]
    out = {}
    for fmt in ("table", "json", "csv", "markdown", "html"):
        out[f"profile {fmt}"] = run("profile", *common, "-b", "2", "-s", "256", "-f", fmt)
        out[f"sweep {fmt}"] = run("sweep", *common, "--batch", "1,2", "--context", "128,256", "-f", fmt)
        out[f"advise {fmt}"] = run("advise", *common, "-b", "2", "-s", "256", "-f", fmt)
    a, b = tmp / "a.json", tmp / "b.json"
    a.write_text(out["profile json"])
    run("profile", GQA, "--phase", "decode", "-O", "layers=1", "-b", "2", "-s", "256", "-H", "H800", "-f", "json",
        "-o", b)
    for fmt in ("table", "json", "markdown", "html"):
        out[f"compare {fmt}"] = run("compare", a, b, "-f", fmt)
    return out


@pytest.mark.slow
def test_no_python_dict_in_any_text_output(outputs):
    for name, text in outputs.items():
        if not name.endswith("json"):
            assert "{'" not in text, name


@pytest.mark.slow
def test_no_private_key_in_any_json_output(outputs):
    for name, text in outputs.items():
        if name.endswith("json"):
            assert _private_keys(json.loads(text)) == [], name


@pytest.mark.slow
def test_every_output_names_the_deployment_in_words(outputs):
    for name, text in outputs.items():
        if name.endswith("json"):
            data = json.loads(text)
            for key in ("a", "b") if name.startswith("compare") else ("",):
                d = (data[key] if key else data)["deployment"]
                if key != "b":
                    assert (d["tp"], d["weight_dtype"], d["kv_dtype"]) == (2, "int4", "fp8"), name
            continue
        if name.startswith("compare") or name.endswith("csv"):
            # compare lists both reports; CSV holds rows only (its header is the workload's columns)
            assert name.endswith("csv") or WORDS in " ".join(text.split()), name  # header lines wrap at 100 columns
            continue
        assert WORDS in text, name
        assert "layers=1" in text, name


@pytest.mark.slow
def test_chart_titles_name_the_deployment(outputs):
    profile = Report.from_dict(json.loads(outputs["profile json"]))
    assert WORDS in chart_for(profile).title
    sweep = json.loads(outputs["sweep json"])
    assert WORDS in chart_for(sweep).title
    advice = AdviceReport.from_dict(json.loads(outputs["advise json"]))
    title = advice_figure(advice).axes[0].get_title()
    assert WORDS in title


def test_model_options_hold_only_the_model_options(invoke):
    result = invoke("profile", GQA, "--phase", "decode", "-b", "1", "-s", "64", *REQUEST, "--memory-fraction", "0.8",
                    "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["workload"]["options"] == {"layers": 1}
    assert data["deployment"]["memory_fraction"] == 0.8
    assert data["memory"]["fraction"] == 0.8
    assert data["schema_version"] == "3.0"


def test_a_2_0_report_with_tp_in_its_options_reads_as_a_deployment():
    old = {"schema_version": "2.0", "kind": "profile",
           "workload": {"phase": "decode", "batch": 2, "context": 64, "q_len": 1, "tokens": 2, "dtype": "bf16",
                        "device": "meta", "options": {"layers": 1, "_tp": 4, "_memory_fraction": 0.8},
                        "weight_dtype": "fp8", "weight_group_size": None, "kv_dtype": "bf16",
                        "quantize_embeddings": False}}
    new = upgrade_deployment(old)
    assert new["workload"]["options"] == {"layers": 1}
    assert "weight_dtype" not in new["workload"]
    assert new["deployment"] == {"tp": 4, "memory_fraction": 0.8, "weight_dtype": "fp8", "weight_group_size": None,
                                 "kv_dtype": "bf16", "quantize_embeddings": False}
    assert old["workload"]["options"]["_tp"] == 4  # a copy: the input is left as it was


@pytest.mark.parametrize(("deployment", "dtype", "words"), [
    (Deployment(), "bf16", ""),
    (Deployment(tp=2, ep=2), "bf16", "TP 2, EP 2"),
    (Deployment(weight_dtype="bf16", kv_dtype="bf16"), "bf16", ""),
    (Deployment(weight_dtype="int4", weight_group_size=128), "bf16", "int4 weights"),
    (Deployment(weight_dtype="int4", weight_group_size=64), "bf16", "int4 weights (groups of 64)"),
    (Deployment(kv_dtype="fp8", memory_fraction=0.8), "bf16", "fp8 KV, memory fraction 0.8"),
    (Deployment(pp=2, replicas=3, kernels="serving"), "bf16", "PP 2, 3 replicas, serving kernels"),
])
def test_deployment_words(deployment, dtype, words):
    assert deployment.words(dtype) == words


@pytest.mark.parametrize(("kv", "itemsize"), [("bf16", 2), ("fp8", 1)])
def test_the_kv_format_reaches_the_parallel_shard(invoke, kv, itemsize):
    """Under TP the per-GPU rows are costed at the deployment's KV format: 1 layer x K and V x 8/2
    KV heads x head_dim 128 x context 256 x batch 2 x the format's bytes (examples/llama_gqa.py)."""
    result = invoke("profile", GQA, "--phase", "decode", "-O", "layers=1", "-b", "2", "-s", "256", "--tp", "2",
                    "--kv-dtype", kv, "-H", "H800", "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["attention_totals"]["kv_bytes_min"] == 1 * 2 * 4 * 128 * 256 * 2 * itemsize
