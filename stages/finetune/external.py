"""``finetune@<run>`` for a run trained elsewhere (``finetune.external``): import instead of train.

The model (a Hugging Face directory or a PEFT adapter over the base) is copied into the run's output, so DVC
caches the exact bytes the attacks score, and run.json records where it came from (sha-256 of every file), the
sealed membership file's sha-256, and the trainer's DP claim, if any, as a claim. Refused with a one-line
error: a membership file from another canary set or another text setup, and a tokenizer that does not know the
canaries' new tokens at the ids they were drawn with."""
from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

from ..canaries.schema import read_canaries
from ..shared.core.artifacts import Locations
from ..shared.core.errors import DataError
from ..shared.core.io import file_digest
from ..shared.core.privacy import create_accountant
from ..shared.datasets import DatasetSpec
from ..shared.lm.external import load_external, model_kind
from ..shared.lm.loading import load_tokenizer
from .inputs import gather_inputs
from .loop import mean_nll
from .manifest import write_run_manifest
from .params import FinetuneParams
from .privacy.engine import privacy_profile
from .record import auditor_record, external_record, write_timing
from .schema import (
    AUDITOR_FILE,
    EXTERNAL_DIR,
    PrivacyRecord,
    RunRecord,
    TextSetup,
    no_dp_record,
    write_auditor,
    write_run,
)
from .sealed import canaries_digest, canary_token, read_membership

log = logging.getLogger("stages.finetune")

SKIP = ("checkpoint-", "optimizer", "scheduler", "rng_state", "training_args")


def copy_model(src: Path, dest: Path) -> dict[str, str]:
    """Copy the model's files (not trainer checkpoints or optimizer states); file -> sha-256."""
    digests = {}
    for f in sorted(src.rglob("*")):
        rel = f.relative_to(src)
        if not f.is_file() or any(part.startswith(SKIP) for part in rel.parts):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dest / rel)
        digests[rel.as_posix()] = file_digest(f, "sha256")
    return digests


def check_membership(run: str, ft: FinetuneParams, where: Locations, record: dict,
                     canaries: dict[str, list[dict]]) -> None:
    path = ft.external.membership
    if record["canaries_digest"] != canaries_digest(where.canaries):
        raise DataError(f"{path}: exported from another canary set than {where.canaries} (export again)")
    if record["setup"] != dataclasses.asdict(TextSetup.of(ft)):
        raise DataError(f"{path}: exported with another text setup than runs.{run} (dataset, rows, seed or objective "
                        "changed since the export)")
    members = {k: sorted(r["canary_id"] for r in rows if r["member"]) for k, rows in canaries.items()}
    if record["members"] != members:
        raise DataError(f"{path}: its members differ from the canary set's")


def check_tokenizer(tok, model, meta: dict, where: str) -> None:
    """Every new canary token must be the id the canaries were drawn with, and a row of the model."""
    base, n = meta["base_vocab_size"], meta["num_new_tokens"]
    wrong = [j for j in range(n) if tok.convert_tokens_to_ids(canary_token(j)) != base + j]
    if wrong:
        raise DataError(f"{where}: tokenizer does not know canary token {canary_token(wrong[0])} at id "
                        f"{base + wrong[0]} ({len(wrong)} of {n} wrong): train with the exported tokenizer")
    if model.embed.num_embeddings < base + n:
        raise DataError(f"{where}: the model has {model.embed.num_embeddings} token rows, the canaries need "
                        f"{base + n} (resize the embedding to the exported tokenizer)")


def claimed_privacy(ft: FinetuneParams) -> PrivacyRecord:
    """The trainer's claim, with our accountant's epsilon of the stated (sigma, q, T) beside it."""
    c = ft.external.claim
    if c is None:
        return no_dp_record(None, None, external=True)
    acc = create_accountant("prv")
    acc.history = [(c.noise_multiplier, c.sample_rate, c.steps)]
    return PrivacyRecord(dp=True, external=True, claimed=True, accountant="trainer's claim",
                         epsilon_spent=c.epsilon, delta=c.delta, noise_multiplier=c.noise_multiplier,
                         sample_rate=c.sample_rate, steps=c.steps, max_grad_norm=None,
                         accountant_epsilon_of_claim=float(acc.get_epsilon(delta=c.delta)),
                         profile=privacy_profile(acc))


def import_external(run: str, ft: FinetuneParams, dataset: DatasetSpec, where: Locations, out_dir: Path,
                    device) -> RunRecord:
    ext = ft.external
    src = Path(ext.model)
    kind = model_kind(src)
    membership = read_membership(Path(ext.membership))
    meta, canaries = read_canaries(where.canaries)
    check_membership(run, ft, where, membership, canaries)
    digests = copy_model(src, out_dir / EXTERNAL_DIR)
    model, tok = load_external(out_dir / EXTERNAL_DIR, where.base_model, device)
    check_tokenizer(tok, model, meta, str(src))
    inputs = gather_inputs(ft, dataset, where, canaries, load_tokenizer(where.base_model))
    utility = mean_nll(model, inputs.evals, tok.pad_token_id)
    privacy = claimed_privacy(ft)
    record = external_record(run, ft, meta, inputs, model, device, where, utility, privacy,
                             {"model_kind": kind, "files": digests, "membership_sha256": membership["sha256"],
                              "claim": bool(privacy.claimed)})
    write_run(out_dir / "run.json", record)
    # shares of the exported set (each example once), not of a sampling schedule the pipeline did not run
    write_auditor(out_dir / AUDITOR_FILE, auditor_record(run, inputs, 1.0, 0.0, None, None, scheduled=[]))
    write_run_manifest(out_dir, inputs, None)  # which candidates the export held; its sampling we did not see
    write_timing(ft, run, {"train_seconds": None, "imported": True, "device": str(device)})
    log.info("run %s: imported an external %s model (%d files), valid ppl %.2f", run, kind, len(digests),
             utility["perplexity"] or float("nan"))
    return record
