"""Sweeps: one model profiled over a grid of (batch, context), and the critical batch per context.

The model is built once per sweep (it does not depend on batch or context); each point makes its
own inputs and runs one capture. The critical batch comes from the model's own counts: per-step
FLOPs and bytes are fitted as affine functions of batch from two profiled batches, the fit is
checked on a third, and where it fails (MoE: the experts touched grow with batch) the batch is
found by a search with real profiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace

from rooflinekit import SCHEMA_VERSION, __version__
from rooflinekit.errors import UserError

#: A fit whose prediction misses a checked batch by more than this is not trusted.
FIT_TOLERANCE = 0.01
#: The search for a critical batch stops here (meta-device profiles cost the same at any batch).
MAX_BATCH = 4096

ASSUMPTION = (
    "critical batch: the smallest batch whose whole step (executed FLOPs / executed bytes) reaches "
    "the ridge point. Per-step FLOPs and bytes are assumed affine in batch, F(B) = F0 + B*f and "
    "bytes(B) = W + B*k (weights read once per step, per-sequence work fixed), fitted on two "
    "profiled batches and checked on the others; the intensity then saturates at f/k. A fit off "
    f"by more than {FIT_TOLERANCE:.0%} (MoE: experts touched grow with batch) is replaced by a "
    "search with real profiles (doubling, then bisection)."
)

Probe = Callable[[int], tuple[float, float]]


# -- one point -------------------------------------------------------------------------------


def point_row(report: dict) -> dict:
    """The sweep row of one profile report: the whole step, its byte split, attention totals."""
    w, t, at = report["workload"], report["totals"], report["attention_totals"]
    recognised = [a for a in report["attention"] if a["recognised"]]
    att_bytes_min = sum(a["bytes_min"] for a in recognised)
    att_bytes_exec = sum(a["bytes_executed"] for a in recognised)
    att_flops_exec = sum(a["flops_executed"] for a in recognised)
    layers = len(recognised)
    nbytes = t["bytes"] or 0.0
    # the step with each recognised attention layer at its architecture minimum (a fused kernel)
    ideal_bytes = nbytes - att_bytes_exec + att_bytes_min
    return {
        "batch": w["batch"],
        "context": w["context"],
        "phase": w["phase"],
        "tokens": w["tokens"],
        "flops": t["flops"],
        "flops_model": t["flops_model"],
        "bytes": nbytes,
        "intensity": t["intensity"],
        "attainable_flops": t["attainable_flops"],
        "bound": t["bound"],
        "time_bound_s": t["time_bound_s"],
        "predicted_step_s": t["predicted_step_s"],
        "tokens_per_s": t["tokens_per_s"],
        "mfu_bound": t["mfu_bound"],
        "mfu_bound_model": t["mfu_bound_model"],
        "weight_bytes": t["weight_bytes"],
        "kv_bytes_executed": t["kv_bytes_executed"],
        "kv_bytes_min": t["kv_bytes_min"],
        "other_bytes": t["other_bytes"],
        "weight_share": t["weight_bytes"] / nbytes if nbytes else None,
        "kv_share": t["kv_bytes_executed"] / nbytes if nbytes else None,
        "other_share": t["other_bytes"] / nbytes if nbytes else None,
        "attention": {
            "layers": at["layers"],
            "recognised": at["recognised"],
            "flops_model": at["flops_model"],
            "flops_executed": att_flops_exec,
            "bytes_min": att_bytes_min,
            "bytes_executed": att_bytes_exec,
            "kv_bytes_min": at["kv_bytes_min"],
            "kv_bytes_executed": at["kv_bytes_executed"],
            "cache_bytes_per_token": at["cache_bytes_per_token"],
            "cache_bytes_per_token_per_layer": at["cache_bytes_per_token"] / layers if layers else None,
            "intensity_min": at["intensity_min"],
            "intensity_executed": att_flops_exec / att_bytes_exec if att_bytes_exec else None,
        },
        "step_at_attention_minimum": {
            "flops": t["flops_model"],
            "bytes": ideal_bytes,
            "intensity": t["flops_model"] / ideal_bytes if ideal_bytes > 0 else None,
        },
    }


def _always(model):
    """A build_model that hands back an already built model: the sweep builds once."""

    def build_model(**_options):
        return model

    return build_model


class Profiler:
    """Profile one model at any (batch, context), building it once and caching each point's row."""

    def __init__(self, source, base, hardware: str, *, depth: int = 3, host=None, db=None):
        from rooflinekit.pipeline import hardware_db
        from rooflinekit.plugins import get_host

        self.source = source
        self.base = base
        self.hardware = hardware
        self.depth = depth
        self.host = host or get_host()
        self.db = db or hardware_db(self.host)
        self.rows: dict[tuple[int, int], dict] = {}
        self.header: dict | None = None  # model, hardware, warnings, notes of the first report
        self.profiles = 0
        self._built = None

    def row(self, batch: int, context: int) -> dict:
        """The sweep row at (batch, context), profiling it on first use."""
        key = (batch, context)
        if key not in self.rows:
            self.rows[key] = point_row(self.report(batch, context))
        return self.rows[key]

    def report(self, batch: int, context: int) -> dict:
        """A full profile report at (batch, context) with the model built once."""
        from rooflinekit.pipeline import profile

        workload = replace(self.base, batch=batch, context=context)
        source = self._built or self.source
        result = profile(source, workload, self.hardware, depth=self.depth, host=self.host, db=self.db)
        self.profiles += 1
        if self._built is None:
            self._built = replace(self.source, build_model=_always(result.model))
        if self.header is None:
            r = result.report
            self.header = {k: r[k] for k in ("schema_version", "tool", "model", "hardware", "warnings", "notes")}
        return result.report

    def probe(self, context: int, basis: str = "executed") -> Probe:
        """(flops, bytes) of the whole step as a function of batch, at one context."""

        def run(batch: int) -> tuple[float, float]:
            r = self.row(batch, context)
            if basis == "executed":
                return r["flops"], r["bytes"]
            ideal = r["step_at_attention_minimum"]
            return ideal["flops"], ideal["bytes"]

        return run


