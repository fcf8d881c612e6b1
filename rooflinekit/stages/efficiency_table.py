"""The tables of achievable fractions behind the expected time: the committed table of each GPU
generation (`efficiency*.toml`, a source per value), a file named with `--efficiency`, and which one
prices a hardware entry (rooflinekit.stages.expected uses them; docs/accounting.md, Expected time)."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from rooflinekit.core.errors import UserError
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.stages.efficiency_curve import Curve, bandwidth_at, compute_at, parse_curve
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.kernel_times import KernelTimes, resolve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: The committed table of achievable fractions (docs/accounting.md, "Expected time").
TABLE_FILE = Path(__file__).resolve().with_name("efficiency.toml")
#: The committed table as plugins name it (`--efficiency published`).
PUBLISHED_EFFICIENCY = TABLE_FILE
CLASSES = ("gemm_large", "gemm_small", "attention_decode", "attention_prefill", "elementwise")
#: How the conventions name an efficiency source other than the committed tables (its path follows).
OWN_SOURCE_WORDS = "fractions from the efficiency source "


@dataclass(frozen=True)
class Fractions:
    """The achievable fractions of one kernel class: of the dtype's dense peak and of HBM bandwidth;
    with a `curve`, those of a kernel of a given size (`at`)."""

    compute: float
    bandwidth: float
    compute_by_dtype: dict[str, float] = field(default_factory=dict)
    curve: Curve | None = None
    bandwidth_by_dtype: dict[str, float] = field(default_factory=dict)

    def compute_for(self, dtype: str) -> float:
        return self.compute_by_dtype.get(dtype, self.compute)

    def bandwidth_for(self, dtype: str) -> float:
        return self.bandwidth_by_dtype.get(dtype, self.bandwidth)

    def at(self, size: float | None) -> Fractions:
        """The fractions of a kernel of `size` on the class's curve (rooflinekit.stages.efficiency_curve),
        flat ones; itself where the class has no curve or the size is not known."""
        if self.curve is None or size is None:
            return self
        key = (id(self), float(size))
        kept = _AT.get(key)
        if kept is None or kept[0] is not self:
            if len(_AT) > 50000:
                _AT.clear()
            kept = _AT[key] = (self, _resolved(self, self.curve, float(size)))
        return kept[1]


#: (id(fractions), size) -> (fractions, the flat fractions at that size): Fractions.at's cache
_AT: dict[tuple[int, float], tuple[Fractions, Fractions]] = {}


def _resolved(f: Fractions, c: Curve, size: float) -> Fractions:
    """Flat fractions at `size`: a format's own curve, else its own constant, else the class curve,
    else the class constant."""
    compute = compute_at(c.at, c.compute, size) if c.compute else f.compute
    bandwidth = bandwidth_at(c.at, c.bandwidth, size) if c.bandwidth else f.bandwidth
    by_dtype = {**f.compute_by_dtype, **{d: compute_at(c.at, v, size) for d, v in c.compute_by_dtype.items()}}
    by_bw = {**f.bandwidth_by_dtype, **{d: bandwidth_at(c.at, v, size) for d, v in c.bandwidth_by_dtype.items()}}
    return Fractions(compute, bandwidth, by_dtype, None, by_bw)


@dataclass(frozen=True)
class EfficiencyTable:
    classes: dict[str, Fractions]
    small_gemm_max_rows: int
    launch_decode_s: float
    launch_prefill_s: float
    sources: dict[str, str] = field(default_factory=dict)
    path: str = ""
    calibrated: bool = False
    #: grouped expert GEMMs' bandwidth fraction by one expert's matrix bytes (the table's `[experts]`)
    experts: Curve | None = None
    #: dense GEMMs' bandwidth fraction by their weight matrix's bytes (the table's `[weights]`)
    weights: Curve | None = None
    #: the table's `[kernel_times]`: a database of measured kernels by shape (rooflinekit.stages.kernel_times)
    kernel_times_spec: dict | None = None
    #: the host's time to issue one eagerly launched (prefill) kernel; 0 where the table gives none
    launch_host_prefill_s: float = 0.0

    def times(self) -> KernelTimes | None:
        """The database of measured kernels the table names, resolved through the plugins; None if none."""
        if not self.kernel_times_spec or self.calibrated:
            return None
        return resolve(self.kernel_times_spec, self.path)

    def launch_s(self, phase: str) -> float:
        """Per kernel on the GPU: a CUDA graph node's cost in decode and in a mixed step (engines
        replay the step's non-attention kernels as graphs: vLLM's piecewise CUDA graphs), a queued
        eager launch's in prefill (the host's own time to issue it is host_s)."""
        return self.launch_decode_s if phase in ("decode", "mixed") else self.launch_prefill_s

    def host_s(self, phase: str) -> float:
        """Per kernel, the host's time to issue it: an eager launch's in prefill; 0 where a CUDA graph
        replays the step (one launch for the whole graph)."""
        return 0.0 if phase in ("decode", "mixed") else self.launch_host_prefill_s

    def launches_s(self, phase: str, kernels: float, busy_s: float) -> float:
        """The time `kernels` launches add to a step whose GPU work takes `busy_s`: each kernel's
        GPU-side cost (launch_s), or, where the host issuing them eagerly takes longer than the GPU
        needs for the work and those costs, the host's excess: the GPU waits for it. The host runs
        ahead of the GPU (CUDA launches are asynchronous), so the step is max(work + kernels x launch_s,
        kernels x host_s)."""
        return max(kernels * self.launch_s(phase), kernels * self.host_s(phase) - busy_s)


def _fraction(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{where} must be a fraction in (0, 1], not {value!r}")
    return float(value)


def load_table(path: str | None = None) -> EfficiencyTable:
    """The table of achievable fractions (default: the committed `efficiency.toml`), read again
    when the file changes (a source rewritten by `calibrate --trace` in the same process)."""
    file = Path(path) if path else TABLE_FILE
    try:
        stat = file.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = None
    return _load_table(str(file), stamp)


@lru_cache(maxsize=16)
def _load_table(path: str, stamp: tuple[int, int] | None) -> EfficiencyTable:
    file = Path(path)
    try:
        return _parsed(tomllib.loads(file.read_text()), file)
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"no key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise UserError(f"efficiency source {file}: {what} (rooflinekit calibrate --trace writes a valid one; "
                        "docs/accounting.md, Expected time)") from None


def _parsed(data: dict, file: Path) -> EfficiencyTable:
    """The table from a parsed efficiency source (KeyError, ValueError where it is not one)."""
    classes, sources = {}, {}
    for name in CLASSES:
        entry = data["classes"][name]
        extra = {k.removeprefix("compute_"): _fraction(v, f"{name}.{k}") for k, v in entry.items()
                 if k.startswith("compute_")}
        extra_bw = {k.removeprefix("bandwidth_"): _fraction(v, f"{name}.{k}") for k, v in entry.items()
                    if k.startswith("bandwidth_")}
        curve = parse_curve(entry["curve"], name) if "curve" in entry else None
        classes[name] = Fractions(_fraction(entry["compute"], f"{name}.compute"),
                                  _fraction(entry["bandwidth"], f"{name}.bandwidth"), extra, curve, extra_bw)
        sources.update({f"{name}.{k}": v for k, v in entry.get("sources", {}).items()})
    launch = data["launch"]
    sources.update({f"launch.{k}": v for k, v in launch.get("sources", {}).items()})
    experts, weights = (_bandwidth_curve(data, name) for name in ("experts", "weights"))
    spec = data.get("kernel_times")
    if spec is not None and not isinstance(spec, dict):
        raise ValueError("kernel_times must be a table: source = NAME and its settings")
    costs = {k: float(launch[k]) for k in ("decode_s", "prefill_s")}
    costs["host_prefill_s"] = float(launch.get("host_prefill_s", 0.0))
    for k, v in costs.items():
        if not 0 <= v < 1:
            raise ValueError(f"launch.{k} must be seconds per kernel, 0 or more (a few microseconds), not {v!r}")
    table = EfficiencyTable(classes=classes, small_gemm_max_rows=int(data["small_gemm_max_rows"]),
                            launch_decode_s=costs["decode_s"], launch_prefill_s=costs["prefill_s"],
                            sources=sources, path=str(file), experts=experts, weights=weights, kernel_times_spec=spec,
                            launch_host_prefill_s=costs["host_prefill_s"])
    return table  # its kernel-times database is resolved where it is used (with_efficiency, times())


def _bandwidth_curve(data: dict, name: str) -> Curve | None:
    """The table's `[experts]` or `[weights]` curve: one bandwidth list by bytes (None where absent)."""
    if name not in data:
        return None
    curve = parse_curve(data[name]["curve"], name)
    if curve.bandwidth is None or curve.compute or curve.compute_by_dtype or curve.bandwidth_by_dtype:
        raise ValueError(f"{name}.curve gives one bandwidth list (its compute is the GEMM classes')")
    return curve


