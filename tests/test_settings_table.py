"""A deployment setting is declared once (rooflinekit.core.settings.SETTINGS): one entry added to
the table, and nothing else, reaches the command line's --help, the Python API's keywords and their
check, the JSON round trip, the report schema and the words outputs print.

The entry is added in a fresh interpreter before anything is built from the table, as a new entry
in the source would be; the rest of the package is imported unchanged after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from rooflinekit.core.request import Deployment, deployment_settings
from rooflinekit.core.settings import SETTINGS
from tests.conftest import EXAMPLES

ADD_A_SETTING = textwrap.dedent("""
    import json, sys
    from rooflinekit.core import settings
    from rooflinekit.core.settings import Setting, Whole

    def words(value, deployment, dtype_key):
        return f"{value} spare GPUs" if value else None

    settings.SETTINGS = settings.SETTINGS + (
        Setting("spare_gpus", "int", 0, Whole(0, 64), words, help="GPUs held back as hot spares."),)

    from click.testing import CliRunner
    import rooflinekit
    from rooflinekit.cli.main import cli
    from rooflinekit.core.codec import dumps
    from rooflinekit.core.errors import WorkloadError
    from rooflinekit.core.request import Deployment
    from rooflinekit.core.schemas import report_schema

    out = {}
    out["help"] = CliRunner().invoke(cli, ["profile", "--help"], terminal_width=200).output
    bad = CliRunner().invoke(cli, ["profile", sys.argv[1], "-b", "1", "-s", "64", "--spare-gpus", "99"])
    out["cli_error"] = (bad.exit_code, bad.output.strip().splitlines()[-1])
    try:
        rooflinekit.profile_file(sys.argv[1], batch=1, context=64, spare_gpus=-1)
    except WorkloadError as exc:
        out["api_error"] = str(exc)
    report = rooflinekit.profile_file(sys.argv[1], batch=1, context=64, spare_gpus=2)
    out["api_value"] = report.deployment.spare_gpus
    given = Deployment(tp=2, spare_gpus=3)
    out["round_trip"] = Deployment.from_dict(json.loads(dumps(given.to_dict()))) == given
    out["json_key"] = given.to_dict()["spare_gpus"]
    out["schema"] = report_schema()["$defs"]["Deployment"]["properties"].get("spare_gpus")
    out["words"] = given.words("bf16")
    print(json.dumps(out))
""")


def test_one_new_entry_reaches_every_surface():
    run = subprocess.run([sys.executable, "-c", ADD_A_SETTING, str(EXAMPLES / "llama_gqa.py")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert "--spare-gpus" in got["help"] and "GPUs held back as hot spares." in got["help"]
    assert got["cli_error"] == [2, "rooflinekit: error: --spare-gpus must be a whole number from 0 to 64, got 99"]
    assert got["api_error"] == "spare_gpus= must be a whole number from 0 to 64, got -1"
    assert got["api_value"] == 2
    assert got["round_trip"] is True and got["json_key"] == 3
    assert got["schema"] == {"type": "integer"}
    assert got["words"] == "TP 2, 3 spare GPUs"


def test_the_deployment_is_the_table():
    """Field for field, in order, with the declared defaults: the Deployment is built from SETTINGS."""
    assert [s.name for s in deployment_settings()] == [s.name for s in SETTINGS]
    plain = Deployment()
    for setting in SETTINGS:
        assert getattr(plain, setting.name) == setting.default, setting.name
        setting.check(setting.default)  # every default passes its own rule


def test_the_request_surfaces_name_no_setting():
    """The command line's request options, the API, the codec, the request's checks, the words and
    the HTML page do not name `kv_dtype` (a setting no other rule combines with): they read the
    table. The Deployment's own format methods, the transforms, the plan's search, advise's fp8-KV
    lever and the engines' command lines name the formats they read, search, propose or spell."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    surfaces = ["rooflinekit/api.py", "rooflinekit/core/codec.py",
                "rooflinekit/cli/profile.py", "rooflinekit/cli/sweep.py", "rooflinekit/cli/advise.py",
                *[str(p.relative_to(root)) for p in (root / "rooflinekit").rglob("*.py")
                  if p.name in ("workload.py", "request_options.py", "model_source.py", "words.py")
                  or p.name.startswith("html")]]
    named = [path for path in surfaces if "kv_dtype" in (root / path).read_text()]
    assert named == [], named


ADD_A_SEARCHED_SETTING = textwrap.dedent("""
    import json, sys
    from rooflinekit.core import settings
    from rooflinekit.core.settings import Choice, Searched, Setting

    settings.SETTINGS = settings.SETTINGS + (
        Setting("attention_backend", "str | None", None, Choice(("flash", "paged"), optional=True),
                help="The attention kernels.",
                searched=Searched(("flash", "paged"), "{v} attention", "Attention kernels to try.")),)

    from click.testing import CliRunner
    from rooflinekit.analyses.plan import run_plan
    from rooflinekit.analyses.plan_options import PlanOptions
    from rooflinekit.cli.main import cli
    from rooflinekit.core.plan import Targets
    from rooflinekit.core.plugins import get_host
    from rooflinekit.stages.model_source import load_source

    out = {}
    out["help"] = CliRunner().invoke(cli, ["plan", "--help"], terminal_width=200).output
    bad = CliRunner().invoke(cli, ["plan", sys.argv[1], "--attention-backends", "flash,tiled"])
    out["cli_error"] = (bad.exit_code, bad.output.strip().splitlines()[-1])
    out["default"] = list(PlanOptions().attention_backends)
    host = get_host()
    options = PlanOptions(gpus=1, tps=(1,), pps=(1,), max_batch=2, modes=("aggregated",), check=False,
                          weight_dtypes=("bf16",), kv_dtypes=("bf16",), attention_backends=("paged",))
    result = run_plan(load_source(sys.argv[1], {}, host), Targets(64, 8), options, host=host)
    out["priced"] = sorted({c.attention_backend for c in result.configs})
    out["label"] = result.configs[0].label()
    print(json.dumps(out))
""")


def test_a_searched_entry_reaches_the_plan():
    """A setting declared with `searched` gets plan's `--<name>s` option and its check, a PlanOptions
    field of the values to try, and a field and words in every priced configuration."""
    run = subprocess.run([sys.executable, "-c", ADD_A_SEARCHED_SETTING, str(EXAMPLES / "tp_mlp.py")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert "--attention-backends" in got["help"] and "Attention kernels to try." in got["help"]
    assert got["cli_error"] == [2, "rooflinekit: error: --attention-backends 'flash,tiled': choose from flash, "
                                   "paged (comma-separated)"]
    assert got["default"] == ["flash", "paged"]
    assert got["priced"] == ["paged"]
    assert ", bf16 W, bf16 KV, paged attention, B " in got["label"]
