"""Real torch.distributed runs: collectives captured per rank, reports merged on rank 0, failures named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from rooflinekit.analyses.distributed import (
    Board,
    PeerFailure,
    failure_message,
    merge_reports,
    meta_collectives_supported,
    requested,
)
from rooflinekit.core.report import Report
from tests import warm_python
from tests.conftest import EXAMPLES, MODELS, ROOT

TP_MLP = EXAMPLES / "tp_mlp.py"
SMALL = ["-Olayers=2", "-Ohidden=256", "-Ointermediate=1024"]


# -- in one process -------------------------------------------------------------------------------


def test_distributed_mode_follows_world_size_unless_told(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not requested(None) and requested(True)
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert requested(None) and not requested(False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not requested(None)


def _boards(world=2, wait_s=0.5):
    import torch.distributed as dist

    store = dist.HashStore()
    return [Board(store, r, world, wait_s) for r in range(world)]


def test_board_names_the_failed_rank_to_the_others():
    b0, b1 = _boards()
    b1.post("built", "build_model() failed: boom")
    with pytest.raises(PeerFailure) as info:
        b0.checkpoint("built")
    assert [s["ok"] for s in info.value.statuses] == [True, False]
    text = failure_message(info.value.statuses, 2)
    assert text.startswith("rank 1 of 2 failed while loading and building the model: build_model() failed: boom")


def test_board_reports_a_rank_that_never_answers():
    b0, _ = _boards(wait_s=0.2)
    with pytest.raises(PeerFailure) as info:
        b0.checkpoint("captured")
    missing = info.value.statuses[1]
    assert missing.get("missing") and "sent no status" in missing["error"]
    assert failure_message(info.value.statuses, 2).startswith("rank 1 of 2 failed while running the forward")


def test_the_earliest_failure_comes_first():
    statuses = [
        {"rank": 0, "stage": "captured", "ok": False, "error": "collective timed out", "time": 20.0},
        {"rank": 1, "stage": "captured", "ok": False, "error": "ValueError: bad", "time": 10.0},
    ]
    text = failure_message(statuses, 2)
    assert text.startswith("rank 1 of 2 failed while running the forward: ValueError: bad")
    assert "(also rank 0: collective timed out)" in text


def _fake(flops, step, collectives=()):
    op = {"name": "c10d.all_reduce_", "module": "(root)", "kind": "collective", "flops": 0.0, "bytes_read": 0.0,
          "bytes_written": 0.0, "param_bytes": 0.0, "dtype": "bf16", "counted": True, "intensity": None,
          "bound": "communication", "time_bound_s": 0.0}
    ops = [dict(op, index=i, collective={"collective": c, "group_size": 2, "message_bytes": m})
           for i, (c, m) in enumerate(collectives)]
    return Report.from_dict({
        "workload": {"phase": "decode", "batch": 1, "context": 8, "q_len": 1, "tokens": 1, "dtype": "bf16",
                     "device": "cpu"},
        "hardware": {"name": "x", "dtype": "bf16", "peak_flops": 1.0, "bandwidth": 1.0, "ridge": 1.0},
        "totals": {"flops": flops, "flops_model": flops, "bytes": 10.0, "weight_bytes": 5.0, "intensity": 1.0,
                   "attainable_flops": 1.0, "bound": "memory", "time_bound_s": 1.0, "mfu_bound": 1.0,
                   "dtype": "bf16", "kv_bytes_executed": 0.0, "predicted_step_s": step, "ops": 3,
                   "time_compute_s": 1.0, "time_memory_s": 2.0, "time_comm_s": 0.5, "binding": "memory"},
        "comm": {"calls": len(ops), "message_bytes": 0.0, "wire_bytes": 0.0, "collectives": []},
        "ops": ops, "warnings": [], "notes": []})


def test_merge_keeps_the_slowest_rank_and_a_row_per_rank():
    merged = merge_reports([_fake(1.0, 2.0, [("all_reduce", 8)]), _fake(3.0, 5.0, [("all_reduce", 8)])],
                           {"backend": "gloo", "device": "cpu"})
    d = merged.distributed
    assert d["world_size"] == 2 and d["slowest_rank"] == 1
    assert [r["rank"] for r in d["ranks"]] == [0, 1] and [r["flops"] for r in d["ranks"]] == [1.0, 3.0]
    assert merged.totals.flops == 3.0 and not merged.warnings


def test_merge_warns_when_ranks_ran_different_collectives():
    merged = merge_reports([_fake(1.0, 1.0, [("all_reduce", 8)]), _fake(1.0, 1.0, [("all_reduce", 16)])])
    assert any("different collectives" in w for w in merged.warnings)


def test_collectives_are_recorded_with_bytes_and_group_in_a_one_rank_group(invoke, tmp_path):
    out = tmp_path / "r.json"
    result = invoke("profile", MODELS / "explicit_collectives.py", "--distributed", "--device", "cpu", "-b", 4,
                    "-H", "H800", "-f", "json", "-o", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    colls = [o for o in report["ops"] if o["kind"] == "collective"]
    assert [o["name"] for o in colls] == ["c10d.allreduce_", "_c10d_functional.all_reduce", "c10d.allgather_"]
    for o in colls:
        c = o["collective"]
        assert c["group_size"] == 1 and c["message_bytes"] == 4 * 64 * 2 and c["wire_bytes"] == 0
        assert o["flops"] == 0 and o["bytes_read"] == o["bytes_written"] == 0
    assert not any(o["name"].endswith(("wait_tensor", "_wrap_tensor_autograd")) for o in report["ops"])
    assert report["distributed"]["world_size"] == 1 and report["comm"]["calls"] == 3
    import torch.distributed as dist

    from rooflinekit.analyses.distributed import release
    from rooflinekit.core import compat

    # the group rooflinekit made is gone, or (gloo before torch 2.8) kept for the next run
    assert dist.is_initialized() == compat.GLOO_TEARDOWN_NEEDS_IDLE_WORKERS
    release()
    assert not dist.is_initialized()


ONE_RANK_LOOP = """
import sys
from click.testing import CliRunner
from rooflinekit.cli.main import cli
for i in range(int(sys.argv[1])):
    result = CliRunner().invoke(cli, ["profile", sys.argv[2], "--distributed", "--device", "cpu", "-b", "4"])
    assert result.exit_code == 0, result.output
