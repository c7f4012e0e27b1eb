"""A run's records: run.json (``run_record`` for a run trained here, ``external_record`` for one imported; public
quantities only), auditor.json (``auditor_record``: member counts and member-only statistics), its step log without
timings, and the timing file (an operator-side log no stage reads)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..shared.core.artifacts import Locations
from ..shared.core.io import atomic_file, read_json
from ..shared.core.records import record_json
from ..shared.lm.trainable import Trainable
from .inputs import Inputs
from .loop import TrainResult, world
from .params import FinetuneParams
from .schema import RUN_VERSION, TIMING_FILE, AuditorRecord, PrivacyRecord, RunRecord, Valid


def canary_shares(canary_ex, formatted_ex, pool, scheduled, q: float, scheduled_rate: float) -> dict:
    """Expected share of the training tokens (all, and those with a loss) that are canaries, per step:
    pool examples are drawn at rate q, scheduled canaries at repetitions / steps."""
    def tokens(exs, labelled):
        return sum(int((e.labels != -100).sum()) if labelled else len(e) for e in exs)

    out = {}
    for labelled, key in ((False, "canary_share_of_tokens"), (True, "canary_share_of_loss_tokens")):
        canary = (q * tokens([] if scheduled else canary_ex, labelled) + scheduled_rate * tokens(scheduled, labelled))
        total = q * tokens(pool, labelled) + scheduled_rate * tokens(scheduled, labelled)
        out[key] = canary / max(total, 1e-12)
        out[key.replace("canary", "formatted_canary")] = q * tokens(formatted_ex, labelled) / max(total, 1e-12)
    return out


def write_log(path: Path, records: list[dict]) -> None:
    """The per-step records without their timings (those go to the timing file)."""
    with open(path, "w") as fh:
        for rec in records:
            fh.write(json.dumps({k: v for k, v in rec.items() if k != "seconds"}) + "\n")


def write_timing(ft: FinetuneParams, run: str, facts: dict) -> None:
    """The run's timings and host facts, in ``finetune.log_dir`` (an uncached DVC metric no stage reads)."""
    with atomic_file(Path(ft.log_dir) / TIMING_FILE.format(run=run)) as tmp:
        tmp.write_text(json.dumps({"run": run, **facts}, indent=1, sort_keys=True) + "\n")


def timing_facts(result: TrainResult, device) -> dict:
    """Total and per-step seconds (a DP run's log has no per-step timing: loop.dp_record), resumed step, device.
    A DP run's total time depends on the sampled examples' lengths, outside the accountant: labelled so."""
    steps = [rec["seconds"] for rec in result.log if "seconds" in rec]
    private = {"not_covered_by_dp": "wall-clock time depends on the sampled examples' lengths; an operator-side "
                                    "log, not released with the model"} if result.privacy.dp else {}
    return {"train_seconds": round(result.seconds, 3), "resumed_from_step": result.resumed_from,
            "device": str(device), **({"step_seconds": steps} if steps else {}), **private}


def run_record(run: str, ft: FinetuneParams, meta: dict, inputs: Inputs, result: TrainResult, model, device,
               where: Locations, utility: dict, privacy: PrivacyRecord) -> RunRecord:
    """run.json: public quantities only (the candidate pool's size, q, T, the privacy record); member counts and
    member-only statistics go to ``auditor_record``."""
    return RunRecord(
        version=RUN_VERSION,
        run=run,
        params=record_json(ft),
        trainable=model.spec,  # as built: LoRA targets "auto" resolved (lm.trainable.build_model)
        device=str(device),
        world_size=world()[1],  # data-parallel processes (finetune.distributed)
        base_model=read_json(where.base_model / "source.json", "base_model"),
        num_new_tokens=ft.new_tokens(meta),
        new_token_init=meta["new_token_init"],
        n_population=inputs.population,
        has_canaries=bool(inputs.canaries),
        has_formatted=bool(inputs.formatted),
        canary_users=sorted(inputs.canary_users),
        secret_control=inputs.secret_control,
        sample_rate=result.sample_rate,
        steps=result.steps,
        expected_exposures_per_member=(ft.canary_repetitions if inputs.scheduled
                                       else result.sample_rate * result.steps),
        canary_insertion=ft.canary_insertion,
        trainable_parameters=sum(p.numel() for p in model.parameters() if p.requires_grad),
        final_loss=result.log[-1].get("loss") if result.log else None,  # DP runs: none (loop.dp_record)
        valid=Valid(rows=len(inputs.evals), **utility),
        privacy=privacy,
        external=None,
    )


def auditor_record(run: str, inputs: Inputs, sample_rate: float, scheduled_rate: float,
                   expected_drawn_batch: float | None, gradients: dict | None, scheduled=None) -> AuditorRecord:
    """auditor.json: the run's member counts and member-only statistics (``schema.AuditorRecord``); the canary
    shares are per step (pool at rate q, ``scheduled`` at ``scheduled_rate``; an external run: the exported set)."""
    shares = canary_shares(inputs.canaries, inputs.formatted, inputs.pool,
                           inputs.scheduled if scheduled is None else scheduled, sample_rate, scheduled_rate)
    return AuditorRecord(version=RUN_VERSION, run=run, n_examples=len(inputs.pool), n_text_rows=len(inputs.text),
                         n_member_canaries={k: len(v) for k, v in inputs.members.items()},
                         n_formatted_rows=len(inputs.formatted), **shares,
                         expected_drawn_batch=expected_drawn_batch, canary_gradients=gradients)


def external_record(run: str, ft: FinetuneParams, meta: dict, inputs: Inputs, model, device, where: Locations,
                    utility: dict, privacy: PrivacyRecord, external: dict) -> RunRecord:
    """run.json of a run trained elsewhere and imported (``external.py``): the trainer's claim as ``privacy``, the
    imported files' digests as ``external``."""
    spec = ft.trainable(meta)
    return RunRecord(
        version=RUN_VERSION, run=run, params=record_json(ft),
        trainable=Trainable(**{**dataclasses.asdict(spec), "paradigm": "external", "lora_targets": ()}),
        device=str(device), world_size=1,
        base_model=read_json(where.base_model / "source.json", "base_model"),
        num_new_tokens=meta["num_new_tokens"], new_token_init=meta["new_token_init"],
        n_population=inputs.population, has_canaries=bool(inputs.canaries),
        has_formatted=bool(inputs.formatted), canary_users=sorted(inputs.canary_users),
        secret_control=inputs.secret_control,
        sample_rate=privacy.sample_rate, steps=privacy.steps,
        expected_exposures_per_member=None, canary_insertion="external",
        trainable_parameters=sum(p.numel() for p in model.parameters()), final_loss=None,
        valid=Valid(rows=len(inputs.evals), **utility),
        privacy=privacy,
        external=external,
    )