# -- critical batch ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AffineFit:
    """F(B) = flops0 + B*flops_per_seq and bytes(B) = bytes0 + B*bytes_per_seq, from two batches."""

    flops0: float
    flops_per_seq: float
    bytes0: float
    bytes_per_seq: float
    batches: tuple[int, int]
    residual: float | None = None  # largest relative miss on the checked batches
    checked: tuple[int, ...] = ()

    @classmethod
    def through(cls, b1: int, p1: tuple[float, float], b2: int, p2: tuple[float, float]) -> AffineFit:
        f = (p2[0] - p1[0]) / (b2 - b1)
        k = (p2[1] - p1[1]) / (b2 - b1)
        return cls(p1[0] - b1 * f, f, p1[1] - b1 * k, k, (b1, b2))

    def flops(self, batch: float) -> float:
        return self.flops0 + batch * self.flops_per_seq

    def bytes(self, batch: float) -> float:
        return self.bytes0 + batch * self.bytes_per_seq

    def intensity(self, batch: float) -> float:
        return self.flops(batch) / self.bytes(batch)

    @property
    def saturation(self) -> float:
        """The limit of F(B)/bytes(B) as B grows: f/k."""
        return math.inf if self.bytes_per_seq <= 0 else self.flops_per_seq / self.bytes_per_seq

    def miss(self, batch: int, point: tuple[float, float]) -> float:
        """Relative miss of the fit on a profiled point (the worse of FLOPs and bytes)."""
        flops, nbytes = point
        return max(abs(self.flops(batch) - flops) / flops if flops else 0.0,
                   abs(self.bytes(batch) - nbytes) / nbytes if nbytes else 0.0)

    def critical(self, ridge: float) -> int | None:
        """The smallest integer B >= 1 with F(B)/bytes(B) >= ridge, or None where none does."""
        if self.intensity(1) >= ridge:
            return 1
        slope = self.flops_per_seq - ridge * self.bytes_per_seq
        if slope <= 0:
            return None
        b = max(1, math.ceil((ridge * self.bytes0 - self.flops0) / slope - 1e-9))
        while self.intensity(b) < ridge:  # guard against rounding at the boundary
            b += 1
        while b > 1 and self.intensity(b - 1) >= ridge:
            b -= 1
        return b


