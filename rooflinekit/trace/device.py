"""The hardware entry a trace ran on: `-H` when given, else the database entry whose name or alias
is the GPU name `deviceProperties` records."""

from __future__ import annotations

from rooflinekit.core.errors import HardwareError
from rooflinekit.stages.hardware import HardwareDB, HardwareSpec, hardware_db
from rooflinekit.trace.events import DeviceInfo, Trace

GiB = 1 << 30


def describe(device: DeviceInfo) -> str:
    """'Tesla V100-SXM2-16GB (15.8 GiB, 80 SMs, compute 7.0)': what the trace says of a GPU."""
    facts = []
    if device.total_memory:
        facts.append(f"{device.total_memory / GiB:.1f} GiB")
    if device.sms:
        facts.append(f"{device.sms} SMs/CUs")
    if device.compute:
        facts.append(f"compute {device.compute[0]}.{device.compute[1]}")
    return f"'{device.name}'" + (f" ({', '.join(facts)})" if facts else "")


def _by_memory(db: HardwareDB, device: DeviceInfo) -> str:
    """' (by memory size it may be X)' for entries within 1% of the device's memory, else ''."""
    if not device.total_memory:
        return ""
    near = [e.name for e in db.entries
            if e.memory_bytes and abs(e.memory_bytes - device.total_memory) <= 0.01 * e.memory_bytes]
    return f"; by its memory size it may be {' or '.join(near[:3])}" if near else ""


def traced_device(traces: list[Trace]) -> DeviceInfo | None:
    """The GPU the traces' kernels ran on, as deviceProperties names it (None: not recorded)."""
    for trace in traces:
        used = {e.device for e in trace.gpu}
        for device in trace.devices:
            if device.id in used:
                return device
        if trace.devices:
            return trace.devices[0]
    return None


def match_hardware(traces: list[Trace], hardware: str | None, db: HardwareDB | None = None) -> HardwareSpec:
    """`hardware` if given, else the entry deviceProperties names; a clear line when neither works."""
    db = db or hardware_db()
    if hardware:
        return db.get(hardware)
    device = traced_device(traces)
    if device is None:
        raise HardwareError("the trace records no deviceProperties (no GPU name): pass -H NAME "
                            "(see `rooflinekit hardware list`)")
    spec = db.find(device.name)
    if spec is None:
        raise HardwareError(f"the trace's GPU {describe(device)} is not in the hardware database"
                            f"{_by_memory(db, device)}: pass -H NAME (see `rooflinekit hardware list`)")
    return spec
