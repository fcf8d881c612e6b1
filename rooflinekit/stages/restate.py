"""Model options stated on the captured counts (`rooflinekit_option_transform`): e.g. `-O mode=absorbed`
on MLA code that runs only the naive form, the MLA plugin's absorbed restatement of the capture.

`restated(options, host)` names the options a plugin restates (withheld from the loader, and from
build_model/make_inputs where they do not take them); `OptionRestatements`, last of the built-in
transforms, runs each restating transform on every request whose workload carries its option.
"""

from __future__ import annotations

from dataclasses import dataclass

from rooflinekit.core.plugins import PluginHost
from rooflinekit.stages.transform import Counted, Transform, TransformContext, guarded


def option_transforms(options: dict, host: PluginHost) -> dict[str, Transform]:
    """{option name: the transform a plugin restates it with} for the options some plugin restates."""
    out = {}
    for name, value in options.items():
        answer, plugin = host.first(host.hook.rooflinekit_option_transform, name=name, value=value)
        if answer is not None:
            out[name] = guarded(answer, plugin, f"transform of -O {name}={value}")
    return out


def restated(options: dict, host: PluginHost) -> set[str]:
    """The names of the options a plugin restates."""
    return set(option_transforms(options, host))


@dataclass(frozen=True)
class OptionRestatements:
    """Every restated option of the workload, its plugin's transform run in turn (see the module)."""

    name: str = "option restatements"

    def applies(self, ctx: TransformContext) -> bool:
        return bool(ctx.workload.options) and bool(option_transforms(dict(ctx.workload.options), ctx.host))

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        for transform in option_transforms(dict(ctx.workload.options), ctx.host).values():
            if transform.applies(ctx):
                counted = transform.apply(counted, ctx)
        return counted
