"""The public contract of a fine-tuned run (data/models/<run>/), read by the attack stage.

* ``run.json``: a ``RunRecord`` (versioned), written and read only through ``write_run``/``read_run``;
  ``trainable`` describes the model (``stages.lm.trainable.Trainable``), ``params`` the finetune params
  the run used;
* ``trainable.safetensors`` (and ``adapter/`` for LoRA): the trained tensors;
* ``privacy.json`` and ``train_log.jsonl``.

``text_examples_of`` and ``trained_rows`` say which text a run trained on (a seeded sample of its
dataset's training split), so attacks score exactly those rows against held-out ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from ..canaries.schema import apply_canary_users, canary_user_split
from ..core.errors import DataError
from ..core.io import read_json, write_json
from ..datasets import get_dataset, read_split, sample
from ..lm.examples import Example, text_examples

RUN_VERSION = 3  # 2: n_population (q and the default delta come from it); 3: trainable.secret_rows
RUN_FILE = "run.json"


class RunRecord(TypedDict):
    version: int
    run: str
    params: dict[str, Any]  # the finetune params of the run (finetune deep-merged with runs.<run>)
    trainable: dict[str, Any]  # stages.lm.trainable.Trainable.to_json()
    device: str
    base_model: dict[str, Any]  # data/models/base/source.json
    num_new_tokens: int
    new_token_init: str
    n_examples: int  # the Poisson-sampled pool: text rows, formatted and member canaries
    n_population: int  # q = batch_size / n_population: the pool with every canary, member or not
    n_text_rows: int
    n_member_canaries: dict[str, int]  # kind -> member canaries inserted
    n_formatted_rows: int
    canary_users: list[str]
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
    privacy: dict[str, Any]  # dp, epsilon_spent, delta, noise_multiplier, sample_rate, steps, ...


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

    @classmethod
    def of(cls, params: Any) -> "TextSetup":
        """From FinetuneParams or the ``params`` mapping of a RunRecord."""
        get = params.get if isinstance(params, dict) else lambda k: getattr(params, k)
        return cls(get("dataset"), get("objective"), get("max_length"), get("max_text_rows"), get("seed"))


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
