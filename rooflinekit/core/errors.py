"""The exception family: each carries one line that says what is wrong and what to do.

The command line prints that line and exits non-zero; the Python API raises the same exception.
"""


class RooflineError(Exception):
    """Bad input or an impossible request: the message is the one line the CLI prints."""


#: The name the stages and plugins raise with (a plugin's deliberate message to the user).
UserError = RooflineError


class WorkloadError(RooflineError):
    """A workload that cannot be run: phase, batch, context, dtype, device or options."""


class ModelError(RooflineError):
    """A model file or config that cannot be loaded, built, or run forward."""


class HardwareError(RooflineError):
    """An unknown hardware entry, or a hardware file that cannot be read."""


class ReportFileError(RooflineError):
    """A saved report that cannot be read: missing, not JSON, or not a rooflinekit report."""


class OutputError(RooflineError):
    """An output file that cannot be written."""
