"""tests/warm_python.py against a fresh `python`: the same programs, the same streams, directory,
environment and arguments, the same exit status and output (the warm child is what the process-level
tests rely on: exit codes, a closed or broken stdout, signals, a path set by PYTHONPATH)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests import warm_python

SHOW = textwrap.dedent("""
    import os, sys
    print(sys.argv[1:], os.getcwd(), os.environ.get("RK_WARM"), sys.dont_write_bytecode)
    print(repr(sys.path[0]), sys.stdout.write_through, file=sys.stderr)
    print(sys.stdin.read().upper() if sys.stdin else None)
    sys.exit(int(os.environ.get("RK_EXIT", "0")))
""")


def _default_sigint():  # as from a terminal, whatever this process does with Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _both(args, **kw):
    """(fresh, warm) CompletedProcess of `python *args`, both with text output captured."""
    fresh = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=60,
                           preexec_fn=_default_sigint, **kw)
    warm = warm_python.run(args, capture_output=True, text=True, timeout=60, **kw)
    return fresh, warm


@pytest.mark.parametrize("exit_code", [0, 3])
def test_argv_directory_environment_stdin_and_exit_status(tmp_path, exit_code):
    env = dict(os.environ, RK_WARM="yes", RK_EXIT=str(exit_code), PYTHONDONTWRITEBYTECODE="1")
    fresh, warm = _both(["-c", SHOW, "a", "b c"], cwd=tmp_path, env=env, input="piped")
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert warm.returncode == exit_code and "['a', 'b c']" in warm.stdout and "PIPED" in warm.stdout


def test_a_module_and_a_script_see_pythonpath_and_their_own_path(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "rk_warm_probe.py").write_text(
        "import sys\nprint(__name__, sys.argv[1:], sys.path[0])\nraise SystemExit('stop here')\n")
    script = tmp_path / "script.py"
    script.write_text("import sys, rk_warm_probe\n")
    env = dict(os.environ, PYTHONPATH="lib")  # relative: python makes it absolute from the start directory
    for args in (["-m", "rk_warm_probe", "x"], [script, "y"]):
        fresh, warm = _both(args, cwd=tmp_path, env=env)
        assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert warm.returncode == 1 and warm.stderr == "stop here\n"


def test_an_uncaught_exception_and_signals_end_the_child_as_they_end_python():
    fresh, warm = _both(["-c", "raise ValueError('boom')"])
    assert warm.returncode == fresh.returncode == 1
    assert warm.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1] == "ValueError: boom"
    for sig in (signal.SIGINT, signal.SIGTERM):
        fresh, warm = _both(["-c", f"import os; os.kill(os.getpid(), {int(sig)})"])
        assert warm.returncode == fresh.returncode == -sig  # python re-raises an uncaught Ctrl-C


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_start_up_variables_a_closed_stdout_and_a_broken_one(unbuffered, monkeypatch):
    # each setting of the start-up variables has a server of its own, started with them
    monkeypatch.setenv("PYTHONUNBUFFERED", unbuffered)
    if not unbuffered:
        monkeypatch.setenv("PYTHONHASHSEED", "12345")
        fresh, warm = _both(["-c", "print(hash('rooflinekit'))"])
        assert warm.stdout == fresh.stdout and warm.returncode == 0

    code = "import sys; print(sys.stdout is None, file=sys.stderr)"
    fresh = subprocess.run([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, timeout=60,
                           preexec_fn=lambda: os.close(1))
    warm = warm_python.run(["-c", code], stdout=warm_python.CLOSED, stderr=subprocess.PIPE, text=True)
    assert warm.stderr == fresh.stderr == "True\n" and warm.returncode == fresh.returncode == 0

    def broken(run, **kw):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone
        try:
            return run([*kw.pop("prefix", []), "-c", "print('x')"], stdout=write_end, stderr=subprocess.PIPE,
                       text=True, timeout=60, **kw)
        finally:
            os.close(write_end)

    fresh, warm = broken(subprocess.run, prefix=[sys.executable]), broken(warm_python.run)
    # buffered: the final flush fails (120, "Exception ignored"); unbuffered: print raises (1)
    assert warm.returncode == fresh.returncode == (1 if unbuffered else 120)
    assert warm.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1] == "BrokenPipeError: [Errno 32] Broken pipe"


def test_interpreter_options_are_refused():
    with pytest.raises(ValueError, match="-m MODULE"):
        warm_python.run(["-X", "importtime", "-c", "pass"])
