"""The public contract of a fine-tuned run (data/models/<run>/), read by the attack, audit and report stages.

* ``run.json``: a ``RunRecord`` (versioned), written and read only through ``write_run``/``read_run``;
  ``trainable`` describes the model (``stages.shared.lm.trainable.Trainable``), ``params`` the finetune params
  the run used, ``privacy`` the run's privacy record (written once, here);
* ``manifest.parquet`` (``MANIFEST``, versioned): the facts of the run's membership game, written by the
  fine-tune and read through ``read_manifest``: every candidate (text pairs, token and secret-sharer canaries,
  users, real secrets), whether the run trained on it, and how many steps sampled it;
* ``trainable.safetensors`` (and ``adapter/`` for LoRA): the trained tensors;
* ``train_log.jsonl``: per-step training records (no timings);
* ``external/``: instead of the trained tensors, the imported model of a run trained elsewhere
  (``stages.finetune.external``).

Timings and host facts are not here (they would change the run's hash without its inputs changing): they go to
``finetune.log_dir``/<run>.json (``TIMING_FILE``), which no stage reads.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..shared.core.errors import DataError
from ..shared.core.io import read_json, read_table, write_json, write_table
from ..shared.core.records import read_record, record, record_json
from ..shared.lm.spec import Trainable

RUN_VERSION = 9  # what a reader refuses when it differs (the history of the versions: git log -L of this line)
RUN_FILE = "run.json"
#: the run's auditor-only record (member counts and member-only statistics): never part of a released model
AUDITOR_FILE = "auditor.json"
MANIFEST_FILE = "manifest.parquet"
MANIFEST_VERSION = 1
TIMING_FILE = "{run}.json"  # in finetune.log_dir: train_seconds, per-step seconds, resumed_from_step (uncached)
#: what a manifest row's ``source`` may be
SOURCES = ("text", "canary", "formatted", "user", "secret")

#: one candidate of the run's membership game per row (``read_manifest``)
MANIFEST = pa.schema([
    pa.field("source", pa.string(), nullable=False),  # one of SOURCES
    pa.field("candidate_id", pa.string(), nullable=False),  # unique within its source (canary_id, secret_id, user)
    pa.field("group", pa.string(), nullable=False),  # text; canary kind; format; users | canary_users; secret kind
    pa.field("member", pa.bool_(), nullable=False),  # the run trained on it (users: held in; secrets: trained arm)
    pa.field("rank", pa.int32(), nullable=False),  # order within the source (text: draw order; a prefix is a draw)
    pa.field("inclusions", pa.int32(), nullable=True),  # steps that sampled it (null: not trained here / untracked)
    pa.field("prompt", pa.string(), nullable=True),  # text candidates: the pair trained on or held out
    pa.field("target", pa.string(), nullable=True),
], metadata={"manifest_version": str(MANIFEST_VERSION)})
EXTERNAL_DIR = "external"  # the imported model of a run trained elsewhere


@dataclass(frozen=True)
class PrivacyRecord:
    """A run's privacy record (run.json ``privacy``; the audit copies it into metrics.json): public quantities only.

    Every run has ``dp``, ``epsilon_spent`` (inf without DP), ``sample_rate`` and ``steps`` (None: an external run
    with no claim). A DP run trained here fills the mechanism's fields; a trainer's claim (``claimed``) fills its
    stated (epsilon, delta, sigma, q, T) and our accountant's epsilon of them. ``to_json`` leaves out the fields a
    run of its kind does not have (None), except those whose null is a statement: ``sharding`` of a run trained
    here (single process), ``max_grad_norm`` of a claim (unknown)."""

    dp: bool
    epsilon_spent: float
    sample_rate: float | None
    steps: int | None
    target_epsilon: float | None = None
    delta: float | None = None
    noise_multiplier: float | None = None
    max_grad_norm: float | None = None
    accountant: str | None = None  # prv | rdp; a claim: "trainer's claim"
    #: q x n_population, over all processes: what the noisy clipped sum is divided by (public; never q x n, the
    #: expected drawn batch, which is the auditor's: auditor.json ``expected_drawn_batch``)
    public_divisor: float | None = None
    optimizer: str | None = None
    grad_sample_mode: str | None = None
    world_size: int | None = None
    sharding: str | None = None  # ddp | fsdp | None (one process)
    #: noise (and the sampler) from OS entropy with opacus' secure_mode; False: seeded by finetune.seed (the guarantee
    #: then assumes the seed is secret); None: not trained here (a trainer's claim)
    secure_rng: bool | None = None
    #: what the guarantee protects (a DP run trained here): example (neighbouring datasets differ in one row) | user
    #: (they differ in all rows of one user: users Poisson-sampled at ``sample_rate``, a user's summed gradient
    #: clipped to ``max_grad_norm``, ``public_divisor`` = q x the candidate pool's users)
    unit: str | None = None
    rows_per_user: int | None = None  # unit user: the most rows of a sampled user a step trains on
    grad_sample_mode_requested: str | None = None
    grad_sample_mode_reason: str | None = None
    accounted_steps: int | None = None
    accountant_history: list | None = None  # [sigma, q, steps] as the accountant booked them
    profile: list | None = None  # [{delta, epsilon}] of the accountant
    external: bool | None = None  # an imported run (finetune.external)
    claimed: bool | None = None  # the record is the trainer's claim, not measured
    accountant_epsilon_of_claim: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            when = _NULL_MEANS.get(f.name)
            if value is not None or f.name in _ALWAYS or (when is not None and getattr(self, when) is not None):
                out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "privacy") -> "PrivacyRecord":
        """The record of ``data`` (run.json's ``privacy``, or its copy in metrics.json); an unknown key is refused."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise DataError(f"{where}: unknown privacy key {unknown[0]!r} (a record of another version?)")
        eps = data.get("epsilon_spent")
        return cls(**{**data, "epsilon_spent": math.inf if eps in ("inf", None) else float(eps)})

    @property
    def rng_label(self) -> str:
        """How the run's noise was drawn, in words (the report's training table)."""
        if self.secure_rng is None:
            return "the trainer's"
        return "secure (OS entropy, opacus secure_mode)" if self.secure_rng else "seeded (finetune.seed)"


#: fields every privacy record writes; fields written as null when another is set (a statement, not an absence)
_ALWAYS = ("dp", "epsilon_spent", "sample_rate", "steps")
_NULL_MEANS = {"sharding": "world_size", "max_grad_norm": "claimed"}


def no_dp_record(sample_rate: float | None, steps: int | None, external: bool | None = None) -> PrivacyRecord:
    """The privacy record of a run without a DP guarantee."""
    return PrivacyRecord(dp=False, epsilon_spent=math.inf, sample_rate=sample_rate, steps=steps, external=external)


@record
class Valid:
    """The validation split's utility (the run's own held-out rows)."""

    rows: int
    tokens: int
    nll: float | None
    perplexity: float | None


@record
class RunRecord:
    """run.json: public quantities only (member counts and member-only statistics: ``AuditorRecord``)."""

    version: int
    run: str
    #: the finetune params the run used (finetune deep-merged with runs.<run>, as FinetuneParams validated them)
    params: dict[str, Any]
    trainable: Trainable  # as built: LoRA targets "auto" resolved (lm.trainable.build_model)
    device: str
    world_size: int  # data-parallel processes that trained it (finetune.distributed)
    base_model: dict[str, Any]  # data/models/base/source.json
    num_new_tokens: int
    new_token_init: str
    n_population: int  # q = batch_size / n_population: the pool with every canary, member or not (public)
    has_canaries: bool  # trained with member canaries (finetune.canaries)
    has_formatted: bool  # trained with the formatted canary rows
    canary_users: list[str]
    secret_control: dict[str, Any] | None  # finetune.text.secret_control's record (None: no randomised control)
    sample_rate: float | None  # None: an external run with no claim
    steps: int | None
    expected_exposures_per_member: float | None
    canary_insertion: str
    trainable_parameters: int
    final_loss: float | None  # DP runs: none (loop.dp_record)
    valid: Valid
    privacy: PrivacyRecord
    #: a run trained elsewhere (finetune.external): model_kind (hf | peft), files (path -> sha-256 of the imported
    #: copy in external/), membership_sha256, claim (whether the privacy record is the trainer's claim); else None
    external: dict[str, Any] | None


@record
class AuditorRecord:
    """auditor.json: what only the auditor may see of a run (functions of who is a member). Beside the weights and
    manifest.parquet in the run's directory; ``leakaudit release`` leaves it out, as it leaves the manifest."""

    version: int
    run: str
    n_examples: int  # the Poisson-sampled pool: text rows, formatted and member canaries (the member count)
    n_text_rows: int
    n_member_canaries: dict[str, int]  # kind -> member canaries inserted
    n_formatted_rows: int
    canary_share_of_tokens: float
    formatted_canary_share_of_tokens: float
    canary_share_of_loss_tokens: float
    formatted_canary_share_of_loss_tokens: float
    #: q x n_examples: the expected drawn batch (private: n counts members; the public divisor is q x n_population,
    #: privacy.public_divisor)
    expected_drawn_batch: float | None
    #: the canaries' gradient diagnostics per kind (finetune.diagnostics; DP runs, else None)
    canary_gradients: dict[str, dict[str, Any]] | None


def _read_record(path: Path, cls: type, run: str, what: str):
    data = read_json(path, f"finetune@{run}")
    version = data.get("version") if isinstance(data, dict) else None
    if version != RUN_VERSION:
        raise DataError(f"{path}: {what} version {version!r}, expected {RUN_VERSION} "
                        f"(regenerate it: dvc repro finetune@{run})")
    return read_record(cls, data, str(path))


def write_auditor(path: Path, record: AuditorRecord) -> None:
    write_json(path, record_json(record))


def read_auditor(run_dir: Path, run: str | None = None) -> AuditorRecord:
    """auditor.json of a fine-tuned run (the auditor-only record)."""
    return _read_record(Path(run_dir) / AUDITOR_FILE, AuditorRecord, run or Path(run_dir).name, "auditor record")


def write_run(path: Path, record: RunRecord) -> None:
    write_json(path, record_json(record))


def read_run(run_dir: Path, run: str | None = None) -> RunRecord:
    """run.json of a fine-tuned run; a missing file names the stage to run, another version is refused."""
    return _read_record(Path(run_dir) / RUN_FILE, RunRecord, run or Path(run_dir).name, "run record")


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


def write_manifest(run_dir: Path, rows: list[dict]) -> None:
    """The run's manifest; a row with an unknown source or a repeated (source, candidate_id) is refused."""
    bad = sorted({r["source"] for r in rows} - set(SOURCES))
    if bad:
        raise ValueError(f"manifest: unknown source {bad[0]!r}")
    keys = [(r["source"], r["candidate_id"]) for r in rows]
    if len(set(keys)) != len(keys):
        raise ValueError("manifest: a candidate appears twice")
    write_table(pa.Table.from_pylist(rows, schema=MANIFEST), Path(run_dir) / MANIFEST_FILE, MANIFEST)


def read_manifest(run_dir: Path, source: str | None = None) -> list[dict]:
    """The rows of a run's manifest (of one ``source``), in rank order; another version is refused."""
    path = Path(run_dir) / MANIFEST_FILE
    table = read_table(path, MANIFEST, f"finetune@{Path(run_dir).name}")
    version = (pq.read_schema(path).metadata or {}).get(b"manifest_version", b"").decode()
    if version != str(MANIFEST_VERSION):
        raise DataError(f"{path}: manifest version {version or None!r}, expected {MANIFEST_VERSION} "
                        f"(rerun the finetune@{Path(run_dir).name} stage)")
    rows = [r for r in table.to_pylist() if source is None or r["source"] == source]
    return sorted(rows, key=lambda r: (SOURCES.index(r["source"]), r["rank"]))
