"""The text report: fits 100 columns, one number formatter (no scientific notation, '<0.01%' for a
tiny share), repeated layers folded, colour only on a terminal, --ops N, CSV tables."""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.cli import options
from rooflinekit.core.report import Measured, ModuleRow
from rooflinekit.core.units import plain, ratio, seconds, share, si
from rooflinekit.outputs.sections import module_lines
from rooflinekit.outputs.tables import visible
from tests.conftest import EXAMPLES, ROOT, TINY_LLAMA

GQA = EXAMPLES / "llama_gqa.py"
#: A number in scientific notation: 1.696e+04, 5.5e11, 1E-9.
SCIENTIFIC = re.compile(r"\d(?:\.\d+)?[eE][+-]?\d")
PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}
ANSI = "\x1b["


def widest(text: str) -> int:
    return max(visible(line) for line in text.splitlines())


def tiny(*more) -> list[str]:
    out = []
    for k, v in TINY_LLAMA.items():
        out += ["-O", f"{k}={v}"]
    return out + list(more)


# -- the one number formatter -------------------------------------------------------------------------


def test_formatter_hand_values():
    assert si(3.35e12, "B/s") == "3.35 TB/s"
    assert si(1.696e4) == "17 k"  # three significant digits: 16960 -> 17.0 k
    assert si(999.7, "B") == "1 kB"  # rounds up into the next prefix, not '1e+03 B'
    assert si(1.696e19, "FLOP") == "17 EFLOP"
    assert si(0) == "0" and si(None) == "-" and si(float("nan")) == "-"
    assert seconds(1.2e-5) == "12 us" and seconds(0.0043) == "4.3 ms" and seconds(3.4e-13) == "0.34 ps"
    assert ratio(16960.0) == "17 k" and ratio(0.999) == "0.999" and ratio(4.0) == "4"
    assert ratio(0.0004) == "<0.001"
    assert share(0.3014) == "30.14%" and share(0) == "0%" and share(None) == "-"
    assert share(1e-7) == "<0.01%" and share(0.0000499) == "<0.01%" and share(0.00005) == "0.01%"
    assert plain(1e-9) == "0.000000001"


def _parse(text: str, unit: str) -> float:
    number, _, rest = text.partition(" ")
    prefix = rest[: len(rest) - len(unit)] if unit else rest
    return float(number) * PREFIX[prefix]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e29))
def test_si_never_scientific_and_reads_back(value):
    text = si(value, "B")
    assert not SCIENTIFIC.search(text), text
    # three significant digits: within half a unit of the third digit
    assert _parse(text, "B") == pytest.approx(value, rel=5.01e-3)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-13, max_value=1e5))
def test_seconds_and_ratio_never_scientific(value):
    for text in (seconds(value), ratio(value), share(value / 1e5)):
        assert not SCIENTIFIC.search(text), text
    number, unit = seconds(value).split(" ")
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}[unit]
    assert float(number) * scale == pytest.approx(value, rel=5.01e-3)


# -- the README's main command -------------------------------------------------------------------------


