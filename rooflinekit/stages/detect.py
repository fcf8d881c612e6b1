"""Detect the local NVIDIA GPU through NVML (nvidia-ml-py) and match it to a database entry.

Memory bandwidth implied by NVML's numbers: NVML reports the memory clock in MHz and the bus
width in bits; HBM and GDDR transfer on both clock edges (DDR), so

    bandwidth = 2 * mem_clock_hz * bus_width_bits / 8   (B/s)

e.g. H100 SXM5: 2 * 2619 MHz * 5120 bit / 8 = 3.35 TB/s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rooflinekit.core.errors import UserError
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, HardwareDB, HardwareSpec


@dataclass
class DetectedGPU:
    """What NVML says about one GPU, and the database entry it matches (if any)."""

    index: int
    name: str
    memory_bytes: int | None
    sm_clock_max_mhz: int | None
    mem_clock_max_mhz: int | None
    bus_width_bits: int | None
    driver: str | None
    compute_capability: str | None
    entry: str | None = None

    @property
    def bandwidth(self) -> float | None:
        """2 * memory clock * bus width / 8, in B/s (DDR: two transfers per clock)."""
        return implied_bandwidth(self.mem_clock_max_mhz, self.bus_width_bits)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["bandwidth"] = self.bandwidth
        return out


def implied_bandwidth(mem_clock_mhz: float | None, bus_width_bits: float | None) -> float | None:
    """Peak DRAM bandwidth in B/s from NVML's max memory clock (MHz) and bus width (bits)."""
    if not mem_clock_mhz or not bus_width_bits:
        return None
    return 2.0 * mem_clock_mhz * 1e6 * bus_width_bits / 8.0


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def no_gpu_message(reason: str, default: str) -> str:
    return f"no NVIDIA GPU or driver found (NVML: {reason}); reports use the default hardware {default}"


def _nvml():
    try:
        import pynvml
    except ImportError as exc:  # nvidia-ml-py is a dependency, but be clear if it is missing
        raise UserError(no_gpu_message(f"nvidia-ml-py not importable: {exc}", _default())) from None
    return pynvml


def _default() -> str:

    return DEFAULT_HARDWARE


def _optional(fn, *args):
    try:
        return fn(*args)
    except Exception:  # a query this GPU/driver does not support: leave it unknown
        return None


def detect_gpus(nvml=None) -> list[DetectedGPU]:
    """Every GPU NVML sees; raise UserError with one clear line when there is none (or no driver)."""
    nvml = nvml or _nvml()
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        raise UserError(no_gpu_message(str(exc) or type(exc).__name__, _default())) from None
    try:
        count = nvml.nvmlDeviceGetCount()
        if count < 1:
            raise UserError(no_gpu_message("0 devices", _default()))
        driver = _optional(nvml.nvmlSystemGetDriverVersion)
        gpus = []
        for i in range(count):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = _optional(nvml.nvmlDeviceGetMemoryInfo, h)
            cc = _optional(nvml.nvmlDeviceGetCudaComputeCapability, h)
            gpus.append(
                DetectedGPU(
                    index=i,
                    name=_text(nvml.nvmlDeviceGetName(h)),
                    memory_bytes=int(mem.total) if mem is not None else None,
                    sm_clock_max_mhz=_optional(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
                    mem_clock_max_mhz=_optional(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM),
                    bus_width_bits=_optional(nvml.nvmlDeviceGetMemoryBusWidth, h),
                    driver=_text(driver) if driver is not None else None,
                    compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
                )
            )
        return gpus
    except UserError:
        raise
    except Exception as exc:
        raise UserError(no_gpu_message(str(exc) or type(exc).__name__, _default())) from None
    finally:
        _optional(nvml.nvmlShutdown)


def find_entry(device_name: str, db: HardwareDB) -> HardwareSpec | None:
    """The database entry with a GPU's reported name (NVML's, or torch.cuda.get_device_name's) as
    its name or an alias (HardwareDB.find: case and punctuation ignored), also tried without the
    'NVIDIA ' prefix. No fuzzy matching: a near name can be another form factor with other clocks
    ('H100 NVL' is not 'H100 SXM5')."""
    spec = db.find(device_name)
    if spec is None and device_name.upper().startswith("NVIDIA "):
        spec = db.find(device_name[7:])
    return spec


def match(gpu: DetectedGPU, db: HardwareDB) -> HardwareSpec | None:
    """The database entry for a detected GPU (find_entry on NVML's name)."""
    return find_entry(gpu.name, db)


def detect(db: HardwareDB, nvml=None) -> list[DetectedGPU]:
    gpus = detect_gpus(nvml)
    for gpu in gpus:
        spec = match(gpu, db)
        gpu.entry = spec.name if spec else None
    return gpus


def auto_hardware(db: HardwareDB, default: str, nvml=None) -> tuple[HardwareSpec, str]:
    """The entry for GPU 0 if NVML finds one that the database knows, else `default`; and a note."""
    try:
        gpus = detect(db, nvml)
    except UserError as exc:
        return db.get(default), f"hardware auto: {exc}"
    gpu = gpus[0]
    if gpu.entry is None:
        return db.get(default), (
            f"hardware auto: detected '{gpu.name}' has no database entry; using {default} "
            "(add an entry, or run `rooflinekit calibrate` and pass --hardware)"
        )
    return db.get(gpu.entry), f"hardware auto: detected '{gpu.name}' (GPU 0) -> {gpu.entry}"
