"""A sharded DP run through the whole pipeline (slow): `runs.dp.distributed: {nproc_per_node: 2, strategy: fsdp}`
in the reproduced tiny project, `dvc repro report` stopped by SIGTERM once the run's first sharded checkpoint is on
disk, then `dvc repro report` again: the fine-tune resumes from that checkpoint and the rest of the pipeline (attack,
replica, audit, report) runs on the sharded run unchanged."""
import json
import os
import re
import signal
import subprocess
import time

import pytest
import yaml
from testkit.project import run

STEPS = 12  # the first checkpoint (finetune.checkpoint_every: 3) lands well before the last step


@pytest.mark.slow
def test_a_sharded_dp_run_is_stopped_resumes_and_reaches_the_report(reproduced_project, tmp_path):
    project = reproduced_project
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["runs"]["dp"].update(distributed={"nproc_per_node": 2, "strategy": "fsdp"}, steps=STEPS)
    params["finetune"]["checkpoint_every"] = 3
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    checkpoint = project / params["finetune"]["checkpoint_dir"] / "dp.dcp" / "meta.pt"
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONUNBUFFERED": "1"}
    first_log = tmp_path / "first.log"
    with first_log.open("w") as log:  # its own process group: the signal reaches dvc, the launcher and both ranks
        proc = subprocess.Popen(["dvc", "repro", "report"], cwd=project, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while not checkpoint.is_file():
                assert proc.poll() is None and time.monotonic() < deadline, first_log.read_text()[-3000:]
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode != 0 and checkpoint.is_file(), first_log.read_text()[-3000:]
    assert not (project / "data/models/dp/run.json").is_file() or \
        json.loads((project / "data/models/dp/run.json").read_text())["world_size"] == 1  # nothing half-written

    second = run(["dvc", "repro", "report"], project, env=env)
    out = second.stdout + second.stderr
    resumed = re.search(r"run dp: resumed from the checkpoint at step (\d+)", out)
    assert resumed and 0 < int(resumed.group(1)) < STEPS, out[-3000:]
    assert not checkpoint.parent.exists()  # a completed run clears its checkpoint
    record = json.loads((project / "data/models/dp/run.json").read_text())
    pv = record["privacy"]
    assert record["world_size"] == 2 and pv["sharding"] == "fsdp" and pv["grad_sample_mode"] == "ghost_fsdp"
    assert pv["accounted_steps"] == STEPS and pv["epsilon_spent"] <= pv["target_epsilon"] * 1.01
    report = (project / "reports/report.md").read_text()
    assert "ghost_fsdp (auto: sharded by fsdp); fsdp over 2 processes" in report
    status = run(["dvc", "status"], project).stdout
    assert "finetune@dp" not in status and "report" not in status, status
