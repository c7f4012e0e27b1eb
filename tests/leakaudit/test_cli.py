"""The `leakaudit` console script: declared in pyproject, lists its subcommands, each with an example."""
import shutil
import subprocess

import pytest
from testkit.project import PYTHON, ROOT

SUBCOMMANDS = ("run", "sweep", "variance", "report", "lineage", "ui", "doctor", "selfcheck", "export-canaries",
               "release")


def test_help_lists_every_subcommand_with_an_example():
    exe = shutil.which("leakaudit")
    cmd = [exe] if exe else [PYTHON, "-m", "leakaudit.cli"]  # the script exists once setup.sh installed the project
    top = subprocess.run([*cmd, "--help"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert all(name in top for name in SUBCOMMANDS)
    for name in SUBCOMMANDS:
        text = subprocess.run([*cmd, name, "--help"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
        assert "example:" in text and f"leakaudit {name}" in text, name
    assert 'leakaudit = "leakaudit.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_bad_lineage_target_is_one_line_and_exit_2(tmp_path):
    res = subprocess.run([PYTHON, "-m", "leakaudit.cli", "--repo", str(tmp_path), "lineage", "no-colon"],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "expected FILE:dotted.path" in res.stderr


@pytest.mark.slow
def test_doctor_checks_this_checkout():
    res = subprocess.run([PYTHON, "-m", "leakaudit.cli", "doctor"], capture_output=True, text=True, check=False,
                         cwd=ROOT)
    lines = res.stdout.splitlines()
    assert any(ln.startswith("[ok] package opacus") for ln in lines)
    assert any("model.name_or_path" in ln for ln in lines) and any("DVC cache" in ln for ln in lines)
    assert res.returncode == (1 if any(ln.startswith("[FAIL]") for ln in lines) else 0)
