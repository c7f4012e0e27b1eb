"""One fine-tuning run: assemble its examples (dataset rows, member canaries, secret-sharer canaries),
build the model, train it (non-DP or DP), score utility and write the run's record."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from ..canaries.schema import load_canary_users, read_canaries, read_formatted
from ..core.artifacts import Locations
from ..core.io import atomic_file, read_json
from ..core.seeds import stream
from ..datasets import get_dataset, read_split
from ..datasets.users import apply_canary_users
from ..lm.examples import Example, bos_id, canary_examples, make_example, text_examples
from ..lm.loading import pick_device
from ..lm.trainable import build_model, save_model
from ..secrets.schema import read_secrets, secrets_path
from .checkpoint import Checkpointer, examples_fingerprint
from .diagnostics import canary_gradients
from .loop import TrainConfig, TrainResult, mean_nll, train, world
from .manifest import write_run_manifest
from .params import FinetuneParams
from .schema import RUN_VERSION, TIMING_FILE, RunRecord, TextSetup, write_run
from .text import heldout_pairs, secret_arms, text_examples_of, training_pairs

log = logging.getLogger("stages.finetune")


@dataclass
class Inputs:
    """What a run trains on and evaluates with."""

    text: list[Example]  # rows of the dataset's training split
    text_pairs: list[tuple[str, str]]  # the same, as (prompt, target)
    heldout_pairs: list[tuple[str, str]]  # as many never-trained pairs (the membership game's other side)
    evals: list[Example]  # rows of its evaluation split (utility)
    members: dict[str, list[dict]]  # kind -> member canaries
    all_canaries: dict[str, list[dict]]  # kind -> every canary of the run's kinds, member or not
    canaries: list[Example]  # the member canaries as examples
    canary_ids: list[str]  # their ids, in the same order
    canary_kinds: list[str]  # their kinds, in the same order
    formatted_rows: list[dict] | None  # every secret-sharer candidate, inserted or not
    formatted: list[Example]  # inserted secret-sharer canaries, each repeated its number of times
    scheduled: list[Example]  # canaries on a fixed schedule (canary_insertion: repetitions), else []
    canary_users: dict[str, dict]
    candidates: int  # canaries of the run's kinds, members or not
    secret_control: dict | None  # the randomised VMR/AIR control (finetune.text.secret_control)
    users: dict[str, bool]  # user-level data: every user the attacker has samples of -> held in
    secret_arms: list[tuple[dict, bool]]  # (secret, trained) the memorization attacks may score

    @property
    def pool(self) -> list[Example]:
        """The Poisson-sampled examples."""
        return self.text + self.formatted + ([] if self.scheduled else self.canaries)

    @property
    def population(self) -> int:
        """What q and the default delta are computed from: the pool with every canary, member or not, in place of
        the members, so that neither depends on the membership draw the audit randomises."""
        return len(self.text) + len(self.formatted) + (0 if self.scheduled else self.candidates)


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


def formatted_examples(rows: list[dict] | None, tok) -> list[Example]:
    """Inserted secret-sharer canaries, each repeated its number of times (whole sentence learned)."""
    out = []
    for r in rows or []:
        if r["inserted"]:
            e = make_example([bos_id(tok)], tok(r["text"], add_special_tokens=False)["input_ids"], "nwp", "formatted")
            out += [e] * r["repetitions"]
    return out


def attacker_users(where: Locations, dataset, cusers: dict[str, dict]) -> dict[str, bool]:
    """user -> held in, for every user of the attacker's samples (user-level datasets; else {})."""
    if not dataset.users:
        return {}
    rows = apply_canary_users(read_split(where.processed, dataset.name, "attacker"), cusers)
    return {r["user"]: r["user_set"] == "held_in" for r in rows}


def run_secrets(where: Locations, spec, ft: FinetuneParams) -> list[dict] | None:
    """The dataset's secrets: required with a randomised control; else None without a secrets file."""
    if not spec.secrets or not (ft.secret_control.secrets or secrets_path(where.secrets, spec.secrets).is_file()):
        return None
    return read_secrets(where.secrets, spec.secrets)


def gather_inputs(ft: FinetuneParams, where: Locations, canaries: dict[str, list[dict]], tok) -> Inputs:
    spec = get_dataset(ft.dataset)
    setup = TextSetup.of(ft)
    cusers = load_canary_users(where.canaries) if spec.users else {}
    secrets = run_secrets(where, spec, ft)
    pairs, control = training_pairs(where.processed, setup, cusers, secrets if ft.secret_control.secrets else None)
    text = text_examples(pairs, tok, setup.max_length, setup.objective)
    evals = text_examples_of(where.processed, spec.eval_split, tok, setup, ft.eval_rows,
                             stream("finetune.eval_rows").int_seed(ft.seed), cusers)
    all_canaries = canaries if ft.canaries else {}
    members = {k: [r for r in rows if r["member"]] for k, rows in all_canaries.items()}
    canary_ex = [e for k in members for e in canary_examples(members[k], ft.objective)]
    canary_ids = [r["canary_id"] for k in members for r in members[k]]
    canary_kinds = [k for k in members for _ in members[k]]
    formatted_rows = read_formatted(where.canaries) if ft.canaries else None
    formatted = formatted_examples(formatted_rows, tok)
    scheduled = canary_ex if ft.canary_insertion == "repetitions" else []
    candidates = sum(len(rows) for rows in all_canaries.values())
    return Inputs(text, pairs, heldout_pairs(where.processed, setup, cusers, len(pairs)), evals, members,
                  all_canaries, canary_ex, canary_ids, canary_kinds, formatted_rows, formatted, scheduled, cusers,
                  candidates, control, attacker_users(where, spec, cusers),
                  secret_arms(where.processed, setup, cusers, secrets, control))


