"""Helpers shared by the tests: the project's params with overrides, tiny random causal LMs (Llama by default;
GPT-2, Qwen2, GPT-NeoX), a copy of the project as a fresh git + DVC checkout (and a copy of such a copy, cache
included), the tiny project's stage names, and running a command in it."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def project_raw() -> dict:
    """The project's params.yaml, parsed."""
    from stages.core.params import read_params

    return read_params(ROOT / "params.yaml")


def params(cls: type, section: str, **overrides: Any):
    """``cls`` built from the project's params.yaml at the dotted ``section``, with ``overrides`` deep-merged
    (nested dicts for nested dataclasses): tests start from the real values, as the stages do."""
    from stages.core.params import build, deep_merge, section_of

    return build(cls, deep_merge(section_of(project_raw(), section), overrides), section)


def make_tiny_lm(vocab_size: int, seed: int = 0, arch: str = "llama"):
    """A tiny random causal LM of architecture ``arch`` (gpt2 | llama | qwen2 | gpt_neox): hidden 32, 2 layers,
    4 heads, 128 positions, bos/eos/pad 0, no dropout (as the others, GPT-2's off: runs compare exactly); embeddings
    tied where the architecture ties them (not gpt_neox)."""
    import torch
    import transformers

    common = dict(vocab_size=vocab_size, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    configs = {
        "llama": lambda: transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, tie_word_embeddings=True, **common),
        "qwen2": lambda: transformers.Qwen2Config(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, tie_word_embeddings=True, **common),
        "gpt2": lambda: transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128,
                                                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                                tie_word_embeddings=True, **common),
        "gpt_neox": lambda: transformers.GPTNeoXConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128, tie_word_embeddings=False, **common),
    }
    if arch not in configs:
        raise ValueError(f"unknown tiny architecture {arch!r} (known: {', '.join(configs)})")
    torch.manual_seed(seed)
    cfg = configs[arch]()
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
           "gpt2": transformers.GPT2LMHeadModel, "gpt_neox": transformers.GPTNeoXForCausalLM}[arch]
    return cls(cfg).eval()


def copy_project(dest: Path) -> Path:
    """A fresh git + DVC checkout of this project (code, dvc.yaml, params, vendored data)."""
    for item in ["stages", "flows", "leakaudit", "dvc.yaml", "params.yaml", "studies.yaml", ".dvcignore", ".gitignore",
                 "pyproject.toml", "data/raw",
                 "reports/sweeps", "reports/variance/points.parquet", "reports/variance/audit_points.parquet",
                 "reports/variance/silent_points.parquet", "reports/variance/silent_plan.json",
                 "reports/audit_study", "reports/selfcheck.json",
                 "reports/selfcheck_mutants.json", "reports/user_level_plan.json", "reports/user_level.json",
                 "reports/user_inference.json",
                 "data/replicas/README.md", "data/references/README.md"]:
        src = ROOT / item
        if not src.exists():
            continue
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


def clone_project(src: Path, dest: Path) -> Path:
    """A copy of a project made by ``copy_project`` (git history, params, DVC cache and workspace outputs), so
    the copy is exactly as reproduced as ``src``: no stage reruns that would not rerun there. DVC's state
    (.dvc/tmp: hash cache keyed by inode, locks) stays behind; the copy rehashes its files once."""
    def skip(folder: str, names: list[str]) -> list[str]:
        return ["tmp"] if Path(folder) == src / ".dvc" else []

    shutil.copytree(src, dest, symlinks=True, ignore=skip)
    return dest


@dataclass(frozen=True)
class Reproduced:
    """A project after one `dvc repro` and that command's stdout."""
    path: Path
    stdout: str


# the stages of the tiny project (tiny_params' runs)
ALL_STAGES = {"base_model", "preprocess@personachat", "preprocess@tofu", "preprocess@enron", "preprocess@enron_users",
              "secrets@enron", "secrets@tofu", "canaries", "audit", "variance", "data_docs", "report"} | {
    f"{stage}@{run}" for stage in ("finetune", "attack") for run in ("nondp", "dp", "users", "tofu")} | {
    f"replica_{stage}@dp_r2" for stage in ("canaries", "finetune", "attack")}


