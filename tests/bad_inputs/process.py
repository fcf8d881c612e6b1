"""The process itself: stdout closed, a model or plugin that exits or interrupts the run, and CLI
numbers past what a workload can take.

Cases that need a real process run `python -m rooflinekit` in a child (subprocess=True). Its
stdout is closed before it starts, as a shell's `>&-` closes it (stdout_closed=True); broken
plugins are distributions on the child's PYTHONPATH (a dist-info folder with entry points), found by
importlib.metadata as if pip had installed them.
"""

from __future__ import annotations

import pytest

from bad_inputs.case import EXAMPLES, GQA, TINY, Case

CAT = "process"
LIMITS = "limits"

CHILD_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}

_FORWARD = '''import sys

import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        {forward}
        return self.proj(x)


def build_model():
    {build}
    return M()


def make_inputs(batch, context, phase):
    {inputs}
    return (torch.zeros(batch, 8),)
'''


def model(forward: str = "pass", build: str = "pass", inputs: str = "pass") -> dict[str, str]:
    return {"m.py": _FORWARD.format(forward=forward, build=build, inputs=inputs)}


def plugin(name: str, body: str) -> dict[str, str]:
    """A plugin distribution on the child's PYTHONPATH ("site"), its hardware-dirs hook doing `body`
    (every command that loads the hardware database calls it)."""
    return {
        f"site/{name}_plugin.py": ("import sys\n\nfrom rooflinekit.plugin import hookimpl\n\n\n@hookimpl\n"
                                  f"def rooflinekit_hardware_dirs():\n    {body}\n"),
        f"site/{name}_plugin-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}-plugin\nVersion: 0.1\n",
        f"site/{name}_plugin-0.1.dist-info/entry_points.txt": f"[rooflinekit]\n{name} = {name}_plugin\n",
    }


PLUGIN_ENV = {"PYTHONPATH": "site", "PYTHONDONTWRITEBYTECODE": "1"}
CONFIG = (EXAMPLES / "configs" / "llama-3.1-8b.json").read_text()
STDOUT_CLOSED = "stdout is closed"

