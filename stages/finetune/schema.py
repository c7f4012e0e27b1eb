"""The public contract of a fine-tuned run (data/models/<run>/), read by the attack stage.

* ``run.json``: a ``RunRecord`` (versioned), written and read only through ``write_run``/``read_run``;
  ``trainable`` describes the model (``stages.lm.trainable.Trainable``), ``params`` the finetune params
  the run used;
* ``trainable.safetensors`` (and ``adapter/`` for LoRA): the trained tensors;
* ``privacy.json`` and ``train_log.jsonl``;
* ``external/``: instead of the trained tensors, the imported model of a run trained elsewhere
  (``stages.finetune.external``).

``text_examples_of`` and ``trained_rows`` say which text a run trained on (a seeded sample of its
dataset's training split), so attacks score exactly those rows against held-out ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from ..canaries.schema import apply_canary_users, canary_user_split
from ..core.errors import DataError
from ..core.io import read_json, write_json
from ..datasets import get_dataset, read_split, sample
from ..lm.examples import Example, text_examples

RUN_VERSION = 6  # 2: n_population (q and the default delta come from it); 3: trainable.secret_rows;
#                 4: trainable.train_embeddings, privacy.grad_sample_mode, distributed;
#                 5: canary_inclusions, canary_gradients, privacy.divisor; 6: external
RUN_FILE = "run.json"
EXTERNAL_DIR = "external"  # the imported model of a run trained elsewhere


class RunRecord(TypedDict):
    version: int
    run: str
    params: dict[str, Any]  # the finetune params of the run (finetune deep-merged with runs.<run>)
    trainable: dict[str, Any]  # stages.lm.trainable.Trainable.to_json()
    device: str
    world_size: int  # data-parallel processes that trained it (finetune.distributed)
    base_model: dict[str, Any]  # data/models/base/source.json
    num_new_tokens: int
    new_token_init: str
    n_examples: int  # the Poisson-sampled pool: text rows, formatted and member canaries
    n_population: int  # q = batch_size / n_population: the pool with every canary, member or not
    n_text_rows: int
    n_member_canaries: dict[str, int]  # kind -> member canaries inserted
    n_formatted_rows: int
    canary_users: list[str]
    secret_control: dict[str, Any] | None  # finetune.schema.secret_control's record (None: no randomised control)
    canary_share_of_tokens: float
    canary_share_of_loss_tokens: float
    formatted_canary_share_of_tokens: float
    formatted_canary_share_of_loss_tokens: float
    sample_rate: float
    expected_batch_size: float
    steps: int
    expected_exposures_per_member: float
    canary_insertion: str
    trainable_parameters: int
    train_seconds: float
    resumed_from_step: int
    final_loss: float | None
    valid: dict[str, Any]  # rows, tokens, nll, perplexity
    privacy: dict[str, Any]  # dp, epsilon_spent, delta, noise_multiplier, sample_rate, steps, divisor, ...
    #: auditor-side records (they name member canaries; finetune.diagnostics): member canary id -> steps that
    #: sampled it, and the canaries' gradient diagnostics per kind (DP runs; None otherwise)
    canary_inclusions: dict[str, int]
    canary_gradients: dict[str, Any] | None
    #: a run trained elsewhere (finetune.external): model_kind (hf | peft), files (path -> sha-256 of the imported
    #: copy in external/), membership_sha256, claim (whether the privacy record is the trainer's claim); else None
    external: dict[str, Any] | None


def write_run(path: Path, record: RunRecord) -> None:
    missing = [k for k in RunRecord.__annotations__ if k not in record]
    if missing:
        raise ValueError(f"run record lacks {', '.join(missing)}")
    write_json(path, record)


def read_run(run_dir: Path, run: str | None = None) -> RunRecord:
    """run.json of a fine-tuned run; a missing file names the stage to run, another version is refused."""
    path = Path(run_dir) / RUN_FILE
    record = read_json(path, f"finetune@{run or Path(run_dir).name}")
    if record.get("version") != RUN_VERSION:
        raise DataError(f"{path}: run record version {record.get('version')!r}, expected {RUN_VERSION} "
                        f"(rerun the finetune@{run or Path(run_dir).name} stage)")
    return record


@dataclass(frozen=True)
class TextSetup:
    """What decides a run's text examples (from its finetune params)."""

    dataset: str
    objective: str
    max_length: int
    max_text_rows: int
    seed: int
    control_secrets: int  # finetune.secret_control.secrets (0: no randomised control)
    control_seed: int

    @classmethod
    def of(cls, params: Any) -> "TextSetup":
        """From FinetuneParams or the ``params`` mapping of a RunRecord."""
        get = params.get if isinstance(params, dict) else lambda k: getattr(params, k)
        control = get("secret_control")
        cget = control.get if isinstance(control, dict) else lambda k: getattr(control, k)
        return cls(get("dataset"), get("objective"), get("max_length"), get("max_text_rows"), get("seed"),
                   cget("secrets"), cget("seed"))


