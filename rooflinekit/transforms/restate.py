"""Model options stated on the captured counts (`rooflinekit_option_transform`): e.g. `-O mode=absorbed`
on MLA code that runs only the naive form, the MLA plugin's absorbed restatement of the capture.

`rooflinekit.stages.restated` names the options a plugin restates (withheld from the loader, and
from build_model/make_inputs where they do not take them); `OptionRestatements`, last of the
built-in transforms, runs each restating transform on every request whose workload carries its option.
"""

from __future__ import annotations

from dataclasses import dataclass

from rooflinekit.core.plugins import PluginHost
from rooflinekit.stages.restated import option_answers
from rooflinekit.transforms.adapter import as_transform
from rooflinekit.transforms.base import Counted, Transform, TransformContext


def option_transforms(options: dict, host: PluginHost) -> dict[str, Transform]:
    """{option name: the transform a plugin restates it with} for the options some plugin restates."""
    return {name: as_transform(answer, plugin, f"transform of -O {name}={options[name]}")
            for name, (answer, plugin) in option_answers(options, host).items()}


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
