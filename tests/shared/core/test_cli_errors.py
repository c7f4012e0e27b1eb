"""Bad input: one-line error naming the culprit, non-zero exit, and no partial output."""
import subprocess
import sys

import pytest
import yaml
from testkit.project import ROOT, tiny_params

from stages.attack import __main__ as attack
from stages.audit import __main__ as audit
from stages.canaries import __main__ as canaries
from stages.finetune import __main__ as finetune
from stages.preprocess import __main__ as preprocess
from stages.report import __main__ as report
from stages.secrets import __main__ as secrets
from stages.shared.core.cli import run_cli


def _params(tmp_path, tiny_model_dir, **edits):
    p = tiny_params(tiny_model_dir)
    p["preprocess"]["out_dir"] = str(tmp_path / "processed")
    p["canaries"]["out_dir"] = str(tmp_path / "canaries")
    p["finetune"]["out_dir"] = str(tmp_path / "models")
    p["attack"]["out_dir"] = str(tmp_path / "scores")
    p["secrets"]["out_dir"] = str(tmp_path / "secrets")
    p["secrets"]["reference_dir"] = str(tmp_path / "reference" / "secrets")
    p["canaries"]["reference_out"] = str(tmp_path / "reference" / "canaries.parquet")
    p["finetune"]["log_dir"] = str(tmp_path / "logs")
    p["audit"]["out"] = str(tmp_path / "reports" / "metrics.json")
    p["audit"]["roc_out"] = str(tmp_path / "reports" / "roc.parquet")
    p["report"]["out_dir"] = str(tmp_path / "reports")
    p["model"]["out"] = str(tmp_path / "base")
    for dotted, value in edits.items():
        node = p
        *path, last = dotted.split(".")
        for k in path:
            node = node[k]
        node[last] = value
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(p))
    return f


def _fails(capsys, main, argv):
    with pytest.raises(SystemExit) as exc:
        run_cli(main, argv)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def _no_leftovers(parent):
    return not parent.exists() or not [p for p in parent.iterdir() if ".tmp-" in p.name]


def test_missing_raw_file(tmp_path, tiny_model_dir, capsys):
    f = _params(tmp_path, tiny_model_dir, **{"preprocess.datasets.tofu.path": str(tmp_path / "nope.json")})
    err = _fails(capsys, preprocess.main, ["--dataset", "tofu", "--params", str(f)])
    assert "nope.json: TOFU file not found" in err and "preprocess.datasets.tofu.path" in err
    assert not (tmp_path / "processed" / "tofu").exists() and _no_leftovers(tmp_path / "processed")


def test_malformed_message_file(tmp_path, tiny_model_dir, capsys):
    import shutil

    maildir = tmp_path / "maildir"
    shutil.copytree(ROOT / "data/raw/enron/mini-enron/badeer-r", maildir / "badeer-r")
    bad = maildir / "badeer-r" / "inbox" / "999."
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"\x00\x01\x02 binary junk, not a message")
    f = _params(tmp_path, tiny_model_dir, **{"preprocess.datasets.enron.path": str(maildir)})
    err = _fails(capsys, preprocess.main, ["--dataset", "enron", "--params", str(f)])
    assert "badeer-r/inbox/999.: not an email message" in err
    assert not (tmp_path / "processed" / "enron").exists() and _no_leftovers(tmp_path / "processed")


@pytest.mark.parametrize("dataset,name,content,needle", [
    ("tofu", "tofu.json", '{"question": "q", "answer": "a"}\n{"question": "q2", "ans', "tofu.json:2: not a JSON line"),
    ("enron", "emails.csv", "", "emails.csv: empty csv"),
    ("personachat", "pc.txt", "1 your persona: x\ngarbage line\n", "pc.txt:2: not ParlAI text format"),
])
def test_corrupted_inputs_fail_without_output(tmp_path, tiny_model_dir, capsys, dataset, name, content, needle):
    f = tmp_path / name
    f.write_text(content)
    params = _params(tmp_path, tiny_model_dir, **{f"preprocess.datasets.{dataset}.path": str(f)})
    err = _fails(capsys, preprocess.main, ["--dataset", dataset, "--params", str(params)])
    assert needle in err
    assert not (tmp_path / "processed" / dataset).exists() and _no_leftovers(tmp_path / "processed")


@pytest.mark.parametrize("key,value,needle", [
    ("finetune.dp.epsilon", -1, "finetune.dp.epsilon: must be > 0 (got -1.0)"),
    ("finetune.dp.epsilon", 0, "finetune.dp.epsilon: must be > 0 (got 0.0)"),
    ("finetune.dp.delta", 1.0, "finetune.dp.delta: must be in (0, 1) (got 1.0)"),
    ("finetune.dp.max_grad_norm", 0, "finetune.dp.max_grad_norm: must be > 0"),
    ("finetune.sample_rate", 1.5, "finetune.sample_rate: must be in (0, 1] (got 1.5)"),
    ("finetune.paradigm", "adapters", "finetune.paradigm: must be one of 'lora', 'full', 'prompt', 'prefix'"),
    ("finetune.dp.accountant", "gdp", "finetune.dp.accountant: must be one of 'prv', 'rdp'"),
])
def test_bad_finetune_params(tmp_path, tiny_model_dir, capsys, key, value, needle):
    f = _params(tmp_path, tiny_model_dir, **{key: value})
    err = _fails(capsys, finetune.main, ["--run", "nondp", "--params", str(f)])
    assert needle in err
    assert not (tmp_path / "models").exists()


def test_unknown_canary_kind(tmp_path, tiny_model_dir, capsys):
    f = _params(tmp_path, tiny_model_dir, **{"canaries.kinds": ["new_token", "bogus"]})
    err = _fails(capsys, canaries.main, ["--params", str(f)])
    assert "canaries.kinds[1]: unknown canary kind 'bogus'" in err and "known:" in err
    assert not (tmp_path / "canaries").exists()


def test_cli_process_exit_code(tmp_path, tiny_model_dir):
    f = _params(tmp_path, tiny_model_dir, **{"canaries.secret_length": 0})
    proc = subprocess.run([sys.executable, "-m", "stages.canaries", "--params", str(f)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {f}: canaries.secret_length: must be in [1, 8] (got 0)"]
    assert not (tmp_path / "canaries").exists()


@pytest.mark.parametrize("stage,argv,missing,producer", [
    (secrets, ["--dataset", "enron"], "processed/enron/train.parquet", "preprocess@enron"),
    (canaries, [], "base/config.json", "base_model"),
    (finetune, ["--run", "nondp"], "canaries/meta.json", "canaries"),
    (attack, ["--run", "nondp"], "models/nondp/run.json", "finetune@nondp"),
    (audit, [], "scores/dp/run.json", "attack@dp"),  # the first run of the (sorted) params
    (report, [], "reports/metrics.json", "audit"),
], ids=["secrets", "canaries", "finetune", "attack", "audit", "report"])
def test_a_stage_before_its_upstream_names_the_stage_to_run(tmp_path, tiny_model_dir, capsys, stage, argv, missing,
                                                            producer):
    f = _params(tmp_path, tiny_model_dir)
    err = _fails(capsys, stage.main, [*argv, "--params", str(f)])
    assert err == f"error: {tmp_path}/{missing}: not found (run the {producer} stage first)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written, no empty folders
