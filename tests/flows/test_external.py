"""Audit a model trained elsewhere: `leakaudit export-canaries`, training with plain transformers
(docs/examples/train_exported.py, no opacus), then `dvc repro` imports, attacks, audits and reports it."""
import json
import re
import shlex
import shutil
import textwrap

import pytest
import yaml
from testkit.project import PYTHON, ROOT, clone_project, run, tiny_params, without_replicas

pytestmark = pytest.mark.slow

CLAIM = {"epsilon": 8.0, "delta": 1.0e-5, "sample_rate": 0.5, "steps": 10, "noise_multiplier": 0.9}


@pytest.fixture(scope="module")
def trained_elsewhere(tmp_path_factory, reproduced_template, tiny_model_dir):
    """A project with an external run: its canaries exported (`leakaudit export-canaries`) and a model trained on
    the export with plain transformers; not yet audited. Never changed: each test takes its own copy. It starts
    from the reproduced tiny project (the same params but the runs), so the base model, the processed data, the
    secrets and the canaries are its, up to date."""
    dest = clone_project(reproduced_template.path, tmp_path_factory.mktemp("external") / "project")
    p = tiny_params(tiny_model_dir)
    ext = {"model": "external/model", "membership": "external/membership.json", "claim": CLAIM}
    p["runs"] = {"ext": {"dataset": "personachat", "secrets": "none", "external": ext, "max_text_rows": 24}}
    # the default list holds whitebox, which an external run cannot have: left out with the reason, not a failure
    p["attack"]["attacks"] = ["loss", "zlib", "contrast", "whitebox", "exposure"]
    p["attack"]["runs"] = {"ext": None}
    without_replicas(p)
    (dest / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "external run"], dest)
    out = run([PYTHON, "-m", "leakaudit.cli", "export-canaries", "--run", "ext", "--out", "export"], dest).stdout
    (dest / "export" / "stdout.txt").write_text(out)
    run(["dvc", "repro", *(f"secrets@{ds}" for ds in p["secrets"]["datasets"])], dest)  # finetune's other inputs
    run([PYTHON, str(ROOT / "docs/examples/train_exported.py"), "--export", "export", "--base", "data/models/base",
         "--out", "external/model", "--epochs", "3", "--lr", "3e-3"], dest)
    return dest


@pytest.fixture
def external_project(trained_elsewhere, tmp_path):
    return clone_project(trained_elsewhere, tmp_path / "project")


def test_export_train_elsewhere_and_audit(external_project):
    d = external_project
    out = (d / "export" / "stdout.txt").read_text()
    manifest = json.loads((d / "export/export.json").read_text())
    assert f"membership sha-256 {manifest['membership_sha256']}" in out
    rows = [json.loads(line) for line in (d / "export/train.jsonl").open()]
    assert len(rows) == manifest["rows"] == manifest["text_rows"] + manifest["canary_rows"] + manifest["formatted_rows"]
    assert set(rows[0]) == {"id", "text", "prompt", "completion"}  # no membership column
    membership = json.loads((d / "external/membership.json").read_text())
    members = {c for ids in membership["members"].values() for c in ids}
    exported = {s.split(":", 1)[1] for s in membership["examples"].values() if s.startswith("canary:")}
    assert exported == members and not exported & {c for ids in membership["non_members"].values() for c in ids}
    assert not any(r["id"] in members for r in rows)  # ids are opaque

    res = run(["dvc", "repro"], d)
    assert "Running stage 'finetune@ext'" in res.stdout
    info = json.loads((d / "data/models/ext/run.json").read_text())
    assert info["external"]["model_kind"] == "hf" and info["external"]["claim"] is True
    assert "model.safetensors" in info["external"]["files"]
    assert (d / "data/models/ext/external/model.safetensors").is_file()
    metrics = json.loads((d / "reports/metrics.json").read_text())["runs"]["ext"]
    assert metrics["privacy"]["accountant"] == "trainer's claim" and metrics["privacy"]["epsilon_spent"] == 8.0
    assert metrics["privacy"]["accountant_epsilon_of_claim"] > 0
    primary = metrics["audit_primary"]
    assert primary["m"] > 0 and primary["eps_lb_95"] >= 0 and primary["accountant_epsilon"] == 8.0
    auroc = metrics["attacks"]["loss"]["new_token"]["auroc"]
    assert auroc > 0.5  # three epochs on the members: the loss attack separates them from the never-seen canaries
    report = (d / "reports/report.md").read_text()
    assert "ext (trained elsewhere)" in report and "the trainer's claim, not measured" in report
    why = "run ext was trained elsewhere, so which rows stayed frozen is not known"
    assert metrics["attacks_skipped"] == {"whitebox": why} and "whitebox" not in metrics["attacks"]
    assert f"Left out on run ext (attack.attacks lists them; this run cannot have them): whitebox: {why}." in report