print("done")
"""


@pytest.mark.slow
def test_one_rank_groups_come_and_go_without_hanging():
    # torch 2.5's gloo: destroying a group right after its collectives can deadlock (within a
    # few dozen rounds); runs in one process must neither hang nor leave a broken group behind.
    proc = warm_python.run(["-c", ONE_RANK_LOOP, "60", MODELS / "explicit_collectives.py"],
                           capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stdout[-1000:] + proc.stderr[-3000:]


def test_a_json_report_on_stdout_stays_parseable():
    # native code (gloo's "[Gloo] Rank 0 is connected to 0 peer ranks", torch 2.9) must not mix in
    proc = warm_python.run(["-m", "rooflinekit", "profile", MODELS / "explicit_collectives.py", "--distributed",
                            "--device", "cpu", "-b", "4", "-f", "json"], capture_output=True, text=True, timeout=180,
                           cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["distributed"]["world_size"] == 1


def test_distributed_refuses_tp(invoke):
    result = invoke("profile", TP_MLP, "--distributed", "--tp", 2)
    assert result.exit_code == 2 and "use one or the other" in result.output


# -- torchrun: two gloo processes ------------------------------------------------------------------


def torchrun(*args, timeout=240, env=None):
    """Two gloo ranks under torchrun; past `timeout` the launcher and its workers are all killed
    (they share a session) and the test fails with what they printed."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "rooflinekit", "profile", *[str(a) for a in args]]
    environ = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env=environ, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"torchrun still running after {timeout} s:\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.slow