@dataclass
class CriticalBatch:
    """The critical batch at one context: where the whole step reaches the ridge, or its ceiling."""

    context: int
    critical_batch: int | None
    saturation_intensity: float | None
    ridge: float
    method: str  # "affine fit" | "search"
    basis: str = "executed"
    residual: float | None = None
    fit: dict | None = None
    checked: dict[int, float] = field(default_factory=dict)  # batch -> profiled intensity
    note: str = ""

    def summary(self) -> str:
        """'never: saturates at 7.9 FLOP/B, ridge 295' or 'B* = 37 (saturates at 412 FLOP/B, ridge 295)'."""
        sat = _fmt(self.saturation_intensity)
        fitted = f"B={self.fit['batches'][0]},{self.fit['batches'][1]}" if self.fit else "-"
        residual = "-" if self.residual is None else f"{100 * self.residual:.2g}%"
        if self.method == "search":
            top = max(self.checked) if self.checked else None
            if self.critical_batch is None:
                text = (f"never up to batch {top}: intensity {_fmt(self.checked.get(top))} there, "
                        f"marginal {sat} FLOP/B, ridge {self.ridge:.0f}")
            else:
                text = f"B* = {self.critical_batch} (marginal intensity {sat} FLOP/B, ridge {self.ridge:.0f})"
            return f"{text} [search: affine fit on {fitted} missed by {residual}]"
        if self.critical_batch is None:
            text = f"never: saturates at {sat} FLOP/B, ridge {self.ridge:.0f}"
        else:
            text = f"B* = {self.critical_batch} (saturates at {sat} FLOP/B, ridge {self.ridge:.0f})"
        return f"{text} [affine fit on {fitted}, residual {residual}]"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["checked"] = {str(b): i for b, i in self.checked.items()}
        d["summary"] = self.summary()
        return d


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def probe_batches(batches: Iterable[int]) -> list[int]:
    """At least three distinct batches: the sweep's own, topped up from 1, 2, 8, 32, 128."""
    chosen = sorted(set(batches))
    for extra in (1, 2, 8, 32, 128):
        if len(chosen) >= 3:
            break
        if extra not in chosen:
            chosen = sorted({*chosen, extra})
    return chosen


def fit_affine(probe: Probe, batches: list[int]) -> AffineFit:
    """Fit through the smallest and largest batch; the residual is the worst miss on the others."""
    b1, b2 = batches[0], batches[-1]
    fit = AffineFit.through(b1, probe(b1), b2, probe(b2))
    inner = tuple(batches[1:-1])
    residual = max((fit.miss(b, probe(b)) for b in inner), default=None)
    return replace(fit, residual=residual, checked=inner)


def _intensity(point: tuple[float, float]) -> float:
    flops, nbytes = point
    return math.inf if nbytes <= 0 else flops / nbytes


