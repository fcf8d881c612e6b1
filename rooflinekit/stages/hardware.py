"""The hardware database: TOML entries (one device per file) with dense peaks, SI bandwidths, sources."""

from __future__ import annotations

import difflib
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rooflinekit.core.errors import HardwareError
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.stages.roofline import ridge

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: Peak-table keys, in display order. int8 rates are ops/s.
DTYPE_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

_NUMERIC_FIELDS = ("memory_bytes", "memory_bandwidth", "interconnect_bandwidth", "l2_bytes", "l2_bandwidth",
                   "memory_reserve_bytes", "interconnect_latency", "collective_latency", "node_gpus",
                   "scale_out_bandwidth", "scale_out_latency")
#: Bytes held back from capacity when an entry gives no memory_reserve_bytes: the CUDA context
#: (about 0.5 GiB) and communication buffers (hardware_db/README.md, "Capacity").
DEFAULT_RESERVE_BYTES = 1 << 30


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator: dense peak FLOP/s per dtype and memory bandwidth in B/s (SI)."""

    name: str
    peak_flops: dict[str, float]
    memory_bandwidth: float
    vendor: str = ""
    aliases: tuple[str, ...] = ()
    memory_bytes: float | None = None
    #: Bytes of memory_bytes a serving process cannot use for the model (CUDA context, communication
    #: buffers); None: DEFAULT_RESERVE_BYTES.
    memory_reserve_bytes: float | None = None
    interconnect_bandwidth: float | None = None
    #: Seconds: the lowest per-call latency any collective algorithm has on the links (one step at
    #: the link's hardware latency); the collectives' time bound adds it to every call.
    interconnect_latency: float | None = None
    #: Seconds: the per-call latency a standard library (NCCL, RCCL) measures at small messages;
    #: the collectives' expected time adds it to every call.
    collective_latency: float | None = None
    interconnect: str = ""
    #: GPUs one node joins on `interconnect` (its NVLink/Infinity Fabric domain); a collective over a
    #: larger group crosses the scale-out network. None: every group is one node's.
    node_gpus: int | None = None
    #: B/s each GPU sends (and receives at the same time) on the scale-out network (its NIC), one
    #: direction; and the network's lowest per-message latency, in seconds.
    scale_out_bandwidth: float | None = None
    scale_out_latency: float | None = None
    l2_bytes: float | None = None
    l2_bandwidth: float | None = None
    verified: bool = True
    notes: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    path: str = ""
    calibrated: bool = False
    #: An efficiency source the expected time prices this part with instead of the committed table
    #: (`rooflinekit calibrate --trace` writes one; the entry's `efficiency` key, relative to it).
    efficiency: str = ""
    #: The GPU's architecture generation (GENERATIONS): the expected time takes the committed table
    #: of that generation where one exists (rooflinekit.stages.efficiency_table.table_for).
    generation: str = ""

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

    @property
    def reserve_bytes(self) -> float:
        """Bytes held back from capacity: the entry's memory_reserve_bytes or DEFAULT_RESERVE_BYTES."""
        return self.memory_reserve_bytes if self.memory_reserve_bytes is not None else float(DEFAULT_RESERVE_BYTES)

    def ridge(self, dtype_key: str) -> float:
        """Ridge point I* = peak / bandwidth, in FLOP/B, for one dtype."""
        return ridge(self.peak(dtype_key), self.memory_bandwidth)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "vendor": self.vendor,
            "aliases": list(self.aliases),
            "peak_flops": dict(self.peak_flops),
            "bandwidth": self.memory_bandwidth,
            "ridge": {k: ridge(v, self.memory_bandwidth) for k, v in self.peak_flops.items()},
            "memory_bytes": self.memory_bytes,
            "memory_reserve_bytes": self.memory_reserve_bytes,
            "interconnect_bandwidth": self.interconnect_bandwidth,
            "interconnect_latency": self.interconnect_latency,
            "collective_latency": self.collective_latency,
            "node_gpus": self.node_gpus,
            "scale_out_bandwidth": self.scale_out_bandwidth,
            "scale_out_latency": self.scale_out_latency,
            "verified": self.verified,
            "calibrated": self.calibrated,
            **({"efficiency": self.efficiency} if self.efficiency else {}),
            **({"generation": self.generation} if self.generation else {}),
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
    """A database file that cannot be used; the message names its path and the field at fault.

    `names` holds the normalised names the file would answer to (its stem, and the name and
    aliases it declares where readable), so that asking for that entry names this problem."""

    names: frozenset[str] = frozenset()