def with_efficiency(hw: HardwareSpec, source: str | None, host: PluginHost | None = None) -> HardwareSpec:
    """`hw` priced with the efficiency source `source` (`--efficiency`; None or "": the entry's own,
    its `efficiency` key, else the committed table). The plugins' rooflinekit_efficiency_source
    answers name the file (built in: `published`, a path); it is read here, so a bad file or an
    unknown name stops with one line."""
    if not source:
        return hw
    host = host or get_host()
    path, _ = host.first(host.hook.rooflinekit_efficiency_source, source=source, hardware=hw)
    if path is None:
        raise UserError(f"--efficiency {source!r}: no such efficiency source (give published, the path of an "
                        "efficiency file such as `rooflinekit calibrate --trace` writes, or a name a plugin "
                        "provides: `rooflinekit plugins`)")
    table = load_table(str(path))  # a UserError naming the file where it is not one
    if table.kernel_times_spec:  # its database from this host's plugins, kept for the process
        resolve(table.kernel_times_spec, table.path, host)
    published = Path(path).resolve() == TABLE_FILE
    if published and hw.calibrated:
        raise UserError(f"--efficiency {source}: '{hw.name}' is a calibrated entry, whose measured ceilings are "
                        "taken as achievable; the published fractions apply to datasheet entries (use the "
                        "datasheet entry, or --efficiency FILE)")
    return replace(hw, efficiency="" if published else str(path))


