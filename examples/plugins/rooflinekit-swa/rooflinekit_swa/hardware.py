"""Hardware entries the built-in database lacks (same TOML schema as rooflinekit's hardware_db/)."""

from __future__ import annotations

from pathlib import Path

from rooflinekit.plugin import hookimpl

HARDWARE_DIR = Path(__file__).resolve().parent / "hardware"
PROVIDES = ("hardware entries: H100 NVL, GH200 96GB",)


@hookimpl
def rooflinekit_hardware_dirs():
    return [HARDWARE_DIR]