def search_critical(probe: Probe, ridge: float, max_batch: int = MAX_BATCH) -> tuple[int | None, float | None, dict[int, float]]:
    """Doubling then bisection with real profiles; returns (batch or None, marginal intensity, probes).

    Assumes the step's intensity does not fall as batch grows. The saturation estimate is the
    marginal intensity between the two largest batches probed: (F2-F1)/(bytes2-bytes1).
    """
    seen: dict[int, float] = {}

    def at(b: int) -> float:
        if b not in seen:
            seen[b] = _intensity(probe(b))
        return seen[b]

    lo, hi, b = 0, None, 1
    while True:
        if at(b) >= ridge:
            hi = b
            break
        lo = b
        if b >= max_batch:
            break
        b = min(2 * b, max_batch)
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if at(mid) >= ridge:
                hi = mid
            else:
                lo = mid
    top = sorted(seen)[-2:]
    marginal = None
    if len(top) == 2:
        (f1, y1), (f2, y2) = probe(top[0]), probe(top[1])
        marginal = math.inf if y2 == y1 else (f2 - f1) / (y2 - y1)
    return hi, marginal, seen


def critical_batch(
    probe: Probe,
    context: int,
    ridge: float,
    batches: Iterable[int],
    *,
    basis: str = "executed",
    tolerance: float = FIT_TOLERANCE,
    max_batch: int = MAX_BATCH,
    verify: bool = True,
) -> CriticalBatch:
    """The critical batch at `context` from profiles: an affine fit if it holds, else a search."""
    batches = probe_batches(batches)
    fit = fit_affine(probe, batches)
    fit_dict = {
        "flops0": fit.flops0, "flops_per_seq": fit.flops_per_seq, "bytes0": fit.bytes0,
        "bytes_per_seq": fit.bytes_per_seq, "batches": list(fit.batches), "checked": list(fit.checked),
    }
    if fit.residual is not None and fit.residual <= tolerance:
        crit = fit.critical(ridge)
        checked: dict[int, float] = {}
        if verify and crit is not None:
            # a real profile on each side of the solved batch; step if rounding put it off by one
            while True:
                checked[crit] = _intensity(probe(crit))
                if checked[crit] < ridge and crit < max_batch:
                    crit += 1
                    continue
                if crit > 1:
                    checked[crit - 1] = _intensity(probe(crit - 1))
                    if checked[crit - 1] >= ridge:
                        crit -= 1
                        continue
                break
        return CriticalBatch(context, crit, fit.saturation, ridge, "affine fit", basis, fit.residual,
                             fit_dict, checked)
    crit, marginal, seen = search_critical(probe, ridge, max_batch)
    note = (f"affine fit missed by {100 * fit.residual:.2g}% (bytes not affine in batch, e.g. MoE); "
            f"searched with {len(seen)} profiles up to batch {max(seen)}; saturation is the marginal "
            "intensity between the two largest batches probed")
    return CriticalBatch(context, crit, marginal, ridge, "search", basis, fit.residual, fit_dict,
                         dict(sorted(seen.items())), note)


# -- the sweep --------------------------------------------------------------------------------


@dataclass
class SweepResult:
    """Rows per point, critical batch per context, and whether the user stopped it early."""

    header: dict
    base: dict
    batches: list[int]
    contexts: list[int]
    points: list[dict] = field(default_factory=list)
    critical: list[CriticalBatch] = field(default_factory=list)
    critical_ideal: list[CriticalBatch] = field(default_factory=list)
    interrupted: bool = False
    profiles: int = 0
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        notes = list(self.header.get("notes", []))
        if self.critical:
            notes.append(ASSUMPTION)
        if self.interrupted:
            total = len(self.batches) * len(self.contexts)
            notes.append(f"interrupted: {len(self.points)} of {total} points done"
                         + ("" if len(self.points) == total else "; critical batch not computed")
                         + (f"; critical batch for {len(self.critical)} of {len(self.contexts)} contexts"
                            if len(self.points) == total else ""))
        return {
            "schema_version": self.header.get("schema_version", SCHEMA_VERSION),
            "kind": "sweep",
            "tool": self.header.get("tool", {"name": "rooflinekit", "version": __version__}),
            "model": self.header.get("model", {}),
            "hardware": self.header.get("hardware", {}),
            "workload": dict(self.base, batches=self.batches, contexts=self.contexts),
            "points": self.points,
            "critical_batch": [c.to_dict() for c in self.critical],
            "critical_batch_attention_minimum": [c.to_dict() for c in self.critical_ideal],
            "interrupted": self.interrupted,
            "profiles": self.profiles,
            "wall_s": self.wall_s,
            "warnings": list(self.header.get("warnings", [])),
            "notes": notes,
        }