def ran(stdout: str) -> set[str]:
    """The stages a `dvc repro` ran, from its stdout."""
    return set(re.findall(r"Running stage '([^']+)'", stdout))


def without_replicas(p: dict) -> dict:
    """``p`` with no replica and no pooled test (a test that replaces the runs)."""
    p["replicas"]["sets"], p["audit"]["pooled"] = {}, {}
    return p


def tiny_params(model_dir: Path) -> dict:
    """params.yaml of the project, shrunk to run end to end in seconds on the tiny model."""
    import yaml

    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["model"]["name_or_path"] = str(model_dir)
    del p["preprocess"]["datasets"]["tofu_authors"]  # only tofu_users reads it (its layout: tests/datasets)
    p["canaries"].update(num_canaries=60, prefix_length=4)
    p["canaries"]["checks"] = {"member_share_alpha": 1.0e-6}
    p["finetune"].update(steps=3, batch_size=8, physical_batch_size=8, max_text_rows=16, eval_rows=8, max_length=32)
    p["runs"] = {"nondp": {"dataset": "personachat"},
                 "dp": {"dataset": "personachat", "dp": {"enabled": True, "epsilon": 8.0}},
                 "users": {"dataset": "enron_users", "canaries": False, "objective": "nwp", "max_text_rows": 24,
                           "steps": 3, "batch_size": 8},
                 "tofu": {"dataset": "tofu", "canaries": False, "max_text_rows": 40}}
    p["canaries"]["formatted"]["candidates"] = 6
    p["canaries"]["kinds"] = ["new_token", "random", "unigram", "bigram", "model_based"]
    p["canaries"]["users"].update(lengths=[1, 3], per_length=2)
    p["secrets"]["datasets"]["enron"]["max_per_kind"] = 20
    p["attack"]["batch_size"] = 32
    p["attack"]["runs"] = {"nondp": ["loss", "ref_ratio", "zlib", "min_k", "exposure", "eia", "blind"], "dp": None,
                           "users": ["loss", "min_k_pp", "ez_mia", "user_inference", "vmr", "blind"],
                           "tofu": ["loss", "air", "blind"]}
    p["attack"]["generation"].update(samples=2, max_secrets=4, air_max_new_tokens=4)
    p["attack"]["eia"].update(aux_texts=40, test_texts=10, steps=20, width=32)
    p["audit"]["primary"].update(attack="loss", k_pos=5, k_neg=5, no_dp=None, runs={})
    # one replica of dp; it also scores ref_ratio (with reference log-probabilities), so a test may move the primary
    # test to it without touching the replica
    p["replicas"].update(attacks=["loss", "ref_ratio"], reference=True, sets={"dp_r2": {"run": "dp", "seed": 3105}})
    p["audit"]["pooled"] = {"dp": {"k_pos": 5, "k_neg": 5}}
    p["audit"]["exploratory"].update(k_pos=[5, 10], k_neg=[0, 5])
    p["audit"]["ceiling"]["trials"] = 200
    p["audit"]["bootstrap"] = 20
    return p


def run(cmd: list[str], cwd: Path, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), **(env or {})}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


SPLITS = ("train", "valid", "test", "attacker", "heldout")


