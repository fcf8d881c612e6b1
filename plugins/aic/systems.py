"""Which AIConfigurator system prices a hardware entry: its own, a stated stand-in, or none."""

from __future__ import annotations

from dataclasses import dataclass

#: Hardware entry names and aliases (lower case) -> AIConfigurator system with measured kernels.
OWN = {
    "h100 sxm5": "h100_sxm", "h100 sxm": "h100_sxm", "h200 sxm": "h200_sxm", "h200 sxm5": "h200_sxm",
    "b200": "b200_sxm", "b200 sxm": "b200_sxm", "gb200": "gb200", "b300": "b300_sxm", "b300 sxm": "b300_sxm",
    "gb300": "gb300", "a100 sxm 80gb": "a100_sxm", "a100-sxm4-80gb": "a100_sxm", "l40s": "l40s",
}
#: Parts AIConfigurator has no data for, priced with another part's kernels, and why that holds.
STAND_INS = {
    "h800 sxm5": ("h100_sxm", "H800: AIConfigurator has no H800 data; its H100 SXM kernels (same SM90 die, "
                              "clocks, HBM3) at the H800 entry's peaks; the H800's own links "
                              "(NVLink 400 GB/s) for collectives"),
}
STAND_INS["h800 sxm"] = STAND_INS["h800"] = STAND_INS["h800 sxm5"]


@dataclass(frozen=True)
class System:
    """The AIConfigurator system a hardware entry is priced with, and a note where it stands in."""

    name: str
    note: str = ""


def system_for(hw_name: str, aliases: tuple[str, ...] | list[str] = ()) -> System | None:
    """The system for an entry, by its name first, then its aliases; None where there is none."""
    for name in (hw_name, *aliases):
        key = name.strip().lower()
        if key in OWN:
            return System(OWN[key])
        if key in STAND_INS:
            system, note = STAND_INS[key]
            return System(system, note)
    return None