def run_sweep(
    source,
    base,
    batches: list[int],
    contexts: list[int],
    hardware: str,
    *,
    critical: bool = True,
    max_batch: int = MAX_BATCH,
    progress: Callable[[dict], None] | None = None,
    profiler: Profiler | None = None,
) -> SweepResult:
    """Profile every (batch, context), then the critical batch per context. Ctrl-C keeps what is done."""
    import time

    start = time.perf_counter()
    prof = profiler or Profiler(source, base, hardware)
    base_info = {k: v for k, v in base.to_dict().items() if k not in ("batch", "context", "q_len", "tokens")}
    result = SweepResult(header={}, base=base_info, batches=list(batches), contexts=list(contexts))
    try:
        for context in contexts:
            for batch in batches:
                row = prof.row(batch, context)
                result.points.append(row)
                if progress:
                    progress(row)
        if critical:
            ridge = prof.header["hardware"]["ridge"]
            for context in contexts:
                result.critical.append(critical_batch(prof.probe(context), context, ridge, batches,
                                                      max_batch=max_batch))
                if prof.row(batches[0], context)["attention"]["recognised"]:
                    result.critical_ideal.append(critical_batch(
                        prof.probe(context, "ideal"), context, ridge, batches, basis="attention minimum",
                        max_batch=max_batch, verify=False))
    except KeyboardInterrupt:
        result.interrupted = True
    result.header = prof.header or {}
    result.profiles = prof.profiles
    result.wall_s = time.perf_counter() - start
    return result


# -- rendering ---------------------------------------------------------------------------------

ROW_FIELDS = ["batch", "context", "flops", "bytes", "intensity", "bound", "predicted_step_s", "tokens_per_s",
              "mfu_bound", "weight_bytes", "kv_bytes_executed", "other_bytes", "weight_share", "kv_share",
              "other_share", "attention_intensity_min", "attention_intensity_executed", "time_bound_s",
              "flops_model", "mfu_bound_model", "kv_bytes_min"]


def flat_row(row: dict) -> dict:
    """A point row with the attention figures lifted to the top level (CSV, tables)."""
    out = {k: row.get(k) for k in ROW_FIELDS}
    out["attention_intensity_min"] = row["attention"]["intensity_min"]
    out["attention_intensity_executed"] = row["attention"]["intensity_executed"]
    return out


