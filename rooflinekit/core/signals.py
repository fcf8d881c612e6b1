"""SIGTERM handled as Ctrl-C is: the work in progress stops where it is, outputs are not written
over (a sweep keeps its points done beside the -o file), and the exit status says which signal it
was (130 for SIGINT, 143 for SIGTERM: 128 + the signal's number, what a shell reports).
"""

from __future__ import annotations

import signal
import threading

#: Exit statuses of a run stopped by a signal: 128 + its number.
SIGINT_STATUS = 128 + signal.SIGINT
SIGTERM_STATUS = 128 + signal.SIGTERM

_state = {"terminated": False}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process was: every `except KeyboardInterrupt` that keeps partial
    work (a sweep's points) keeps it for SIGTERM too."""


def _on_sigterm(_signum, _frame) -> None:
    _state["terminated"] = True
    raise Terminated("terminated")


class sigterm_as_interrupt:  # a context manager, named as the function it reads as
    """While inside, SIGTERM raises `Terminated`; the handler found is restored on exit. Does
    nothing off the main thread (where Python cannot set signal handlers)."""

    __slots__ = ("_installed", "_saved")

    def __enter__(self):
        _state["terminated"] = False
        self._installed = threading.current_thread() is threading.main_thread()
        if self._installed:
            self._saved = signal.signal(signal.SIGTERM, _on_sigterm)
        return self

    def __exit__(self, *exc) -> None:
        if self._installed:  # a handler set outside Python reads as None: the default then
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._saved is None else self._saved)
        return None


def interrupt_status() -> int:
    """The exit status of a run interrupted: 143 after SIGTERM, else 130 (Ctrl-C)."""
    return SIGTERM_STATUS if _state["terminated"] else SIGINT_STATUS


def interrupt_word() -> str:
    """'terminated' after SIGTERM, else 'interrupted'."""
    return "terminated" if _state["terminated"] else "interrupted"