#: Plausible ranges (inclusive) for every number an entry gives, SI units: anything outside is a
#: typo (GB/s written as B/s, a sparse or per-board figure, an exponent off by a few) or a broken
#: measurement, and is refused naming the file and the field. hardware_db/README.md explains them.
BOUNDS: dict[str, tuple[float, float, str]] = {
    "peak_flops": (1e8, 1e18, "FLOP/s"),
    "memory_bandwidth": (1e8, 1e17, "B/s"),
    "interconnect_bandwidth": (1e6, 1e17, "B/s"),
    "l2_bandwidth": (1e8, 1e17, "B/s"),
    "memory_bytes": (1e6, 1e16, "B"),
    "l2_bytes": (1e3, 1e12, "B"),
    "memory_reserve_bytes": (1e6, 1e12, "B"),
    "interconnect_latency": (1e-8, 1e-3, "s"),
    "collective_latency": (1e-7, 1e-2, "s"),
    "node_gpus": (1, 1024, "GPUs"),
    "scale_out_bandwidth": (1e6, 1e15, "B/s"),
    "scale_out_latency": (1e-8, 1e-3, "s"),
}


def check_value(field_name: str, value: object) -> str | None:
    """Why `value` cannot be `field_name` (a key of BOUNDS, or 'peak_flops.<dtype>'), or None.

    A number must be a real number (not a bool or a string), finite, positive, and inside the
    field's plausible range (BOUNDS)."""
    lo, hi, unit = BOUNDS[field_name.split(".")[0]]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number ({unit}), got {type(value).__name__} {value!r:.60}"
    if not math.isfinite(value):
        return f"must be a finite number ({unit}), got {value}"
    if value <= 0:
        return f"must be positive, got {value:g}"
    if not lo <= value <= hi:
        return (f"{value:g} {unit} is implausible (outside {lo:g} to {hi:g} {unit}; "
                "see hardware_db/README.md)")
    return None


def _number(data: dict, key: str, path: Path, field_name: str | None = None) -> float | None:
    if key not in data:
        return None
    field_name = field_name or key
    problem = check_value(field_name, data[key])
    if problem:
        raise HardwareFileError(f"{path}: {field_name} {problem}")
    return float(data[key])


def _text(data: dict, key: str, path: Path, default: str = "") -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise HardwareFileError(f"{path}: {key} must be a string, got {type(value).__name__} {value!r:.60}")
    return value


