"""The built-in hardware database: one TOML file per device, in vendor folders beside this file."""

from pathlib import Path

DB_DIR = Path(__file__).parent
