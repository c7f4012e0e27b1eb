"""Shared fixtures: a tiny tokenizer and a tiny randomly initialised Llama, built in-process."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")


def _corpus() -> list[str]:
    lines = (ROOT / "data/raw/personachat/valid_self_original_no_cands.txt").read_text().splitlines()[:400]
    tofu = (ROOT / "data/raw/tofu/full.json").read_text().splitlines()[:200]
    return lines + tofu


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(_corpus(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   bos_token="<|endoftext|>")


def make_tiny_lm(vocab_size: int, seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    """A tiny random Llama + tokenizer saved as a local HF model directory."""
    d = tmp_path_factory.mktemp("tiny_lm")
    make_tiny_lm(len(tiny_tokenizer)).save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory, tiny_model_dir) -> Path:
    """tiny_model_dir converted by the real base_model code path (data/models/base equivalent)."""
    from stages.config import ModelParams
    from stages.models.loading import convert

    out = tmp_path_factory.mktemp("base")
    convert(ModelParams(name_or_path=str(tiny_model_dir), out=str(out)), out)
    return out


def copy_project(dest: Path) -> Path:
    """A fresh git + DVC checkout of this project (code, dvc.yaml, params, vendored data)."""
    for item in ["stages", "flows", "dvc.yaml", "params.yaml", ".dvcignore", ".gitignore", "pyproject.toml", "data/raw",
                 "reports/sweeps"]:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (dest / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / item)
    (dest / ".dvc").mkdir()
    shutil.copy2(ROOT / ".dvc/config", dest / ".dvc/config")
    shutil.copy2(ROOT / ".dvc/.gitignore", dest / ".dvc/.gitignore")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "fixture"]):
        subprocess.run(cmd, cwd=dest, check=True)
    return dest


def tiny_params(model_dir: Path) -> dict:
    """params.yaml of the project, shrunk to run end to end in seconds on the tiny model."""
    import yaml

    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["model"]["name_or_path"] = str(model_dir)
    p["canaries"].update(num_canaries=60, prefix_length=4)
    p["canaries"]["checks"] = {"member_share_min": 0.3, "member_share_max": 0.7}
    p["finetune"].update(steps=3, batch_size=8, physical_batch_size=8, max_text_rows=16, eval_rows=8, max_length=32)
    p["runs"] = {"nondp": {}, "dp": {"dp": {"enabled": True, "epsilon": 8.0}},
                 "users": {"dataset": "enron_users", "canaries": False, "objective": "nwp", "max_text_rows": 24,
                           "steps": 3, "batch_size": 8},
                 "tofu": {"dataset": "tofu", "canaries": False, "max_text_rows": 40}}
    p["canaries"]["formatted"]["candidates"] = 6
    p["canaries"]["kinds"] = ["new_token", "random", "unigram", "bigram", "model_based"]
    p["canaries"]["users"].update(lengths=[1, 3], per_length=1)
    p["secrets"]["enron"]["max_per_kind"] = 20
    p["attack"]["batch_size"] = 32
    p["attack"]["runs"] = {"nondp": ["loss", "ref_ratio", "zlib", "min_k", "exposure", "eia"],
                           "users": ["loss", "user_inference", "vmr"], "tofu": ["loss", "air"]}
    p["attack"]["generation"] = {"samples": 2, "max_secrets": 4, "air_max_new_tokens": 4}
    p["attack"]["eia"].update(aux_texts=40, test_texts=10, steps=20, width=32)
    p["audit"].update(k_pos=5, k_neg=5, bootstrap=20)
    return p


def run(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def tiny_project(tmp_path_factory, tiny_model_dir) -> Path:
    """A copy of the project whose params point at the tiny model; not yet reproduced."""
    import yaml

    dest = copy_project(tmp_path_factory.mktemp("project"))
    (dest / "params.yaml").write_text(yaml.safe_dump(tiny_params(tiny_model_dir), sort_keys=False))
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "tiny params"], dest)
    return dest


PYTHON = sys.executable