def users_dataset(tmp_path: Path, n_users: int = 12) -> Path:
    """A synthetic user-level processed dataset (enron_users schema) under tmp_path/enron_users: every user has
    valid, test and attacker rows; held-in users (odd) train rows, held-out users (even) heldout rows, as the
    preprocess writes them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stages.datasets import get_dataset

    d = tmp_path / "enron_users"
    d.mkdir()
    rng = np.random.default_rng(0)
    for split in SPLITS:
        users = range(n_users) if split not in ("train", "heldout") else \
            [u for u in range(n_users) if (u % 2 == 1) == (split == "train")]
        rows = [{"message_id": f"<{split}{u}{i}>", "file": "f", "mailbox": "m", "sender": f"u{u}@x", "recipients": [],
                 "subject": "", "date": "", "body": " ".join(f"word{rng.integers(100)}" for _ in range(30)),
                 "user": f"u{u}@x", "user_set": "held_in" if u % 2 else "held_out"} for u in users for i in range(3)]
        pq.write_table(pa.Table.from_pylist(rows, schema=get_dataset("enron_users").schema), d / f"{split}.parquet")
    return d


# ------------------------------------------------------------------------------------------ the fine-tune's tiny DP
#: new-token rows and the vocabulary ids with rows of their own in ``tiny_canary_lm``'s models
NUM_NEW = 20
SECRET_ROWS = (7, 13, 29, 31, 50, 77)


def finetune_params(**overrides):
    from stages.finetune.params import FinetuneParams

    return params(FinetuneParams, "finetune", **overrides)


def dp_params(**overrides):
    from stages.finetune.params import DPParams

    return params(DPParams, "finetune.dp", **overrides)


def tiny_canary_lm(base: Path, device=None, **overrides):
    """(CanaryLM, tokenizer) of the converted tiny base ``base`` with LoRA r=4 (or ``overrides``), NUM_NEW new-token
    rows and the SECRET_ROWS vocabulary ids' own rows, on ``device`` (default: the CPU)."""
    import torch

    from stages.lm.trainable import build_model

    ft = finetune_params(**{"lora": {"r": 4, "alpha": 8}, **overrides})
    meta = {"num_new_tokens": NUM_NEW, "new_token_init": "mean", "secret_token_ids": list(SECRET_ROWS)}
    return build_model(base, ft.trainable(meta), device or torch.device("cpu"))


def canary_rows(vocab: int, n: int = 40, seed: int = 0) -> list[dict]:
    """``n`` one-token new-token canaries over a vocabulary of ``vocab`` (their secrets: new tokens
    vocab + i % NUM_NEW), every odd one a member."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [{"canary_id": f"c{i}", "kind": "new_token", "prefix_ids": rng.integers(1, 300, 6).tolist(),
             "secret_ids": [vocab + i % NUM_NEW], "member": bool(i % 2)} for i in range(n)]


def one_dp_step(base: Path, mode: str, clip: float, noise: bool, paradigm: str, embeddings: bool, device=None):
    """Parameter change of one DP-SGD step (lr 1) over 8 canaries in chunks of 3 (minus the gradient) through the
    engine's ``dp_step`` on ``device`` (default: the CPU); also the model, the examples and the tokenizer."""
    import numpy as np
    import torch

    from stages.finetune.privacy.engine import dp_step, make_private
    from stages.lm.batching import chunks
    from stages.lm.examples import canary_examples

    cpu = device or torch.device("cpu")
    torch.manual_seed(0)
    m, tok = tiny_canary_lm(base, cpu, paradigm=paradigm, virtual_tokens=3, train_embeddings=embeddings)
    exs = canary_examples(canary_rows(m.base_vocab, 12), "sft")
    before = {n: p.detach().clone() for n, p in m.named_parameters() if p.requires_grad}
    trainable = [p for p in m.parameters() if p.requires_grad]
    dp = dp_params(enabled=True, epsilon=8.0, delta=1e-5, grad_sample_mode=mode, max_grad_norm=clip)
    private = make_private(m, torch.optim.SGD(trainable, lr=1.0), dp, sample_rate=0.5, steps=1, population=8,
                           seed=0, optimizer_name="sgd", device=cpu)
    if not noise:
        private.optimizer.noise_multiplier = 0.0
    parts = chunks(np.arange(8), [len(e) for e in exs], 3)
    m.keep_input = private.strategy.norm_pass
    private.net.train()
    dp_step(private, trainable, exs, parts, tok.pad_token_id, cpu)
    return {n: before[n] - p.detach() for n, p in m.named_parameters() if p.requires_grad}, m, exs, tok