def test_torchrun_two_ranks_merge_into_one_report(tmp_path, invoke):
    out, single = tmp_path / "dist.json", tmp_path / "single.json"
    proc = torchrun(TP_MLP, "--device", "cpu", "-b", 4, "-H", "H800", *SMALL, "-f", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = invoke("profile", TP_MLP, "--device", "cpu", "-b", 4, "-H", "H800", *SMALL, "-f", "json",
                    "-o", single)
    assert result.exit_code == 0, result.output
    report, one = json.loads(out.read_text()), json.loads(single.read_text())
    ranks = report["distributed"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and report["distributed"]["backend"] == "gloo"
    for r in ranks:
        assert r["flops"] == pytest.approx(one["totals"]["flops"] / 2, rel=0.01)
        assert r["comm_calls"] == 2  # one all-reduce per layer, after the row-parallel down projection
        (c,) = r["collectives"]
        assert c["collective"] == "all_reduce" and c["group_size"] == 2
        assert c["message_bytes"] == 2 * 4 * 256 * 2  # two calls of tokens x hidden x bf16
        assert c["wire_bytes"] == pytest.approx(2 * (2 - 1) / 2 * c["message_bytes"])
    assert report["comm"]["link_bandwidth_per_direction"] == 200e9


@pytest.mark.slow
@pytest.mark.skipif(not meta_collectives_supported(), reason="this torch has no meta kernels for c10d ops")
def test_torchrun_meta_device_functional_collectives_match_the_planned_split(tmp_path, invoke):
    out, plan = tmp_path / "dist.json", tmp_path / "plan.json"
    proc = torchrun(TP_MLP, "-b", 4, "-H", "H800", *SMALL, "-Ocollective=functional", "-f", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = invoke("profile", TP_MLP, "--tp", 2, "-b", 4, "-H", "H800", *SMALL, "-f", "json", "-o", plan)
    assert result.exit_code == 0, result.output
    real, planned = json.loads(out.read_text()), json.loads(plan.read_text())
    assert [o["name"] for o in real["ops"] if o["kind"] == "collective"] == ["_c10d_functional.all_reduce"] * 2
    for key in ("flops", "bytes", "weight_bytes", "time_comm_s"):
        assert real["totals"][key] == pytest.approx(planned["totals"][key], rel=1e-6), key


@pytest.mark.slow
def test_torchrun_dtensor_model_records_local_shards(tmp_path):
    out = tmp_path / "dist.json"
    proc = torchrun(MODELS / "dtensor_mlp.py", "--device", "cpu", "-b", 4, "-H", "H800", "-f", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    mms = [o for o in report["ops"] if o["name"] == "aten.mm"]
    assert [o["shapes"] for o in mms] == ["4x256,256x512", "4x512,512x256"]  # this rank's halves
    assert report["totals"]["weight_bytes"] == 2 * 256 * 512 * 2
    colls = [o["collective"] for o in report["ops"] if o["kind"] == "collective"]
    assert [(c["collective"], c["group_size"], c["message_bytes"]) for c in colls] == [("all_reduce", 2, 4 * 256 * 2)]


def _one_error(proc):
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rooflinekit: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


@pytest.mark.slow
def test_a_rank_failing_to_build_is_named_and_nobody_hangs():
    proc = torchrun(TP_MLP, "--device", "cpu", "-b", 2, *SMALL, "-Ofail_rank=1", timeout=120,
                    env={"ROOFLINEKIT_DIST_TIMEOUT": "30"})
    assert proc.returncode != 0
    line = _one_error(proc)
    assert "rank 1 of 2 failed while loading and building the model" in line
    assert "build_model fails on rank 1" in line


@pytest.mark.slow
def test_a_rank_failing_in_the_forward_is_named_after_the_others_time_out():
    proc = torchrun(TP_MLP, "--device", "cpu", "-b", 2, *SMALL, "-Ofail_rank=1", "-Ofail_in=forward",
                    timeout=120, env={"ROOFLINEKIT_DIST_TIMEOUT": "5"})
    assert proc.returncode != 0
    line = _one_error(proc)
    assert "rank 1 of 2 failed while running the forward" in line and "the forward fails on rank 1" in line
    assert "also rank 0" in line  # rank 0 waited in its all-reduce until the timeout


@pytest.mark.timing  # judges a wall time
def test_board_waits_are_bounded():
    import time

    b0, _ = _boards(wait_s=0.1)
    start = time.perf_counter()
    with pytest.raises(PeerFailure):
        b0.checkpoint("reported")
    assert time.perf_counter() - start < 5  # a missing rank costs the wait, not a hang
