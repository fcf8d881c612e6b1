"""Output files: an output path that names one of the command's inputs (the model file, a config,
a hardware file, a report; also through a symlink, a hard link or another spelling) is refused
before any work, naming both; so is an output that is a folder or sits in a missing one.

Writing to /dev/null, a FIFO or a symlink to a device succeeds (write through, never renamed
over): those are tests/test_outputs_safety.py, since the matrix holds failures only.
"""

from __future__ import annotations

import os
from pathlib import Path

from bad_inputs.case import EXAMPLES, GQA, ROOT, TINY, Case

CAT = "outputs"
MODEL = (EXAMPLES / "llama_gqa.py").read_text()
CONFIG = (EXAMPLES / "configs" / "llama-3.1-8b.json").read_text()
HARDWARE = (ROOT / "hardware_db" / "nvidia" / "h800_sxm5.toml").read_text()
FAST = ["-b", "1", "-s", "64"]  # sweep: one point (never reached: every case fails before work)


def symlink(name: str, target: str):
    def setup(folder: Path) -> None:
        (folder / name).symlink_to(target)
    return setup


def hardlink(name: str, target: str):
    def setup(folder: Path) -> None:
        os.link(folder / target, folder / name)
    return setup


CASES = [
    # profile: the model file, however it is spelled
    Case("profile-o-model-file", CAT, ["profile", "m.py", *TINY, "-o", "m.py"],
         ["--output m.py", "the model file m.py"], files={"m.py": MODEL}),
    Case("profile-o-model-dot-slash", CAT, ["profile", "m.py", *TINY, "-o", "./m.py"],
         ["--output ./m.py", "the model file m.py"], files={"m.py": MODEL}),
    Case("profile-o-model-absolute", CAT, ["profile", "m.py", *TINY, "-o", "{dir}/m.py"],
         ["/m.py is the same file as the model file m.py"], files={"m.py": MODEL}),
    Case("profile-o-symlink-to-model", CAT, ["profile", "m.py", *TINY, "-o", "link.py"],
         ["--output link.py", "the model file m.py"], files={"m.py": MODEL}, setup=symlink("link.py", "m.py")),
    Case("profile-o-hardlink-to-model", CAT, ["profile", "m.py", *TINY, "-o", "hard.py"],
         ["--output hard.py", "the model file m.py"], files={"m.py": MODEL}, setup=hardlink("hard.py", "m.py")),
    Case("profile-o-transformers-config", CAT, ["profile", "cfg.json", "-O", "layers=1", "-o", "cfg.json"],
         ["--output cfg.json", "the model file cfg.json"], files={"cfg.json": CONFIG}),
    Case("profile-o-config-in-folder", CAT, ["profile", "cfg", "-O", "layers=1", "-o", "cfg/config.json"],
         ["--output cfg/config.json", "the model config cfg/config.json"], files={"cfg/config.json": CONFIG}),
    Case("profile-o-hardware-file", CAT, ["profile", GQA, *TINY, "-H", "hw.toml", "-o", "hw.toml"],
         ["--output hw.toml", "the hardware file hw.toml"], files={"hw.toml": HARDWARE}),
    Case("profile-o-compare-hardware-file", CAT,
         ["profile", GQA, *TINY, "--compare-hardware", "hw.toml", "-o", "hw.toml"],
         ["--output hw.toml", "the hardware file hw.toml"], files={"hw.toml": HARDWARE}),
    # profile: two outputs onto one file
    Case("profile-trace-is-output", CAT,
         ["profile", GQA, *TINY, "--device", "cpu", "--measure", "-o", "r.json", "--trace", "r.json"],
         ["--trace r.json", "the --output file r.json"]),
    Case("profile-plot-is-output", CAT, ["profile", GQA, *TINY, "-f", "json", "-o", "r.png", "--plot", "r.png"],
         ["--plot r.png", "the --output file r.png"]),
    Case("profile-plot-is-model", CAT, ["profile", "m.py", *TINY, "--plot", "m.py"],
         ["--plot m.py", "the model file m.py"], files={"m.py": MODEL}),
    Case("profile-trace-is-model", CAT, ["profile", "m.py", *TINY, "--device", "cpu", "--measure", "--trace", "m.py"],
         ["--trace m.py", "the model file m.py"], files={"m.py": MODEL}),
    # profile: not a file to write
    Case("profile-o-folder", CAT, ["profile", GQA, *TINY, "-o", "sub"], ["cannot write sub", "it is a folder"],
         files={"sub/keep.txt": "keep"}),
    Case("profile-o-missing-folder", CAT, ["profile", GQA, *TINY, "-o", "nope/r.json"],
         ["cannot write nope/r.json", "folder nope does not exist"]),
    # sweep
    Case("sweep-o-model-file", CAT, ["sweep", "m.py", *TINY, *FAST, "-o", "m.py"],
         ["--output m.py", "the model file m.py"], files={"m.py": MODEL}),
    Case("sweep-plot-is-model", CAT, ["sweep", "m.py", *TINY, *FAST, "--plot", "m.py"],
         ["--plot m.py", "the model file m.py"], files={"m.py": MODEL}),
    Case("sweep-plot-is-output", CAT, ["sweep", GQA, *TINY, *FAST, "-f", "json", "-o", "s.png", "--plot", "s.png"],
         ["--plot s.png", "the --output file s.png"]),
    Case("sweep-o-hardware-file", CAT, ["sweep", GQA, *TINY, *FAST, "-H", "hw.toml", "-o", "hw.toml"],
         ["--output hw.toml", "the hardware file hw.toml"], files={"hw.toml": HARDWARE}),
    # compare: either report (refused before either is read)
    Case("compare-o-first-report", CAT, ["compare", "a.json", "b.json", "-o", "a.json"],
         ["--output a.json", "the first report a.json"], files={"a.json": "{}", "b.json": "{}"}),
    Case("compare-o-second-report", CAT, ["compare", "a.json", "b.json", "-o", "b.json"],
         ["--output b.json", "the second report b.json"], files={"a.json": "{}", "b.json": "{}"}),
    Case("compare-o-symlink-to-report", CAT, ["compare", "a.json", "b.json", "-o", "link.json"],
         ["--output link.json", "the first report a.json"], files={"a.json": "{}", "b.json": "{}"},
         setup=symlink("link.json", "a.json")),
    Case("compare-o-hardlink-to-report", CAT, ["compare", "a.json", "b.json", "-f", "json", "-o", "hard.json"],
         ["--output hard.json", "the second report b.json"], files={"a.json": "{}", "b.json": "{}"},
         setup=hardlink("hard.json", "b.json")),
    # plot: the report itself
    Case("plot-o-report", CAT, ["plot", "r.json", "-o", "r.json"], ["--output r.json", "the report r.json"],
         files={"r.json": "{}"}),
    Case("plot-default-chart-is-report", CAT, ["plot", "r.png"],
         ["the default chart file r.png", "the report r.png"], files={"r.png": "{}"}),
    Case("plot-o-symlink-to-report", CAT, ["plot", "r.json", "-o", "chart.png"],
         ["--output chart.png", "the report r.json"], files={"r.json": "{}"}, setup=symlink("chart.png", "r.json")),
    # calibrate: refused before anything is measured
    Case("calibrate-o-datasheet-entry", CAT, ["calibrate", "--device", "cpu", "-o", "hw/mine.toml"],
         ["--output hw/mine.toml", "the hardware entry 'H800 SXM5'"], files={"hw/mine.toml": HARDWARE},
         env={"ROOFLINEKIT_HARDWARE_PATH": "hw"}),
    Case("calibrate-o-folder", CAT, ["calibrate", "--device", "cpu", "-o", "x.toml"],
         ["cannot write x.toml", "it is a folder"], files={"x.toml/keep.txt": "keep"}),
    Case("calibrate-o-missing-folder", CAT, ["calibrate", "--device", "cpu", "-o", "nope/x.toml"],
         ["cannot write nope/x.toml", "folder nope does not exist"]),
    # the HTML report (-o FILE.html, or -f html): the same checks, before any work
    Case("profile-html-missing-folder", CAT, ["profile", GQA, *TINY, "-o", "nope/r.html"],
         ["cannot write nope/r.html", "folder nope does not exist"]),
    Case("sweep-html-is-model-file", CAT, ["sweep", "m.py", *TINY, *FAST, "-f", "html", "-o", "m.py"],
         ["--output m.py", "the model file m.py"], files={"m.py": MODEL}),
    Case("compare-html-o-first-report", CAT, ["compare", "a.html", "b.json", "-o", "a.html"],
         ["--output a.html", "the first report a.html"], files={"a.html": "{}", "b.json": "{}"}),
    Case("advise-html-o-folder", CAT, ["advise", GQA, *TINY, "-o", "r.html"],
         ["cannot write r.html", "it is a folder"], files={"r.html/keep.txt": "keep"}),
]