# ------------------------------------------------------------------ a text dataset (stages/datasets/text.py)
#: labelled synthetic: made-up tickets with unusual field names, 12 customers with 5 tickets each
TICKETS = [{"Ticket No": 1000 + i, "customer-handle": f"cust{i % 12}", "Body Text": f"ticket {i}: my order {i * 7} "
            f"arrived late, call me at 713-555-01{i % 20:02d} about REF-{4000 + i % 15}"} for i in range(60)]


def text_project(tmp_path, entry: dict) -> tuple:
    """A params file with the text dataset ``mine`` (``entry`` over the defaults) writing under tmp_path."""
    import yaml

    from stages.core.params import read_params

    p = read_params(ROOT / "params.yaml")  # with studies.yaml: the file written below stands alone
    p["preprocess"]["out_dir"] = str(tmp_path / "processed")
    p["preprocess"]["datasets"]["mine"] = {"kind": "text", "format": "jsonl", "text_field": None, "prompt_field": None,
                                           "completion_field": None, "id_field": None, "user_field": None,
                                           "rows_per_user": None, "user_level": None,
                                           "split_field": None, "split": {"valid": 0.2, "test": 0.2},
                                           "min_chars": 1, "max_chars": None, "dedupe": True, "seed": 0,
                                           "rows": {}, **entry}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path, tmp_path / "processed" / "mine"


def preprocess_text(params_path):
    from stages.preprocess.__main__ import main

    main(["--dataset", "mine", "--params", str(params_path)])


def text_spec(params_path, name: str = "mine"):
    """The spec of the text dataset ``name`` the params file declares (nothing resolves a name from memory)."""
    from stages.core.params import read_params
    from stages.datasets import get_dataset

    return get_dataset(name, read_params(params_path))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def study_table(tmp_path, study, rows):
    """The study's table as the flow writes it (its metadata: the registered design), from synthetic rows."""
    import json
    from dataclasses import asdict

    from stages.variance.schema import AUDIT_POINTS, write_audit_points

    full = [{**{f: None for f in AUDIT_POINTS.names}, **r} for r in rows]
    path = tmp_path / "audit_points.parquet"
    write_audit_points(path, full, {"study": json.loads(json.dumps(asdict(study))), "recipe": {}, "primary": {}})
    return path


#: the committed variance study's ideal medians of eps_lb_95 per configuration (params.yaml variance.study)
STUDY_IDEAL_MEDIANS = {"A": 1.81, "B": 1.39, "C": 1.07, "D": 1.39}


def synthetic_models(study, done: int | None = None) -> list[dict]:
    """Labelled synthetic: every registered model with drawn values (config A leaks most), the first ``done``."""
    import numpy as np

    rng = np.random.default_rng(3)
    rows = []
    for i, (c, cfg) in enumerate(study.configs.items()):
        for s in study.seeds:
            eps = float(max(0.0, STUDY_IDEAL_MEDIANS[c] + rng.normal(0, 0.15)))
            rows.append({"point": f"study-{c}-s{s}", "config": c, "seed": s, "status": "completed", "rev": "ab" * 20,
                         "base_commit": "cd" * 20, "epsilon": 8.0, "delta": 1e-5, "accountant_epsilon": 7.99,
                         "sample_rate": cfg.batch_size / 1402, "steps": cfg.steps, "batch_size": cfg.batch_size,
                         "lr": cfg.lr, "noise_multiplier": 0.8 + 0.1 * i, "m": 1000, "r": 100, "v": 70 + int(10 * eps),
                         "k_pos": 100, "k_neg": 0,
                         "seed_status": "preregistered", "eps_lb_95": eps, "gdp_eps_lb_95": 1.4 * eps,
                         "member_shift": eps / 3, "ideal_eps_lb_95_median": STUDY_IDEAL_MEDIANS[c],
                         "valid_perplexity": 80 - 5 * eps + float(rng.normal()), "exposure": float(rng.normal(1, .2)),
                         "exposure_control": 1.0})
    return rows[:done] if done is not None else rows