def readme_main_command() -> list[str]:
    """The rooflinekit arguments of the README's main command (the block after <!-- main-command -->)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- main-command -->", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    command = block.strip().split("&& rooflinekit ")[-1]
    return shlex.split(command)


def test_readme_main_command_fits_100_columns_without_scientific_notation(invoke):
    args = readme_main_command()
    assert args[0] == "profile"
    result = invoke(*[str(ROOT / a) if a.startswith("examples/") else a for a in args])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert widest(out) <= 100, max(out.splitlines(), key=len)
    assert not SCIENTIFIC.search(out), SCIENTIFIC.search(out)
    assert "0.00%" not in out and ANSI not in out  # not a terminal: no colour


# -- layout, folding, colour -----------------------------------------------------------------------------


def test_tiny_shares_and_wide(invoke, tmp_path):
    report_file = tmp_path / "r.json"
    result = invoke("profile", GQA, "-H", "H800", "-f", "json", "-o", report_file)
    assert result.exit_code == 0, result.stderr
    report = json.loads(report_file.read_text())
    predicted = report["totals"]["predicted_step_s"]
    rotary = next(m for m in report["modules"] if m["name"] == "rotary")
    assert 0 < rotary["time_bound_ops_s"] / predicted < 0.00005  # a non-zero share below 0.005%
    text = invoke("profile", GQA, "-H", "H800").stdout
    row = next(line for line in text.splitlines() if line.startswith("rotary "))
    assert "<0.01%" in row and "0.00%" not in text
    assert widest(text) <= 100
    wide = invoke("profile", GQA, "-H", "H800", "-b", "4", "-s", "32768", "--wide").stdout
    assert "FLOP exec" in wide and "MFU bd" in wide and "columns left out" not in wide
    narrow = invoke("profile", GQA, "-H", "H800", "-b", "4", "-s", "32768").stdout
    assert "columns left out to fit 100 columns" in narrow and "--wide shows them" in narrow


@pytest.mark.hf
def test_transformers_layers_fold_into_one_row(invoke, tmp_path):
    pytest.importorskip("transformers")
    config = EXAMPLES / "configs" / "qwen2.5-7b.json"
    layers = 6
    # --depth 3: whole layers (the default cuts one level below them, model.layers.*.self_attn)
    folded = invoke("profile", config, "-O", f"layers={layers}", "-H", "H800", "--depth", "3")
    assert folded.exit_code == 0, folded.stderr
    lines = folded.stdout.splitlines()
    assert not [line for line in lines if re.match(r"model\.layers\.\d+ ", line)]
    group = [line for line in lines if line.startswith(f"model.layers.* (x{layers})")]
    assert len(group) == 1
    assert widest(folded.stdout) <= 100
    expanded = invoke("profile", config, "-O", f"layers={layers}", "-H", "H800", "--depth", "3", "--no-group-layers")
    rows = [line for line in expanded.stdout.splitlines() if re.match(r"model\.layers\.\d+ ", line)]
    assert sorted(int(r.split()[0].split(".")[-1]) for r in rows) == list(range(layers))
    # the folded row is the sum of its layers: FLOPs and share
    report_file = tmp_path / "r.json"
    invoke("profile", config, "-O", f"layers={layers}", "-H", "H800", "--depth", "3", "-f", "json", "-o", report_file)
    report = json.loads(report_file.read_text())
    members = [m for m in report["modules"] if re.fullmatch(r"model\.layers\.\d+", m["name"])]
    assert len(members) == layers
    cells = group[0].split("  ")
    cells = [c.strip() for c in cells if c.strip()]
    assert _parse(cells[1], "") == pytest.approx(sum(m["flops"] for m in members), rel=5.01e-3)
    assert float(cells[6].rstrip("%")) == pytest.approx(100 * sum(m["time_share"] for m in members), abs=0.006)


def _module(name, flops, nbytes, time_s, peak=1e12, bw=1e12):
    return ModuleRow(flops=flops, bytes=nbytes, intensity=flops / nbytes, attainable_flops=0.0, bound="memory",
                     time_bound_s=nbytes / bw, mfu_bound=flops / (nbytes / bw) / peak, dtype="bf16", name=name,
                     weight_bytes=nbytes / 2, time_bound_ops_s=nbytes / bw, time_share=0.1,
                     measured=Measured(time_s=time_s, mfu=flops / (time_s * peak), mbu=nbytes / (time_s * bw)))


def test_folded_measured_layers_keep_exact_utilisation():
    rows = [_module("layers.0.mlp", 100.0, 10.0, 2e-9), _module("layers.1.mlp", 100.0, 10.0, 6e-9),
            _module("head", 5.0, 10.0, 1e-9)]
    report = SimpleNamespace(modules=rows, totals=SimpleNamespace(measured=True))
    lines = {m.name: m for m in module_lines(report)}
    layer = lines["layers.*.mlp (x2)"]
    assert layer.count == 2 and layer.flops == 200.0 and layer.time_s == pytest.approx(8e-9)
    # the utilisation of the summed counts over the summed time, by hand
    assert layer.mfu == pytest.approx(200.0 / (8e-9 * 1e12), rel=1e-12)
    assert layer.mbu == pytest.approx(20.0 / (8e-9 * 1e12), rel=1e-12)
    assert list(lines) == ["layers.*.mlp (x2)", "head"]  # by measured time
    expanded = [m.name for m in module_lines(report, group=False)]
    assert expanded == ["layers.1.mlp", "layers.0.mlp", "head"]


def test_colour_only_on_a_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(options.sys.stdout, "isatty", lambda: True, raising=False)
    assert options.use_colour("table", None)
    assert not options.use_colour("table", "r.txt")  # a file
    assert not options.use_colour("csv", None)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not options.use_colour("table", None)
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setattr(options.sys.stdout, "isatty", lambda: False, raising=False)
    assert not options.use_colour("table", None)  # a pipe


def test_coloured_text_still_fits():
    from rooflinekit.core.report import Report
    from rooflinekit.outputs.render import to_text
    from tests.conftest import profile_dict

    report = Report.from_dict(profile_dict(GQA, batch=4, context=32768))
    text = to_text(report, colour=True)
    assert ANSI in text and "memory" in text
    assert widest(text) <= 100
    assert ANSI not in to_text(report)


# -- --ops N and CSV tables -----------------------------------------------------------------------------


def test_ops_table_lists_the_most_expensive(invoke, tmp_path):
    report_file = tmp_path / "r.json"
    base = ["profile", GQA, "-O", "layers=2", "-H", "H800", "-s", "1024"]
    assert invoke(*base, "-f", "json", "-o", report_file).exit_code == 0
    report = json.loads(report_file.read_text())
    expanded = invoke(*base, "--ops", "4", "--no-group-layers").stdout
    section = expanded.split("The 4 most expensive ops", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    shown = [int(line.split()[1]) for line in section]
    by_bound = sorted(report["ops"], key=lambda o: -o["time_bound_s"])[:4]
    assert shown == [o["index"] for o in by_bound]
    folded = invoke(*base, "--ops", "4").stdout
    section = folded.split("The 4 most expensive ops", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    first = next(line for line in section if ".*." in line)
    op, n, module = first.split()[:3]
    # a class of equal ops of the two layers: one row, n = 2, their time bounds summed
    members = [o for o in report["ops"] if o["name"] == op and re.sub(r"\.\d+\.", ".*.", o["module"]) == module]
    assert int(n) == len(members) == 2
    assert seconds(sum(o["time_bound_s"] for o in members)) in first
    assert widest(folded) <= 100


def test_csv_tables(invoke, tmp_path):
    report_file = tmp_path / "r.json"
    base = ["profile", GQA, "-O", "layers=2", "-H", "H800"]
    assert invoke(*base, "-f", "json", "-o", report_file).exit_code == 0
    report = json.loads(report_file.read_text())
    ops = list(csv.DictReader(io.StringIO(invoke(*base, "-f", "csv", "--table", "ops").stdout)))
    assert len(ops) == len(report["ops"])
    assert sum(float(r["flops"]) for r in ops) == report["totals"]["flops"]
    assert sum(float(r["bytes"]) for r in ops) == pytest.approx(report["totals"]["bytes"], rel=1e-12)
    att = list(csv.DictReader(io.StringIO(invoke(*base, "-f", "csv", "--table", "attention").stdout)))
    assert [r["module"] for r in att] == ["layers.0.self_attn", "layers.1.self_attn"]
    assert sum(float(r["kv_bytes_min"]) for r in att) == pytest.approx(report["attention_totals"]["kv_bytes_min"])
    modules = invoke(*base, "-f", "csv", "--table", "modules").stdout
    assert modules == invoke(*base, "-f", "csv").stdout and modules.startswith("name,flops,bytes")


def test_sweep_text_fits(invoke):
    result = invoke("sweep", GQA, *tiny("-b", "1,4,16,48", "-s", "4096,32768"))
    assert result.exit_code == 0, result.stderr
    assert widest(result.stdout) <= 100 and not SCIENTIFIC.search(result.stdout)
    wide = invoke("sweep", GQA, *tiny("-b", "1,4", "-s", "4096", "--wide")).stdout
    assert "attn I ex" in wide and "columns left out" not in wide


def test_header_names_the_formats_the_step_is_priced_in():
    """A quantized or multi-token step says so in the header (the figures below it are not the
    model's bf16 step): the new tokens where the workload is named, the formats on the deployment
    line; a plain one names its dtype alone and has no deployment line."""
    from rooflinekit.api import profile_file
    from rooflinekit.outputs.render import header_lines
    from tests.conftest import EXAMPLES

    model = str(EXAMPLES / "llama_gqa.py")
    plain = header_lines(profile_file(model, options={"layers": 1}, context=256))
    levered = header_lines(profile_file(model, options={"layers": 1}, context=256, weight_dtype="int4",
                                        kv_dtype="fp8", q_len=2))
    assert "workload: decode, batch 1, context 256, bf16, device meta" in plain
    assert not any(line.startswith("deployment:") for line in plain)
    assert "workload: decode, batch 1, context 256, bf16, 2 new tokens/seq, device meta" in levered
    assert "deployment: int4 weights, fp8 KV" in levered  # int4's default group of 128 goes unsaid
