"""Built-in plugin: `--efficiency aic`, the expected time's achievable fractions derived from NVIDIA
AIConfigurator's measured kernel database (the `aic` extra: `pip install rooflinekit[aic]`).

The hook is here; `systems` maps a hardware entry to an AIConfigurator system, `measure` asks its
database for kernel latencies at stated shapes, `table` turns them into an efficiency file in the
layout of the committed table, written once per AIConfigurator version, system and entry.
"""

from __future__ import annotations

from rooflinekit.plugin import UserError, hookimpl

PROVIDES = ("efficiency source: aic (AIConfigurator's measured kernels, the aic extra)",
            "kernel times: aic (each GEMM, attention, MoE layer and all-reduce at its own shape)")
#: The source name `--efficiency` takes.
SOURCE = "aic"
INSTALL = "pip install 'rooflinekit[aic]' (Python 3.11 to 3.13)"


def _need_aic(what: str) -> None:
    """One line saying how to install AIConfigurator where it is not installed."""
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        raise UserError(f"{what}, which is not installed: {INSTALL}") from None


@hookimpl
def rooflinekit_efficiency_source(source, hardware):
    """`aic`: the path of the efficiency file derived for `hardware` (written on first use)."""
    if source != SOURCE:
        return None
    _need_aic("--efficiency aic reads NVIDIA AIConfigurator's measured kernel database")
    from rooflinekit_plugins.aic.table import source_file

    return str(source_file(hardware))


@hookimpl
def rooflinekit_kernel_times(source, settings):
    """`aic`: each kernel's measured time at its own shape from the system's database (`kernels`)."""
    if source != SOURCE:
        return None
    _need_aic("this efficiency file's kernel times are AIConfigurator's measured kernels")
    from rooflinekit_plugins.aic.kernels import kernels
    from rooflinekit_plugins.aic.measure import systems_with_data

    system = settings.get("system")
    have = systems_with_data()
    if not isinstance(system, str) or system not in have:
        raise UserError(f"the aic kernel times need system = NAME, one of {', '.join(have)} (not {system!r})")
    return kernels(system, {k: v for k, v in settings.items() if k != "system"})