def _flag(data: dict, key: str, path: Path, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise HardwareFileError(f"{path}: {key} must be true or false, got {type(value).__name__} {value!r:.60}")
    return value


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
        number = _number(peaks_raw, key, path, f"peak_flops.{key}")
        assert number is not None
        peaks[key] = number
    name = _text(data, "name", path)
    if not name.strip():
        raise HardwareFileError(f"{path}: name must not be empty")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise HardwareFileError(f"{path}: aliases must be a list of strings, got {aliases!r:.60}")
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise HardwareFileError(f"{path}: [sources] must be a table")
    bad_sources = [str(k) for k, v in sources.items() if not isinstance(v, str)]
    if bad_sources:
        raise HardwareFileError(f"{path}: sources.{bad_sources[0]} must be a string (the source of the number)")
    numbers = {k: _number(data, k, path) for k in _NUMERIC_FIELDS}
    if require_sources:
        missing = [k for k, v in numbers.items() if v is not None and k not in sources]
        if "peak_flops" not in sources:
            missing += [f"peak_flops.{k}" for k in peaks if f"peak_flops.{k}" not in sources]
        if missing:
            raise HardwareFileError(f"{path}: no source for {', '.join(missing)} (add them under [sources])")
    bandwidth = numbers["memory_bandwidth"]
    assert bandwidth is not None
    reserve, capacity = numbers["memory_reserve_bytes"], numbers["memory_bytes"]
    if reserve is not None and capacity is not None and reserve >= capacity:
        raise HardwareFileError(f"{path}: memory_reserve_bytes {reserve:g} B must be below memory_bytes {capacity:g} B")
    if numbers["node_gpus"] is not None and numbers["node_gpus"] != int(numbers["node_gpus"]):
        raise HardwareFileError(f"{path}: node_gpus must be a whole number of GPUs, got {numbers['node_gpus']:g}")
    fastest, library = numbers["interconnect_latency"], numbers["collective_latency"]
    if fastest is not None and library is not None and fastest > library:
        raise HardwareFileError(f"{path}: interconnect_latency {fastest:g} s (the floor) must not exceed "
                                f"collective_latency {library:g} s (what a library measures)")
    return HardwareSpec(
        name=name,
        vendor=_text(data, "vendor", path),
        aliases=tuple(aliases),
        peak_flops=peaks,
        memory_bandwidth=bandwidth,
        memory_bytes=numbers["memory_bytes"],
        memory_reserve_bytes=reserve,
        interconnect_bandwidth=numbers["interconnect_bandwidth"],
        interconnect_latency=fastest,
        collective_latency=library,
        interconnect=_text(data, "interconnect", path),
        node_gpus=int(numbers["node_gpus"]) if numbers["node_gpus"] is not None else None,
        scale_out_bandwidth=numbers["scale_out_bandwidth"],
        scale_out_latency=numbers["scale_out_latency"],
        l2_bytes=numbers["l2_bytes"],
        l2_bandwidth=numbers["l2_bandwidth"],
        verified=_flag(data, "verified", path, True),
        notes=_text(data, "notes", path),
        sources={str(k): v for k, v in sources.items()},
        path=str(path),
        calibrated=_flag(data, "calibrated", path, False),
        efficiency=_efficiency(data, path),
        generation=_generation(data, path),
    )


#: Architecture generations an entry may name (`generation = "hopper"`).
GENERATIONS = ("volta", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3")


def _generation(data: dict, path) -> str:
    value = _text(data, "generation", path)
    if value and value not in GENERATIONS:
        raise HardwareFileError(f"{path}: generation {value!r} is not one of {', '.join(GENERATIONS)}")
    return value


def _efficiency(data: dict, path) -> str:
    """The entry's efficiency source (a path relative to the entry's file), checked to exist."""
    value = data.get("efficiency")
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise HardwareFileError(f"{path}: efficiency must be the path of an efficiency source (.toml)")
    source = Path(path).parent / value if path else Path(value)
    if not source.is_file():
        raise HardwareFileError(f"{path}: efficiency {value!r}: no such file ({source})")
    return str(source)


def _declared_names(data: dict, path: Path) -> frozenset[str]:
    names = [Path(path).stem, data.get("name")]
    aliases = data.get("aliases")
    if isinstance(aliases, list):
        names += aliases
    return frozenset(normalise(n) for n in names if isinstance(n, str) and normalise(n))


def load_file(path: Path) -> HardwareSpec:
    """Read and validate one TOML file; HardwareFileError names the file and what is wrong."""
    data: dict = {}
    try:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise HardwareFileError(f"{path}: not valid TOML: {exc}") from None
        except UnicodeDecodeError:
            raise HardwareFileError(f"{path}: not a TOML text file (not UTF-8)") from None
        except RecursionError:
            raise HardwareFileError(f"{path}: not a usable TOML file: nested too deeply") from None
        except OSError as exc:
            raise HardwareFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
        return parse_entry(data, path, require_sources=data.get("calibrated", False) is not True)
    except HardwareFileError as exc:
        exc.names = _declared_names(data, path)
        raise


@dataclass
class HardwareDB:
    """All entries from the loaded folders, plus the problems found while loading them."""

    entries: list[HardwareSpec] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: Files skipped as unusable: asking for the entry one of them declares names its problem.
    rejected: list[HardwareFileError] = field(default_factory=list)

    @classmethod
    def from_dirs(cls, dirs: list[Path]) -> HardwareDB:
        """Load every *.toml under each folder; a bad file is recorded (one problem naming the
        file and the field), the rest still load."""
        db = cls()
        for folder in dirs:
            folder = Path(folder)
            try:
                files = [folder] if folder.is_file() else sorted(folder.rglob("*.toml"))
            except OSError as exc:
                db.problems.append(f"{folder}: cannot list hardware folder: {exc.strerror or exc}")
                continue
            for path in files:
                try:
                    db.add(load_file(path))
                except HardwareFileError as exc:
                    db.reject(exc)
                except Exception as exc:  # never let one file take the database down
                    db.reject(HardwareFileError(f"{path}: cannot load: {type(exc).__name__}: {exc}"))
        return db

    def reject(self, exc: HardwareFileError) -> None:
        self.problems.append(str(exc))
        self.rejected.append(exc)

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
        key = normalise(name)
        for exc in reversed(self.rejected):  # the entry asked for is in a file that was skipped
            if key in exc.names:
                raise HardwareError(str(exc))
        if name.endswith(".toml") or "/" in name or os.sep in name:  # a path, not an entry name
            if path.exists() and not name.endswith(".toml"):
                raise HardwareError(f"hardware file {name}: not a .toml file (--hardware loads .toml paths)")
            raise HardwareError(f"hardware file not found: {name}")
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
    problems: list[str] = []
    for answer, plugin in reversed(host.each(host.hook.rooflinekit_hardware_dirs)):
        usable, unusable = _usable_dirs(answer)
        dirs.extend(usable)
        if unusable:
            problems.append(f"plugin '{plugin}' answered rooflinekit_hardware_dirs with unusable items: "
                            f"{', '.join(unusable)}; ignored")
    user = user_hardware_dir()
    if user.is_dir():
        dirs.append(user)
    extra = os.environ.get("ROOFLINEKIT_HARDWARE_PATH", "")
    usable, unusable = _usable_dirs([p for p in extra.split(os.pathsep) if p])
    dirs.extend(usable)
    if unusable:
        problems.append(f"ROOFLINEKIT_HARDWARE_PATH: {', '.join(unusable)}; ignored")
    db = HardwareDB.from_dirs(dirs)
    db.problems[:0] = problems
    return db


def _usable_dirs(items) -> tuple[list[Path], list[str]]:
    """The items that are existing folders or files (str or path-like), and why each other one is not."""
    usable: list[Path] = []
    unusable: list[str] = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            unusable.append(f"{item!r} (not a path)")
            continue
        try:
            path = Path(item)
            exists = path.exists()
        except (TypeError, ValueError, OSError) as exc:
            unusable.append(f"{item!r} ({type(exc).__name__}: {exc})")
            continue
        if not exists:
            unusable.append(f"{str(path)!r} (no such file or folder)")
            continue
        usable.append(path)
    return usable, unusable
