"""Regenerate tests/data/golden/: what `profile`, `sweep` and `advise` print for every example, in
every text format, held byte for byte by tests/test_golden.py across refactors of the request, the
transforms and the outputs. Run only when an output is meant to change, and say why in the commit:

    python tests/data/make_golden.py

A case is one command line; its files are CASE.txt (the table, 100 columns), CASE.csv, CASE.md and
CASE.json, with the JSON's wall-clock figures zeroed and its numbers at 12 significant digits
(`normalised`: Python 3.12 made sum() of floats compensated, which moves the last digits).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
EXAMPLES = ("llama_gqa", "gpt2_mha", "deepseek_mla", "tp_mlp")
#: (name, command arguments after the model), per example.
VARIANTS = (
    ("decode", ["profile", "--phase", "decode", "-b", "4", "-s", "2048", "-H", "H800"]),
    ("prefill-tp2-serving", ["profile", "--phase", "prefill", "-b", "1", "-s", "512", "-H", "H100 SXM5", "--tp", "2",
                             "--kernels", "serving", "--weight-dtype", "fp8", "--kv-dtype", "fp8", "--engine", "vllm"]),
    ("sweep", ["sweep", "-b", "1,8", "-s", "256,1024", "-H", "H800", "--no-critical"]),
    ("advise", ["advise", "--phase", "decode", "-b", "8", "-s", "1024", "-H", "H800"]),
)
FORMATS = {"txt": "table", "csv": "csv", "md": "markdown", "json": "json"}
#: JSON keys whose values are wall-clock times (differ run to run).
CLOCKS = {"wall_s", "elapsed_s", "seconds"}


def cases() -> list[tuple[str, list[str]]]:
    out = []
    for example in EXAMPLES:
        for name, args in VARIANTS:
            out.append((f"{example}-{name}", [args[0], f"examples/{example}.py", *args[1:]]))
    return out


#: Wall-clock figures in the text outputs ("11 profiles in 193 ms").
TEXT_CLOCK = re.compile(r"(profiles? in |captures? in |in )(\d[\d.,]*\s?(?:[mun\u00b5]?s))\b")


#: A CSV cell's float written with more digits than 12 significant ones can hold the same on every
#: Python (3.12 made sum() of floats compensated, which moves the last digits).
CSV_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d{6,}(?:e[-+]?\d+)?(?![\w.])")


def normalised(text: str, fmt: str) -> str:
    """`text` with what changes between runs and machines replaced: wall-clock times zeroed, the
    checkout's own path written <ROOT>, full-precision floats to 12 significant digits."""
    text = text.replace(str(ROOT), "<ROOT>")
    if fmt == "csv":  # full-precision floats: to 12 significant digits, as JSON's below
        text = CSV_FLOAT.sub(lambda m: f"{float(m.group(0)):.12g}", text)
    if fmt != "json":
        return TEXT_CLOCK.sub(lambda m: m.group(1) + "<time>", text)
    data = json.loads(text)

    def walk(node):
        if isinstance(node, float):  # 12 significant digits: Python 3.12's sum() rounds the last ones apart
            return float(f"{node:.12g}")
        if isinstance(node, dict):
            return {k: (0.0 if k in CLOCKS and isinstance(v, (int, float)) else walk(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return json.dumps(walk(data), indent=1, sort_keys=True) + "\n"


def run(args: list[str], fmt: str) -> str:
    """The command's output in `fmt`, as a user at a 100-column terminal sees it."""
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    result = CliRunner(env={"COLUMNS": "100"}).invoke(cli, [*args, "-f", FORMATS[fmt]], catch_exceptions=False)
    if result.exit_code != 0:
        raise RuntimeError(f"{' '.join(args)} -f {FORMATS[fmt]}: exit {result.exit_code}: {result.output[-400:]}")
    return normalised(re.sub(r"\r\n", "\n", result.stdout), fmt)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for case, args in cases():
        for fmt in FORMATS:
            (GOLDEN / f"{case}.{fmt}").write_text(run(args, fmt))
        print(f"wrote {case}.{{{','.join(FORMATS)}}}")


if __name__ == "__main__":
    main()