def text_examples_of(processed_dir: Path, split: str, tok, setup: TextSetup, n: int, seed: int,
                     canary_users: dict[str, dict] | None = None) -> list[Example]:
    """A seeded sample of n (prompt, target) examples of the run's dataset split (with ``canary_users``: each
    canary user's documents in the split of its drawn set, its substring inserted)."""
    rows = apply_canary_users(split_rows(processed_dir, setup.dataset, split, canary_users), canary_users or {})
    pairs = sample(get_dataset(setup.dataset).pairs(rows), n, seed)
    return text_examples(pairs, tok, setup.max_length, setup.objective)


def split_rows(processed_dir: Path, dataset: str, split: str, canary_users: dict[str, dict] | None = None) -> list[dict]:
    """The rows of ``split``; canary users moved to the split of their drawn held-in/held-out set."""
    return canary_user_split(lambda s: read_split(processed_dir, dataset, s), split, canary_users or {})


def trained_rows(processed_dir: Path, setup: TextSetup, canary_users: dict[str, dict] | None = None) -> list[dict]:
    """The training rows the run's text examples came from (before canary-user insertion). Exact for datasets
    with one pair per row (those with secrets: Enron, TOFU), where it is the same seeded draw."""
    return sample(split_rows(processed_dir, setup.dataset, "train", canary_users), setup.max_text_rows, setup.seed)


def secret_control(rows: list[dict], secrets: list[dict], spec, n: int, seed: int) -> tuple[list[dict], dict]:
    """The randomised trained/untrained control of VMR/AIR: the first ``n`` secrets (the secrets file's order)
    that occur in the run's sampled training rows each get a seeded coin; every row containing a secret whose
    coin says "held out" is dropped, so which secrets are trained on is decided by the coin, not by frequency,
    and a trained-minus-held-out difference is attributable to training (intention to treat: a trained secret
    that shared its only row with a held-out one stays in the trained arm)."""
    present = spec.trained_secrets(rows, secrets)
    cands = [s_ for s_, p in zip(secrets, present) if p][:n]
    coins = np.random.default_rng(seed).random(len(cands)) < 0.5
    held_out = [s_ for s_, c in zip(cands, coins) if not c]
    kept = [r for r in rows if not any(spec.trained_secrets([r], held_out))] if held_out else rows
    still = spec.trained_secrets(kept, [s_ for s_, c in zip(cands, coins) if c])
    return kept, {"seed": seed, "candidates": len(cands), "rows_dropped": len(rows) - len(kept),
                  "trained": [s_["secret_id"] for s_, c in zip(cands, coins) if c],
                  "held_out": [s_["secret_id"] for s_ in held_out], "trained_still_present": int(sum(still))}


def training_text(processed_dir: Path, setup: TextSetup, tok, canary_users: dict[str, dict] | None,
                  secrets: list[dict] | None) -> tuple[list[Example], dict | None]:
    """The run's training text examples and its randomised secret control (None when the dataset has no
    secrets or ``setup.control_secrets`` is 0). The finetune and attack stages both call this."""
    spec = get_dataset(setup.dataset)
    if not (spec.secrets and setup.control_secrets and secrets is not None):
        return text_examples_of(processed_dir, "train", tok, setup, setup.max_text_rows, setup.seed,
                                canary_users), None
    rows, control = secret_control(trained_rows(processed_dir, setup, canary_users), secrets, spec,
                                   setup.control_secrets, setup.control_seed)
    pairs = spec.pairs(apply_canary_users(rows, canary_users or {}))
    return text_examples(pairs, tok, setup.max_length, setup.objective), control
