"""One reference fine-tune for RMIA: the recipe of run ``run`` on population rows that are never members.

Population rows are rows no run's membership game scores: a user-level dataset's held-out users' set-aside rows
(``heldout`` split, canary users' rows left out), otherwise the evaluation split. As many as the run trains on,
drawn with the set's seed; the run's sample rate q and steps T, so each row is seen as often as the run's members
are; no canaries, no secret-sharer canaries. The set's seed is the reference's ``finetune.seed``: its row draw, its
initialisation, sampler and noise come from the fine-tune's named streams at that seed, as a replica's do.

Not for user inference: the held-out users' rows would make the references know the very users the attack calls
non-members. RMIA needs ``text`` (``stages.attack.rmia``).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import torch

from ..canaries.schema import load_canary_users, read_canaries
from ..finetune.api import TrainConfig, gather_inputs, train
from ..finetune.params import FinetuneParams
from ..finetune.schema import TextSetup
from ..shared.core.artifacts import Locations
from ..shared.core.io import write_json
from ..shared.core.seeds import stream
from ..shared.datasets import DatasetSpec, read_split, sample
from ..shared.lm.examples import text_examples
from ..shared.lm.trainable import build_model, save_model
from .schema import REFERENCE_RECORD, REFERENCE_VERSION, recipe_of

log = logging.getLogger("stages.reference")


def population_rows(where: Locations, spec: DatasetSpec) -> list[dict]:
    """Rows that are never members and never scored: held-out users' set-aside rows (no canary user's), else the
    dataset's evaluation split."""
    if spec.users:
        canary_users = load_canary_users(where.canaries, spec.name)
        return [r for r in read_split(where.processed, spec, "heldout") if r["user"] not in canary_users]
    return read_split(where.processed, spec, spec.eval_split)


def train_reference(name: str, run: str, seed: int, ft: FinetuneParams, spec: DatasetSpec, where: Locations,
                    out_dir: Path, device) -> dict:
    """Train reference set ``name`` (run ``run``'s recipe ``ft`` at ``seed``, on ``spec``: ``ft.dataset``'s spec)
    into ``out_dir``; its record."""
    meta, canaries = read_canaries(where.canaries)
    model, tok = build_model(where.base_model, ft.trainable(meta), device)
    own = gather_inputs(ft, spec, where, canaries, tok)  # the run's own inputs: its q and how many rows it trains on
    q = ft.sample_rate if ft.sample_rate is not None else ft.batch_size / own.population
    setup = TextSetup.of(ft)
    pairs = sample(spec.pairs(population_rows(where, spec)), len(own.text),
                   stream("finetune.text_rows").int_seed(seed))
    text = text_examples(pairs, tok, setup.max_length, setup.objective)
    recipe = dataclasses.replace(ft, seed=seed, sample_rate=q, canaries=False)
    log.info("reference %s of run %s: %d population rows at q = %.4f, %d steps", name, run, len(text), q, ft.steps)
    result = train(model, text, TrainConfig.of(recipe, pad_id=tok.pad_token_id, population=len(text)))
    save_model(model, out_dir)
    record = {"version": REFERENCE_VERSION, "set": name, "run": run, "seed": seed,
              "recipe": recipe_of(json.loads(json.dumps(dataclasses.asdict(ft)))),
              "trainable": model.spec.to_json(), "rows": len(text), "sample_rate": q, "steps": result.steps,
              "population_split": "heldout" if spec.users else spec.eval_split,
              "privacy": {k: getattr(result.privacy, k) for k in ("dp", "epsilon_spent", "delta")}}
    write_json(out_dir / REFERENCE_RECORD, record)
    return record


def init_seed(seed: int) -> None:
    """The trainable weights' initialisation, as a run's: ``finetune.init`` at the set's seed."""
    torch.manual_seed(stream("finetune.init").int_seed(seed))