def checkpointer(run: str, ft: FinetuneParams, inputs: Inputs) -> Checkpointer | None:
    """Checkpoints valid only for the same params (checkpoint keys aside) and the same examples."""
    if not ft.checkpoint_every:
        return None
    config = {k: v for k, v in dataclasses.asdict(ft).items() if not k.startswith("checkpoint")}
    key = hashlib.sha1((json.dumps(config, sort_keys=True)
                        + examples_fingerprint(inputs.pool + inputs.scheduled)).encode()).hexdigest()
    return Checkpointer(Path(ft.checkpoint_dir) / f"{run}.pt", ft.checkpoint_every, key)


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
                                    "log, not released with the model"} if result.privacy.get("dp") else {}
    return {"train_seconds": round(result.seconds, 3), "resumed_from_step": result.resumed_from,
            "device": str(device), **({"step_seconds": steps} if steps else {}), **private}


def run_record(run: str, ft: FinetuneParams, meta: dict, inputs: Inputs, result: TrainResult, model, device,
               where: Locations, utility: dict, privacy: dict, gradients: dict | None) -> RunRecord:
    return {
        "version": RUN_VERSION,
        "run": run,
        "params": dataclasses.asdict(ft),
        "trainable": model.spec.to_json(),  # as built: LoRA targets "auto" resolved (lm.trainable.build_model)
        "device": str(device),
        "world_size": world()[1],  # data-parallel processes (finetune.distributed)
        "base_model": read_json(where.base_model / "source.json", "base_model"),
        "num_new_tokens": meta["num_new_tokens"],
        "new_token_init": meta["new_token_init"],
        "n_examples": len(inputs.pool),
        "n_population": inputs.population,
        "n_text_rows": len(inputs.text),
        "n_member_canaries": {k: len(v) for k, v in inputs.members.items()},
        "n_formatted_rows": len(inputs.formatted),
        "canary_users": sorted(inputs.canary_users),
        "secret_control": inputs.secret_control,
        **canary_shares(inputs.canaries, inputs.formatted, inputs.pool, inputs.scheduled, result.sample_rate,
                        ft.canary_repetitions / ft.steps),
        "sample_rate": result.sample_rate,
        "expected_batch_size": result.expected_batch_size,
        "steps": result.steps,
        "expected_exposures_per_member": (ft.canary_repetitions if inputs.scheduled
                                          else result.sample_rate * result.steps),
        "canary_insertion": ft.canary_insertion,
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "final_loss": result.log[-1].get("loss") if result.log else None,  # DP runs: none (loop.dp_record)
        "valid": {"rows": len(inputs.evals), **utility},
        "privacy": privacy,
        "canary_gradients": gradients,
        "external": None,
    }


def run_finetune(run: str, ft: FinetuneParams, where: Locations, out_dir: Path | None,
                 device=None) -> RunRecord | None:
    """Train run ``run`` and write it into ``out_dir`` (the caller makes that atomic and seeds torch).
    Data-parallel ranks other than 0 pass ``out_dir`` None: they train their share and write nothing."""
    device = device or pick_device(ft.device)
    if ft.external is not None:
        from .external import import_external

        return import_external(run, ft, where, out_dir, device) if out_dir is not None else None
    meta, canaries = read_canaries(where.canaries)
    model, tok = build_model(where.base_model, ft.trainable(meta), device)
    inputs = gather_inputs(ft, where, canaries, tok)
    log.info("run %s: %d text rows + %d member canaries on %s", run, len(inputs.text), len(inputs.canaries), device)
    gradients = None
    if ft.dp.enabled and inputs.canaries and ft.diagnostics.gradient_canaries:
        with torch.random.fork_rng(devices=[]):  # a diagnostic: the training's random stream stays as it was
            gradients = canary_gradients(model, inputs.canaries, inputs.canary_kinds, tok.pad_token_id,
                                         ft.dp.max_grad_norm, ft.diagnostics.gradient_canaries, ft.seed)
    result = train(model, inputs.pool, TrainConfig.of(ft, pad_id=tok.pad_token_id, population=inputs.population,
                                                      scheduled=inputs.scheduled,
                                                      checkpoint=checkpointer(run, ft, inputs)))
    if out_dir is None:
        return None
    if result.resumed_from:
        log.info("run %s: resumed from the checkpoint at step %d", run, result.resumed_from)
    utility = mean_nll(model, inputs.evals, tok.pad_token_id)
    save_model(model, out_dir)
    write_log(out_dir / "train_log.jsonl", result.log)
    privacy = result.privacy if result.privacy["dp"] else {
        "dp": False, "epsilon_spent": float("inf"), "sample_rate": result.sample_rate, "steps": result.steps}
    record = run_record(run, ft, meta, inputs, result, model, device, where, utility, privacy, gradients)
    write_run(out_dir / "run.json", record)
    write_run_manifest(out_dir, inputs, result.inclusions)
    write_timing(ft, run, timing_facts(result, device))
    took = "" if privacy["dp"] else f" in {result.seconds:.0f} s"  # a DP run's time: the timing file, labelled
    log.info("run %s: %d steps%s, valid ppl %.2f, epsilon %s", run, result.steps, took,
             utility["perplexity"] or float("nan"), privacy.get("epsilon_spent"))
    return record