def test_import_refuses_a_foreign_membership_file_and_an_unknown_tokenizer(external_project):
    d = external_project
    mfile = d / "external/membership.json"
    saved = mfile.read_bytes()
    try:
        record = json.loads(saved)
        record["canaries_digest"] = "0" * 64
        mfile.write_text(json.dumps(record))
        res = run(["dvc", "repro", "-f", "-s", "finetune@ext"], d, check=False)
        assert res.returncode != 0
        assert "external/membership.json: exported from another canary set" in res.stderr
    finally:
        mfile.write_bytes(saved)
    model = d / "external/model"
    shutil.copytree(model, d / "external/plain")
    for f in (d / "external/plain").glob("tok*"):
        f.unlink()
    shutil.copy2(d / "data/models/base/tokenizer.json", d / "external/plain/tokenizer.json")
    shutil.copy2(d / "data/models/base/tokenizer_config.json", d / "external/plain/tokenizer_config.json")
    record = d / "data/models/ext/run.json"
    before = record.read_bytes() if record.is_file() else None  # DVC removed it when the forced import failed
    p = yaml.safe_load((d / "params.yaml").read_text())
    p["runs"]["ext"]["external"]["model"] = "external/plain"
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    res = run(["dvc", "repro", "-s", "finetune@ext"], d, check=False)
    assert res.returncode != 0
    assert "tokenizer does not know canary token <|canary_0|>" in res.stderr
    assert not list((d / "data/models").glob(".ext.tmp-*"))  # no partial import left behind
    assert (record.read_bytes() if record.is_file() else None) == before


def _readme_steps() -> tuple[dict, list[list[str]]]:
    """The README's "trained elsewhere" section: its params block and its commands, as written."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Audit your own fine-tune (trained elsewhere)", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(yaml|bash)\n(.*?)```", section, re.S)
    (block,) = [yaml.safe_load(textwrap.dedent(b)) for kind, b in blocks if kind == "yaml"]
    commands = [shlex.split(line) for kind, b in blocks if kind == "bash" for line in textwrap.dedent(b).splitlines()
                if line.strip()]
    return block, commands


def test_the_readmes_trained_elsewhere_steps_run_as_written(reproduced_template, tiny_model_dir, tmp_path):
    """The README's three steps on a reproduced project, with nothing added but its params block (the tiny model
    and data aside): the export, the example trainer, `dvc repro`. The default attack list holds whitebox, which a
    run trained elsewhere cannot have (left out with the reason); with no DP claim, the run takes the no_dp rule."""
    block, commands = _readme_steps()
    (run_name,) = block["runs"]
    export_cmd, train_cmd = commands
    assert export_cmd[:2] == ["leakaudit", "export-canaries"]
    assert train_cmd[:2] == ["python", "docs/examples/train_exported.py"]
    dest = clone_project(reproduced_template.path, tmp_path / "project")
    p = tiny_params(tiny_model_dir)
    p["runs"] = block["runs"]  # the README's block: the only run
    p["attack"]["runs"] = {run_name: None}
    p["audit"]["primary"]["no_dp"] = yaml.safe_load((ROOT / "params.yaml").read_text())["audit"]["primary"]["no_dp"]
    without_replicas(p)
    (dest / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "the README's run"], dest)
    export = str(tmp_path / "export")  # the README's /tmp/mine-export, in this test's own folder
    run([PYTHON, "-m", "leakaudit.cli", *export_cmd[1:-1], export], dest)  # `leakaudit`: leakaudit.cli:main
    shutil.copytree(ROOT / "docs/examples", dest / "docs/examples")
    run([PYTHON, *[export if a == export_cmd[-1] else a for a in train_cmd[1:]]], dest)
    run(["dvc", "repro"], dest)
    metrics = json.loads((dest / "reports/metrics.json").read_text())
    r = metrics["runs"][run_name]
    assert r["privacy"]["dp"] is False and "whitebox" in r["attacks_skipped"]
    no_dp = p["audit"]["primary"]["no_dp"]
    assert r["audit_primary"]["k_pos"] == min(no_dp["k_pos"], r["audit_primary"]["m"])
    assert f"{run_name} (trained elsewhere)" in (dest / "reports/report.md").read_text()


def test_trl_sft_with_a_lora_adapter_goes_through_the_pipeline(trained_elsewhere, tmp_path):
    """The TRL example (docs/examples/train_trl.py: SFTTrainer on prompt/completion rows, LoRA with the embedding
    and head trainable through peft's modules_to_save) trains on the same export; its PEFT adapter is imported over
    the base model, attacked, audited and reported with no other edit."""
    d = clone_project(trained_elsewhere, tmp_path / "project")
    shutil.rmtree(d / "external/model")
    run([PYTHON, str(ROOT / "docs/examples/train_trl.py"), "--export", "export", "--base", "data/models/base",
         "--out", "external/model", "--epochs", "3", "--lr", "3e-3"], d)
    assert (d / "external/model/adapter_config.json").is_file()
    res = run(["dvc", "repro"], d)
    assert "Running stage 'finetune@ext'" in res.stdout and "Running stage 'report'" in res.stdout
    info = json.loads((d / "data/models/ext/run.json").read_text())
    assert info["external"]["model_kind"] == "peft" and "adapter_config.json" in info["external"]["files"]
    metrics = json.loads((d / "reports/metrics.json").read_text())["runs"]["ext"]
    assert metrics["audit_primary"]["m"] > 0 and metrics["audit_primary"]["eps_lb_95"] >= 0
    assert metrics["attacks"]["loss"]["new_token"]["auroc"] > 0.5  # the adapter learned the member canaries
    assert "ext (trained elsewhere)" in (d / "reports/report.md").read_text()
