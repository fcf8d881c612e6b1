"""Start-up: commands that need no model never import torch (structure, not timing: the times are
benchmarks/startup.py's, in docs/performance.md).

torch is imported only where a model is built or run: by `profile`, `sweep` and `calibrate`, and
by a plugin's hook when it first looks at a module. Loading the plugins, the hardware database,
saved reports and the commands `hardware`, `plot`, `compare` and `plugins` imports none of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import EXAMPLES, ROOT

#: Heavy modules the no-model commands never need (matplotlib: only `plot` draws, and lazily).
HEAVY = ("torch", "transformers", "matplotlib")


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ROOFLINEKIT_DISABLE_PLUGINS", "ROOFLINEKIT_TRACE_HOOKS")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_no_model_commands_plugins_and_hardware_db_import_no_torch():
    result = _python(f"""
        import sys

        import rooflinekit
        import rooflinekit.cli.compare
        import rooflinekit.cli.hardware
        import rooflinekit.cli.main
        import rooflinekit.cli.options
        import rooflinekit.cli.plot
        import rooflinekit.cli.plugins
        import rooflinekit.plugin
        from rooflinekit.core.plugins import builtin_entry_points, get_host
        from rooflinekit.outputs.report_io import load_report
        from rooflinekit.stages.hardware import hardware_db

        host = get_host()
        assert not host.warnings, host.warnings
        loaded = {{info.name for info in host.infos}}
        assert set(builtin_entry_points()) <= loaded, set(builtin_entry_points()) - loaded
        assert hardware_db().get("H800").memory_bandwidth > 0
        load_report({str(ROOT / "tests" / "data" / "report-1.0-gqa.json")!r})
        heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
        assert heavy == [], heavy
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_the_commands_themselves_import_no_torch(tmp_path):
    """Each no-model command run end to end (click dispatch included): torch never imported."""
    report = ROOT / "tests" / "data" / "report-1.0-gqa.json"
    other = ROOT / "tests" / "data" / "report-1.0-mla.json"
    commands = [["--help"], ["hardware", "list"], ["hardware", "show", "H800"], ["plugins"],
                ["compare", str(report), str(other)], ["plot", str(report), "-o", str(tmp_path / "x.png")]]
    result = _python(f"""
        import sys

        from rooflinekit.cli.main import cli

        for args in {commands!r}:
            try:
                cli(args, prog_name="rooflinekit", standalone_mode=False)
            except SystemExit as exc:
                assert exc.code in (0, None), (args, exc.code)
            assert "torch" not in sys.modules, args
        print("ok", file=sys.stderr)
    """)
    assert result.returncode == 0 and result.stderr.strip().endswith("ok"), result.stdout + result.stderr


def test_a_hook_imports_torch_when_it_runs():
    """The plugins still work: loading them imports no torch; their hooks do, when they run."""
    result = _python(f"""
        import sys

        from rooflinekit.core.plugins import get_host

        host = get_host()
        assert "torch" not in sys.modules
        source, plugin = host.first(host.hook.rooflinekit_workload_loader, path={str(EXAMPLES / "llama_gqa.py")!r},
                                         options={{}})
        assert plugin == "modelfile" and "torch" in sys.modules, plugin
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_command_line_profile_of_a_model_file_never_loads_dynamo(tmp_path):
    """`rooflinekit profile` of a model file runs torch's meta kernels without importing
    torch._dynamo (over a second of start-up), and counts exactly what the library call does in a
    process where dynamo is loaded."""
    out = tmp_path / "cli.json"
    model = str(EXAMPLES / "llama_gqa.py")
    result = _python(f"""
        import sys

        from rooflinekit.cli.main import cli

        try:
            cli(["profile", {model!r}, "-O", "layers=2", "-f", "json", "-o", {str(out)!r}])
        except SystemExit as exc:
            assert not exc.code, exc.code
        print("torch._dynamo" in sys.modules)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"

    import json

    import torch._dynamo  # noqa: F401  (the library path, with dynamo loaded)

    from rooflinekit.api import profile_file

    library = profile_file(model, options={"layers": 2}).to_dict()
    cli_report = json.loads(out.read_text())
    for key in ("flops", "bytes", "weight_bytes", "kv_bytes_executed"):
        assert cli_report["totals"][key] == library["totals"][key]
    assert [(o["name"], o["flops"], o["bytes_read"], o["bytes_written"]) for o in cli_report["ops"]] == \
        [(o["name"], o["flops"], o["bytes_read"], o["bytes_written"]) for o in library["ops"]]
