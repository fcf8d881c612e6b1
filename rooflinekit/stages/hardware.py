"""The hardware database: TOML entries (one device per file) with dense peaks, SI bandwidths, sources."""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rooflinekit.core.errors import HardwareError
from rooflinekit.core.plugins import PluginHost, get_host

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: Peak-table keys, in display order. int8 rates are ops/s.
DTYPE_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

_NUMERIC_FIELDS = ("memory_bytes", "memory_bandwidth", "interconnect_bandwidth", "l2_bytes", "l2_bandwidth")


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator: dense peak FLOP/s per dtype and memory bandwidth in B/s (SI)."""

    name: str
    peak_flops: dict[str, float]
    memory_bandwidth: float
    vendor: str = ""
    aliases: tuple[str, ...] = ()
    memory_bytes: float | None = None
    interconnect_bandwidth: float | None = None
    interconnect: str = ""
    l2_bytes: float | None = None
    l2_bandwidth: float | None = None
    verified: bool = True
    notes: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    path: str = ""
    calibrated: bool = False

    def peak(self, dtype_key: str) -> float:
        """Dense peak for a dtype key, or the nearest one the entry lists (see `peak_key`)."""
        return self.peak_flops[self.peak_key(dtype_key)]

    def peak_key(self, dtype_key: str) -> str:
        """The peak-table key used for a dtype: itself, else a listed fallback (fp8 -> bf16...).

        Reports name every fallback used (a missing fp8 peak placed against bf16 halves it).
        """
        if dtype_key in self.peak_flops:
            return dtype_key
        for fallback in _FALLBACKS.get(dtype_key, ()):
            if fallback in self.peak_flops:
                return fallback
        raise HardwareError(
            f"hardware '{self.name}' has no peak for {dtype_key} "
            f"(it lists {', '.join(self.peak_flops)}); profile with another --dtype"
        )

    def ridge(self, dtype_key: str) -> float:
        """Ridge point I* = peak / bandwidth, in FLOP/B, for one dtype."""
        return self.peak(dtype_key) / self.memory_bandwidth

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "vendor": self.vendor,
            "aliases": list(self.aliases),
            "peak_flops": dict(self.peak_flops),
            "bandwidth": self.memory_bandwidth,
            "ridge": {k: v / self.memory_bandwidth for k, v in self.peak_flops.items()},
            "memory_bytes": self.memory_bytes,
            "interconnect_bandwidth": self.interconnect_bandwidth,
            "verified": self.verified,
            "calibrated": self.calibrated,
            "sources": dict(self.sources),
            "path": self.path,
        }


_FALLBACKS = {"fp8": ("bf16", "fp16"), "fp16": ("bf16",), "bf16": ("fp16",), "fp64": ("fp32",),
              "int8": ("fp8", "bf16"), "tf32": ("fp32",), "fp32": ("tf32",)}


def dtype_key(dtype) -> str:
    """Map a torch dtype (or its string) to a peak-table key."""
    text = str(dtype).replace("torch.", "")
    if text.startswith("float8"):
        return "fp8"
    return {
        "float64": "fp64",
        "float32": "fp32",
        "float": "fp32",
        "bfloat16": "bf16",
        "float16": "fp16",
        "half": "fp16",
        "int8": "int8",
        "uint8": "int8",
    }.get(text, "fp32")


def normalise(name: str) -> str:
    """Lower-case alphanumerics only, so 'NVIDIA H800', 'h800' and 'H-800' compare equal-ish."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


class HardwareFileError(ValueError):
    """A database file that cannot be used; carries its path."""


def _number(data: dict, key: str, path: Path) -> float | None:
    if key not in data:
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise HardwareFileError(f"{path}: '{key}' must be a positive number, got {value!r}")
    return float(value)