def generation_table(generation: str) -> Path:
    """The committed table of a GPU generation: `efficiency-<generation>.toml` beside the Hopper
    table (`efficiency.toml`) where one is committed, else the Hopper table."""
    if generation and generation != "hopper":
        own = TABLE_FILE.with_name(f"efficiency-{generation}.toml")
        if own.is_file():
            return own
    return TABLE_FILE


def committed_tables() -> list[Path]:
    """Every committed table (the Hopper one first): what a published-row result depends on."""
    return [TABLE_FILE, *sorted(TABLE_FILE.parent.glob("efficiency-*.toml"))]


def tables_digest() -> str:
    """sha256[:16] of every committed table (names and contents): what a published-row result and
    the spread computed from them depend on."""
    digest = hashlib.sha256()
    for path in committed_tables():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def table_for(hw: HardwareSpec) -> EfficiencyTable:
    """The table an entry is priced with: its own efficiency source where it names one; a
    calibrated entry's measured ceilings are achievable (every fraction 1); any other entry takes
    the committed table of its generation (generation_table)."""
    if hw.efficiency:
        return load_table(hw.efficiency)
    path = generation_table(hw.generation)
    table = load_table(None if path == TABLE_FILE else str(path))
    if not hw.calibrated:
        return table
    return _at_ones(table)


#: id(table) -> (table, the same at fraction 1): one per loaded table (they are kept by load_table)
_ONES: dict[int, tuple[EfficiencyTable, EfficiencyTable]] = {}


def _at_ones(table: EfficiencyTable) -> EfficiencyTable:
    """`table` with every fraction 1 (a calibrated entry's measured ceilings), one per table."""
    kept = _ONES.get(id(table))
    if kept is None or kept[0] is not table:
        ones = {name: Fractions(1.0, 1.0) for name in CLASSES}
        kept = _ONES[id(table)] = (table, replace(table, classes=ones, calibrated=True, experts=None, weights=None,
                                                  kernel_times_spec=None))
    return kept[1]
