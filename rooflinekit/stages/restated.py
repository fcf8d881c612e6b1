"""Which model options a plugin states on the captured counts instead of the model's code
(`rooflinekit_option_transform`): asked before the model is built, so that those options are
withheld from the loader (rooflinekit.transforms.restate runs the transforms on the capture)."""

from __future__ import annotations

from rooflinekit.core.plugins import PluginHost


def option_answers(options: dict, host: PluginHost) -> dict[str, tuple[object, str]]:
    """{option name: (the transform a plugin answered, that plugin)} for the options some plugin restates."""
    out = {}
    for name, value in options.items():
        answer, plugin = host.first(host.hook.rooflinekit_option_transform, name=name, value=value)
        if answer is not None:
            out[name] = (answer, plugin)
    return out


def restated(options: dict, host: PluginHost) -> set[str]:
    """The names of the options a plugin restates."""
    return set(option_answers(options, host))