CASES = [
    # stdout closed (`>&-`): one line before any work, not exit 0 with the output lost
    Case("profile-stdout-closed", CAT, ["profile", GQA, *TINY, "-f", "json"], [STDOUT_CLOSED, "-o FILE"],
         env=CHILD_ENV, subprocess=True, stdout_closed=True, exit_code=2),
    Case("sweep-stdout-closed", CAT, ["sweep", GQA, *TINY, "-b", "1", "-s", "64"], [STDOUT_CLOSED],
         env=CHILD_ENV, subprocess=True, stdout_closed=True, exit_code=2),
    Case("compare-stdout-closed", CAT, ["compare", "a.json", "b.json"], [STDOUT_CLOSED],
         files={"a.json": "{}", "b.json": "{}"}, env=CHILD_ENV, subprocess=True, stdout_closed=True, exit_code=2),
    Case("calibrate-stdout-closed", CAT, ["calibrate", "--device", "cpu"], [STDOUT_CLOSED],
         env=CHILD_ENV, subprocess=True, stdout_closed=True, exit_code=2),
    Case("hardware-list-stdout-closed", CAT, ["hardware", "list"], [STDOUT_CLOSED],
         env=CHILD_ENV, subprocess=True, stdout_closed=True, exit_code=2),
    Case("plugins-stdout-closed", CAT, ["plugins", "-f", "json"], [STDOUT_CLOSED],
         env=CHILD_ENV, subprocess=True, stdout_closed=True, exit_code=2),
    # the model file exits: one line naming it and where, not a silent exit code
    Case("model-exits-at-import", CAT, ["profile", "m.py"],
         ["importing the model file exited with sys.exit(3)", "at m.py:2", "the model (m.py)"],
         files={"m.py": "import sys\nsys.exit(3)\n"}, subprocess=True),
    Case("model-exits-in-build", CAT, ["profile", "m.py"],
         ["build_model() exited with sys.exit(3)", "at m.py:18", "the model (m.py)"],
         files=model(build="sys.exit(3)")),
    Case("model-exits-in-make-inputs", CAT, ["profile", "m.py"],
         ["make_inputs() exited with sys.exit('no inputs')", "at m.py:23"],
         files=model(inputs="sys.exit('no inputs')")),
    Case("model-exits-in-forward", CAT, ["profile", "m.py"],
         ["the model's forward exited with sys.exit(3)", "at m.py:13", "the model (m.py)"],
         files=model(forward="sys.exit(3)"), subprocess=True),
    Case("model-exits-0-in-forward", CAT, ["profile", "m.py", "-f", "json"],
         ["the model's forward exited with sys.exit(0)", "the model (m.py)"],
         files=model(forward="raise SystemExit(0)"), subprocess=True),
    Case("sweep-model-exits-in-forward", CAT, ["sweep", "m.py", "-b", "1", "-s", "64", "--no-critical"],
         ["the model's forward exited with sys.exit(3)", "the model (m.py)"],
         files=model(forward="sys.exit(3)"), subprocess=True),
    Case("model-exits-in-measured-run", CAT, ["profile", "m.py", "--device", "cpu", "--measure"],
         ["the model's forward exited with sys.exit(5)", "the model (m.py)"],
         files=model(forward="sys.exit(5)")),
    # a plugin exits or interrupts inside a hook: named, with the hook
    Case("plugin-exits-in-hook", CAT, ["profile", GQA, *TINY],
         ["plugin 'exiter' called sys.exit(4)", "rooflinekit_hardware_dirs"],
         files=plugin("exiter", "sys.exit(4)"), env=PLUGIN_ENV, subprocess=True, exit_code=2),
    Case("plugin-interrupts-in-hook", CAT, ["profile", GQA, *TINY],
         ["interrupted in plugin 'interrupter'", "rooflinekit_hardware_dirs"],
         files=plugin("interrupter", "raise KeyboardInterrupt"), env=PLUGIN_ENV, subprocess=True, exit_code=130),
    # SIGTERM while a plugin runs: the word every command uses for it ("terminated"), and 143
    Case("plugin-terminated-in-hook", CAT, ["profile", GQA, *TINY],
         ["terminated in plugin 'terminator'", "rooflinekit_hardware_dirs"],
         files=plugin("terminator", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"), env=PLUGIN_ENV,
         subprocess=True, exit_code=143),
    Case("hardware-list-plugin-exits", CAT, ["hardware", "list", "-f", "json"],
         ["plugin 'exiter' called sys.exit(4)", "rooflinekit_hardware_dirs"],
         files=plugin("exiter", "sys.exit(4)"), env=PLUGIN_ENV, subprocess=True, exit_code=2),
    Case("calibrate-plugin-exits", CAT, ["calibrate", "--device", "cpu"],
         ["plugin 'exiter' called sys.exit(4)", "rooflinekit_hardware_dirs"],
         files=plugin("exiter", "sys.exit(4)"), env=PLUGIN_ENV, subprocess=True, exit_code=2),
    # CLI numbers past what a workload takes: one line with the limit, no C++ frame dump
    Case("profile-huge-batch", LIMITS, ["profile", GQA, *TINY, "-b", "99999999999999999999999"],
         ["batch must be at most 1,048,576", "99999999999999999999999"]),
    Case("profile-huge-context", LIMITS, ["profile", GQA, *TINY, "-s", "1000000000000"],
         ["context must be at most 16,777,216", "1000000000000"]),
    Case("sweep-huge-batch-in-list", LIMITS, ["sweep", GQA, *TINY, "-b", "1,99999999", "-s", "64"],
         ["batch must be at most 1,048,576", "99999999"]),
    Case("sweep-huge-context-in-list", LIMITS, ["sweep", GQA, *TINY, "-b", "1", "-s", "64,99999999999"],
         ["context must be at most 16,777,216", "99999999999"]),
    Case("sweep-huge-max-batch", LIMITS, ["sweep", GQA, *TINY, "-b", "1", "-s", "64", "--max-batch", "10000000000"],
         ["--max-batch must be at most 1,048,576"]),
    Case("profile-huge-tp", LIMITS, ["profile", GQA, *TINY, "--tp", "99999999999999999999"],
         ["--tp must be a whole number from 1 to 65,536", "99999999999999999999"]),
    Case("profile-huge-repeats", LIMITS, ["profile", GQA, *TINY, "--device", "cpu", "--measure", "--repeats",
                                          "100000000"], ["--repeats 1 to 10000", "100000000"]),
    Case("profile-huge-option-value", LIMITS, ["profile", GQA, *TINY, "-O", "hidden=99999999999999999999"],
         ["build_model() failed", "Overflow"]),
    Case("profile-config-negative-layers", LIMITS, ["profile", "cfg.json", "-O", "layers=-2"],
         ["cfg.json", "option layers=-2", "at least 1"], files={"cfg.json": CONFIG}, marks=(pytest.mark.hf,)),
    Case("profile-config-fractional-layers", LIMITS, ["profile", "cfg.json", "-O", "layers=1.5"],
         ["option layers=1.5", "whole number"], files={"cfg.json": CONFIG}, marks=(pytest.mark.hf,)),
    Case("profile-hardware-toml-missing", LIMITS, ["profile", GQA, *TINY, "-H", "nope.toml"],
         ["hardware file not found: nope.toml"]),
    Case("profile-hardware-path-missing", LIMITS, ["profile", GQA, *TINY, "-H", "hw/nope"],
         ["hardware file not found: hw/nope"]),
    Case("profile-compare-hardware-toml-missing", LIMITS, ["profile", GQA, *TINY, "--compare-hardware", "nope.toml"],
         ["hardware file not found: nope.toml"]),
]