def render_sweep(data: dict, fmt: str) -> str:
    """The sweep dict as table, markdown, csv or json."""
    import csv
    import io

    from tabulate import tabulate

    from rooflinekit.render import to_json
    from rooflinekit.units import seconds, si

    if fmt == "json":
        return to_json(data)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=ROW_FIELDS, lineterminator="\n")
        writer.writeheader()
        for row in data["points"]:
            writer.writerow(flat_row(row))
        return buf.getvalue()

    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}%"

    def num(v, digits=3):
        return "-" if v is None else f"{v:.{digits}g}"

    headers = ["B", "S", "FLOPs", "bytes", "FLOP/B", "bound", "step", "tokens/s", "MFU bound",
               "weights", "KV", "other", "attn I min", "attn I exec"]
    rows = [[r["batch"], r["context"], si(r["flops"]), si(r["bytes"], "B"), num(r["intensity"]), r["bound"],
             seconds(r["predicted_step_s"]), si(r["tokens_per_s"]), pct(r["mfu_bound"]),
             pct(r["weight_share"]), pct(r["kv_share"]), pct(r["other_share"]),
             num(r["attention"]["intensity_min"]), num(r["attention"]["intensity_executed"])]
            for r in data["points"]]
    md = fmt == "markdown"
    hw, w, model = data["hardware"], data["workload"], data["model"]
    head = [
        f"model: {model.get('name', '?')} ({model.get('path', '')}), options {w.get('options') or '{}'}",
        f"sweep: {w['phase']}, batches {','.join(map(str, w['batches']))}, contexts "
        f"{','.join(map(str, w['contexts']))}, {w['dtype']}, device {w['device']}",
    ]
    if hw:
        head.append(f"hardware: {hw['name']}: {si(hw['peak_flops'], 'FLOP/s')} dense {hw['dtype']}, "
                    f"{si(hw['bandwidth'], 'B/s')}, ridge {hw['ridge']:.1f} FLOP/B")
    out = io.StringIO()
    if md:
        out.write("# rooflinekit sweep\n\n" + "\n".join(f"- {h}" for h in head) + "\n\n")
    else:
        out.write("\n".join(head) + "\n\n")
    out.write(("## Points\n\n" if md else "")
              + tabulate(rows, headers=headers, tablefmt="github" if md else "simple", disable_numparse=True)
              + "\n\n")
    if data["critical_batch"]:
        out.write("## Critical batch\n\n" if md else "Critical batch (whole step reaches the ridge):\n")
        ideal = {c["context"]: c for c in data.get("critical_batch_attention_minimum", [])}
        for c in data["critical_batch"]:
            line = f"S={c['context']}: {c['summary']}"
            if c["context"] in ideal:
                line += f"; with attention at its architecture minimum: {ideal[c['context']]['summary']}"
            out.write(("- " if md else "  ") + line + "\n")
            if c.get("note"):
                out.write(("  " if md else "    ") + c["note"] + "\n")
        out.write("\n")
    for line in data.get("notes", []):
        out.write(f"note: {line}\n" if not md else f"- note: {line}\n")
    for line in data.get("warnings", []):
        out.write(f"warning: {line}\n" if not md else f"- warning: {line}\n")
    return out.getvalue()


# -- command -----------------------------------------------------------------------------------


def int_list(ctx, param, value) -> list[int]:
    """Click callback: '1,4,16' -> [1, 4, 16] (order kept, duplicates dropped)."""
    import click

    items: list[int] = []
    for part in str(value).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise click.BadParameter(f"'{part}' is not an integer (give e.g. 1,4,16)") from None
        if n < 1:
            raise click.BadParameter(f"{n}: every value must be at least 1")
        if n not in items:
            items.append(n)
    if not items:
        raise click.BadParameter("give at least one value")
    return items


SWEEP_HELP = """Profile MODEL at every BATCH x CONTEXT; find the critical batch per context.

\b
One row per point: the whole step's FLOPs, bytes, intensity, bound, predicted step time,
tokens/s, bound MFU, the byte split (weights / KV cache / other) and attention's intensity
(architecture minimum and as executed). The model is built once.

\b
Critical batch: the smallest batch at which the whole step reaches the ridge point, from an
affine fit of per-step FLOPs and bytes in batch (checked on a third batch; a fit off by more
than 1% falls back to a search with real profiles), or "never" with the intensity it saturates at.
Ctrl-C keeps the points already done (written with a note), and exits non-zero.
"""


