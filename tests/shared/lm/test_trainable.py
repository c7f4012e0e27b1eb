"""A saved run is the same bytes from one process to the next (DVC hashes it: a difference reruns every stage below)."""
import subprocess
import sys

import pytest
from testkit.project import ROOT

pytestmark = pytest.mark.slow  # three fresh interpreters importing torch

SAVE = """
import sys, torch
from pathlib import Path
from stages.shared.lm.trainable import Trainable, build_model, save_model
spec = Trainable(paradigm="lora", lora_r=2, lora_alpha=4, lora_dropout=0.0,
                 lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"),
                 virtual_tokens=0, num_new_tokens=2, new_token_init="mean", secret_rows=(), train_embeddings=False)
torch.manual_seed(0)
model, _ = build_model(sys.argv[1], spec, torch.device("cpu"))
save_model(model, Path(sys.argv[2]))
"""


def test_a_lora_run_saves_the_same_bytes_under_any_string_hashing(tiny_base, tmp_path):
    """peft keeps target_modules in a set and wrote it in the set's order, which follows Python's per-process
    string hashing: the same fine-tune hashed differently on a rerun and reran its attack, audit and report."""
    outs = []
    for hash_seed in ("1", "2", "3"):
        out = tmp_path / hash_seed
        out.mkdir()
        subprocess.run([sys.executable, "-c", SAVE, str(tiny_base), str(out)], cwd=ROOT, check=True,
                       env={"PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                            "PATH": "/usr/bin:/bin"})
        outs.append({f.relative_to(out).as_posix(): f.read_bytes() for f in sorted(out.rglob("*")) if f.is_file()})
    assert "adapter/adapter_config.json" in outs[0]
    assert outs[0] == outs[1] == outs[2]
