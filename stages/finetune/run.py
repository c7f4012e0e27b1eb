"""One fine-tuning run, top to bottom: gather its inputs (``inputs.py``), build the model, train it (non-DP or DP,
``loop.py``), score utility and write the model and its records (``record.py``). A run trained elsewhere is
imported instead (``external.py``)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import torch

from ..canaries.schema import read_canaries
from ..shared.core.artifacts import Locations
from ..shared.core.seeds import stream
from ..shared.datasets import DatasetSpec
from ..shared.lm.loading import pick_device
from ..shared.lm.trainable import build_model, save_model
from .checkpoint import Checkpointer, examples_fingerprint
from .diagnostics import canary_gradients
from .external import import_external
from .inputs import Inputs, gather_inputs
from .loop import TrainConfig, mean_nll, train
from .manifest import write_run_manifest
from .params import FinetuneParams
from .record import auditor_record, run_record, timing_facts, write_log, write_timing
from .schema import AUDITOR_FILE, RunRecord, write_auditor, write_run

log = logging.getLogger("stages.finetune")


def checkpointer(run: str, ft: FinetuneParams, inputs: Inputs) -> Checkpointer | None:
    """Checkpoints valid only for the same params (checkpoint keys aside) and the same examples."""
    if not ft.checkpoint_every:
        return None
    config = {k: v for k, v in dataclasses.asdict(ft).items() if not k.startswith("checkpoint")}
    key = hashlib.sha1((json.dumps(config, sort_keys=True)
                        + examples_fingerprint(inputs.pool + inputs.scheduled)).encode()).hexdigest()
    return Checkpointer(Path(ft.checkpoint_dir) / f"{run}.pt", ft.checkpoint_every, key)


def unsharded(where: Locations, spec, gathered: dict, device):
    """A sharded run's trained model as one process holds it: the model ``spec`` describes, freshly built, with the
    gathered trainable weights (FSDP's modules keep answering ``state_dict`` with their shards, which the scoring
    and peft's adapter save cannot use)."""
    model, _ = build_model(where.base_model, spec, device, init="zero")
    model.load_tensors(gathered, "the gathered weights")
    return model


def run_finetune(run: str, ft: FinetuneParams, dataset: DatasetSpec, where: Locations, out_dir: Path | None,
                 device=None) -> RunRecord | None:
    """Train run ``run`` on ``dataset`` (``ft.dataset``'s spec) and write it into ``out_dir`` (the caller makes that
    atomic and seeds torch). Data-parallel ranks other than 0 pass ``out_dir`` None: they train their share and
    write nothing."""
    device = device or pick_device(ft.device)
    if ft.external is not None:
        return import_external(run, ft, dataset, where, out_dir, device) if out_dir is not None else None
    meta, canaries = read_canaries(where.canaries)
    model, tok = build_model(where.base_model, ft.trainable(meta), device)
    inputs = gather_inputs(ft, dataset, where, canaries, tok)
    # public quantities only: the member count is the auditor's (auditor.json), never a stage log's
    log.info("run %s: a candidate pool of %d on %s", run, inputs.population, device)
    gradients = None
    if ft.dp.enabled and inputs.canaries and ft.diagnostics.gradient_canaries:
        with torch.random.fork_rng(devices=[]):  # a diagnostic: the training's random stream stays as it was
            gradients = canary_gradients(model, inputs.canaries, inputs.canary_kinds, tok.pad_token_id,
                                         ft.dp.max_grad_norm, ft.diagnostics.gradient_canaries,
                                             stream("finetune.diagnostics").int_seed(ft.seed))
    per_user = ft.dp.per_user  # user-level DP: the pool's users, q over the candidate pool's users
    result = train(model, inputs.pool, TrainConfig.of(ft, pad_id=tok.pad_token_id, population=inputs.population,
                                                      scheduled=inputs.scheduled,
                                                      checkpoint=checkpointer(run, ft, inputs),
                                                      users=inputs.pool_users() if per_user else None,
                                                      user_population=inputs.user_population if per_user else None))
    if out_dir is None:
        return None
    if result.gathered is not None:
        model = unsharded(where, model.spec, result.gathered, device)
    if result.resumed_from:
        log.info("run %s: resumed from the checkpoint at step %d", run, result.resumed_from)
    utility = mean_nll(model, inputs.evals, tok.pad_token_id)
    save_model(model, out_dir)
    write_log(out_dir / "train_log.jsonl", result.log)
    privacy = result.privacy
    record = run_record(run, ft, meta, inputs, result, model, device, where, utility, privacy)
    write_run(out_dir / "run.json", record)
    write_auditor(out_dir / AUDITOR_FILE, auditor_record(run, inputs, result.sample_rate,
                                                         ft.canary_repetitions / ft.steps, result.expected_drawn_batch,
                                                         gradients))
    write_run_manifest(out_dir, inputs, result.inclusions)
    write_timing(ft, run, timing_facts(result, device))
    took = "" if privacy.dp else f" in {result.seconds:.0f} s"  # a DP run's time: the timing file, labelled
    log.info("run %s: %d steps%s, valid ppl %.2f, epsilon %s", run, result.steps, took,
             utility["perplexity"] or float("nan"), privacy.epsilon_spent)
    return record