def sweep_command():
    """The `sweep` click command (built on call so that importing this module stays light)."""
    import sys

    import click

    from rooflinekit.cli import (
        Command,
        _emit,
        _workload,
        debug_option,
        parallel_options,
        workload_options,
    )
    from rooflinekit.render import FORMATS, check_writable

    def decorate(f):
        f = workload_options(f)
        f.__click_params__ = [p for p in f.__click_params__ if p.name not in ("batch", "context")]
        f = click.option("--batch", "-b", "batches", default="1,4,16,48", show_default=True, callback=int_list,
                         help="Batches, comma-separated.")(f)
        f = click.option("--context", "-s", "contexts", default="4096,32768", show_default=True, callback=int_list,
                         help="Contexts, comma-separated.")(f)
        return f

    @click.command("sweep", cls=Command, help=SWEEP_HELP)
    @click.argument("model", metavar="MODEL")
    @decorate
    @click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
    @click.option("--output", "-o", default=None, help="Write the sweep to this file (atomically).")
    @click.option("--plot", "plot_path", default=None, metavar="FILE.png|.svg", help="Also draw the roofline chart.")
    @click.option("--no-critical", is_flag=True, help="Skip the critical-batch search.")
    @click.option("--max-batch", default=MAX_BATCH, show_default=True, type=click.IntRange(1),
                  help="Largest batch the critical-batch search profiles.")
    @parallel_options
    @debug_option
    def sweep(model, phase, batches, contexts, dtype, device, hardware, options, fmt, output, plot_path,
              no_critical, max_batch, debug, tp=1, ep=1):
        from rooflinekit.pipeline import load_source

        base, opts = _workload(phase, batches[0], contexts[0], dtype, device, options, tp, ep)
        for c in contexts:
            _workload(phase, batches[0], c, dtype, device, ())
        if output:
            check_writable(output)
        if plot_path:
            from rooflinekit.plot import check_target

            check_target(plot_path)
        source = load_source(model, opts)
        total = len(batches) * len(contexts)
        tty = sys.stderr.isatty()
        bar = click.progressbar(length=total, label="sweep", file=sys.stderr) if tty else None
        try:
            if bar:
                bar.__enter__()
            result = run_sweep(source, base, batches, contexts, hardware or "auto",
                               critical=not no_critical, max_batch=max_batch,
                               progress=(lambda _row: bar.update(1)) if bar else None)
        finally:
            if bar:
                bar.__exit__(None, None, None)
        data = result.to_dict()
        if result.interrupted and not data["points"]:
            raise KeyboardInterrupt
        for w in data["warnings"]:
            click.echo(f"rooflinekit: warning: {w}", err=True)
        _emit(render_sweep(data, fmt), output)
        if plot_path:
            from rooflinekit.plot import write_plot

            n = write_plot(data, plot_path)
            click.echo(f"wrote {plot_path} ({n} points)", err=True)
        if result.interrupted:
            click.echo(f"rooflinekit: error: interrupted after {len(data['points'])} of {total} points "
                       "(the points done were written)", err=True)
            sys.exit(130)

    return sweep


def load_report(path: str, kinds: tuple[str, ...] = ("profile", "sweep")) -> dict:
    """Read a rooflinekit JSON report (profile or sweep) from `path`; UserError if it is not one."""
    import json
    from pathlib import Path

    file = Path(path)
    if not file.exists():
        raise UserError(f"report not found: {path}")
    if file.is_dir():
        raise UserError(f"{path} is a folder: give a report .json file")
    try:
        data = json.loads(file.read_text())
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a rooflinekit report: not a JSON text file") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not a rooflinekit report: invalid JSON at line {exc.lineno}") from None
    kind = report_kind(data)
    if kind is None:
        raise UserError(f"{path} is not a rooflinekit report (write one with `rooflinekit profile -f json`)")
    if kind not in kinds:
        raise UserError(f"{path} is a {kind} report; this command takes a {' or '.join(kinds)} report")
    return data


def report_kind(data: object) -> str | None:
    """'profile', 'sweep', or None when `data` is not a rooflinekit report."""
    if not isinstance(data, dict) or "schema_version" not in data:
        return None
    if data.get("kind") == "sweep" and isinstance(data.get("points"), list) and isinstance(data.get("hardware"), dict):
        return "sweep"
    needed = ("totals", "attention_totals", "attention", "hardware", "workload", "modules")
    if all(isinstance(data.get(k), (dict, list)) for k in needed):
        return "profile"
    return None