def parse_entry(data: dict, path: Path, require_sources: bool = True) -> HardwareSpec:
    """Validate one TOML document and build its spec; raise HardwareFileError saying what is wrong."""
    for key in ("name", "memory_bandwidth", "peak_flops"):
        if key not in data:
            raise HardwareFileError(f"{path}: missing required key '{key}'")
    peaks_raw = data["peak_flops"]
    if not isinstance(peaks_raw, dict) or not peaks_raw:
        raise HardwareFileError(f"{path}: [peak_flops] must be a table of dtype = FLOP/s")
    peaks: dict[str, float] = {}
    for key in peaks_raw:
        if key not in DTYPE_KEYS:
            raise HardwareFileError(
                f"{path}: unknown dtype '{key}' in [peak_flops] (use {', '.join(DTYPE_KEYS)})"
            )
        number = _number(peaks_raw, key, path)
        assert number is not None
        peaks[key] = number
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise HardwareFileError(f"{path}: [sources] must be a table")
    numbers = {k: _number(data, k, path) for k in _NUMERIC_FIELDS}
    if require_sources:
        missing = [k for k, v in numbers.items() if v is not None and k not in sources]
        if "peak_flops" not in sources:
            missing += [f"peak_flops.{k}" for k in peaks if f"peak_flops.{k}" not in sources]
        if missing:
            raise HardwareFileError(f"{path}: no source for {', '.join(missing)} (add them under [sources])")
    bandwidth = numbers["memory_bandwidth"]
    assert bandwidth is not None
    return HardwareSpec(
        name=str(data["name"]),
        vendor=str(data.get("vendor", "")),
        aliases=tuple(str(a) for a in data.get("aliases", [])),
        peak_flops=peaks,
        memory_bandwidth=bandwidth,
        memory_bytes=numbers["memory_bytes"],
        interconnect_bandwidth=numbers["interconnect_bandwidth"],
        interconnect=str(data.get("interconnect", "")),
        l2_bytes=numbers["l2_bytes"],
        l2_bandwidth=numbers["l2_bandwidth"],
        verified=bool(data.get("verified", True)),
        notes=str(data.get("notes", "")),
        sources={str(k): str(v) for k, v in sources.items()},
        path=str(path),
        calibrated=bool(data.get("calibrated", False)),
    )


def load_file(path: Path) -> HardwareSpec:
    """Read and validate one TOML file."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise HardwareFileError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise HardwareFileError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_entry(data, path, require_sources=not data.get("calibrated", False))


@dataclass
class HardwareDB:
    """All entries from the loaded folders, plus the problems found while loading them."""

    entries: list[HardwareSpec] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_dirs(cls, dirs: list[Path]) -> HardwareDB:
        """Load every *.toml under each folder; a bad file is recorded, the rest still load."""
        db = cls()
        for folder in dirs:
            folder = Path(folder)
            files = [folder] if folder.is_file() else sorted(folder.rglob("*.toml"))
            for path in files:
                try:
                    db.add(load_file(path))
                except HardwareFileError as exc:
                    db.problems.append(str(exc))
        return db

    def add(self, spec: HardwareSpec) -> None:
        """Add an entry; a later entry with the same name replaces the earlier (user overrides)."""
        self.entries = [e for e in self.entries if normalise(e.name) != normalise(spec.name)]
        self.entries.append(spec)

    def _keys(self, spec: HardwareSpec) -> set[str]:
        keys = {normalise(spec.name)} | {normalise(a) for a in spec.aliases}
        if spec.path:
            keys.add(normalise(Path(spec.path).stem))
        return keys

    def find(self, name: str) -> HardwareSpec | None:
        """Exact match on name, alias or file stem, ignoring case and punctuation."""
        key = normalise(name)
        for spec in reversed(self.entries):
            if key in self._keys(spec):
                return spec
        return None

    def get(self, name: str) -> HardwareSpec:
        """Find an entry or raise a UserError with did-you-mean suggestions."""
        spec = self.find(name)
        if spec is not None:
            return spec
        path = Path(name)
        if name.endswith(".toml") and path.exists():
            try:
                return load_file(path)
            except HardwareFileError as exc:
                raise HardwareError(str(exc)) from None
        raise HardwareError(f"unknown hardware '{name}'{self.suggest(name)}; see `rooflinekit hardware list`")

    def suggest(self, name: str) -> str:
        """' (did you mean X, Y?)' for near misses, or an empty string."""
        choices: dict[str, str] = {}
        for spec in self.entries:
            for key in self._keys(spec):
                choices[key] = spec.name
        key = normalise(name)
        close = difflib.get_close_matches(key, list(choices), n=3, cutoff=0.5)
        close += [k for k in choices if key and (key in k or k in key)]
        names = list(dict.fromkeys(choices[k] for k in close))[:3]
        return f" (did you mean {', '.join(names)}?)" if names else ""


DEFAULT_HARDWARE = "H800 SXM5"


def user_hardware_dir() -> Path:
    """Where calibrated and user entries live: $ROOFLINEKIT_HOME/hardware or ~/.config/rooflinekit/hardware."""
    home = os.environ.get("ROOFLINEKIT_HOME")
    base = Path(home) if home else Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "rooflinekit"
    return base / "hardware"


def hardware_db(host: PluginHost | None = None) -> HardwareDB:
    """The database from every plugin's folders, then the user's folder and $ROOFLINEKIT_HARDWARE_PATH."""
    host = host or get_host()
    dirs: list[Path] = []
    for answer, _ in reversed(host.call_all("rooflinekit_hardware_dirs", expect=(list, tuple))):
        dirs.extend(Path(p) for p in answer)
    user = user_hardware_dir()
    if user.is_dir():
        dirs.append(user)
    extra = os.environ.get("ROOFLINEKIT_HARDWARE_PATH", "")
    dirs.extend(Path(p) for p in extra.split(os.pathsep) if p)
    return HardwareDB.from_dirs(dirs)
