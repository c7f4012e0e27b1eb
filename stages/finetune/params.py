"""Params of ``finetune@<run>``: the ``finetune`` section with ``runs.<run>`` deep-merged on top."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Union

from ..shared.core.errors import ConfigError
from ..shared.core.params import PARAMS_FILE, Accountant, build, check, deep_merge, load, read_params, require_run
from ..shared.datasets import NO_SECRETS, dataset_names, secrets_of
from ..shared.lm.trainable import Trainable


@dataclass(frozen=True)
class LoraParams:
    r: int
    alpha: int
    dropout: float
    #: module names, or auto: the base model type's attention projections (peft's mapping; run.json records the
    #: resolved names)
    targets: Union[str, tuple[str, ...]]

    def problems(self):
        return check(self.r > 0, "r", "must be > 0", self.r) + check(
            0 <= self.dropout < 1, "dropout", "must be in [0, 1)", self.dropout
        ) + check(self.targets == "auto" or (isinstance(self.targets, tuple) and len(self.targets) > 0), "targets",
                  "must be auto or a non-empty list of module names", self.targets)


#: the grad-sample modes a user-level run (dp.unit: user) accepts: both clip through opacus' per-example gradients,
#: summed by user before clipping (privacy/strategies.py)
USER_MODES = ("hooks", "auto")


@dataclass(frozen=True)
class DPParams:
    enabled: bool
    epsilon: float
    #: null = n^-1.1 with n the number of training examples
    delta: Optional[float]
    max_grad_norm: float
    accountant: Accountant
    #: ghost: opacus ghost clipping (per-example gradient norms from activations and output gradients, then a
    #: second backward pass of the clipped loss; no per-example gradient is materialised) | bk: book-keeping
    #: (ghost's norm pass, then the clipped sum from that pass's activations and output gradients: one backward
    #: pass, more memory than ghost) | hooks: opacus per-example gradients (GradSampleModule), the reference
    #: both are tested against | auto: bk where every trainable module is supported, else ghost, else hooks
    grad_sample_mode: Literal["auto", "ghost", "bk", "hooks"]
    #: true: the Poisson sampler and the noise are seeded from OS entropy and opacus' secure_mode draws the noise
    #: (robust to floating-point attacks): for real deployments, where the guarantee assumes the seed is secret.
    #: false: seeded from finetune.seed (reproducible; the report says which was used)
    secure_rng: bool
    #: what the guarantee protects: example (neighbouring datasets differ in one row; Poisson sampling over rows) |
    #: user (they differ in all rows of one user: Poisson sampling over users at q = batch_size / the candidate
    #: pool's users, each sampled user's summed gradient clipped to max_grad_norm as one unit; DP only, hooks
    #: clipping, one process; the dataset's rows must name their user)
    unit: Literal["example", "user"]
    #: unit user: at most this many of a sampled user's rows per step (a seeded draw among more); <= the physical
    #: batch, as a user's rows are clipped together in one chunk
    rows_per_user: int

    def problems(self):
        return (
            check(self.epsilon > 0, "epsilon", "must be > 0", self.epsilon)
            + check(self.delta is None or 0 < self.delta < 1, "delta", "must be in (0, 1)", self.delta)
            + check(self.max_grad_norm > 0, "max_grad_norm", "must be > 0", self.max_grad_norm)
            + check(self.rows_per_user >= 1, "rows_per_user", "must be >= 1", self.rows_per_user)
            + check(self.unit == "example" or self.grad_sample_mode in USER_MODES, "unit",
                    f"user-level clipping sums a user's per-example gradients before clipping: needs "
                    f"grad_sample_mode {' or '.join(USER_MODES)}", self.grad_sample_mode)
        )

    @property
    def per_user(self) -> bool:
        """User-level DP: a DP run whose unit is the user."""
        return self.enabled and self.unit == "user"


@dataclass(frozen=True)
class SecretControlParams:
    """The randomised VMR/AIR control: a seeded coin per secret decides whether the run trains on it."""

    #: the first N of the dataset's secrets found in the run's training rows get a coin (0: no control)
    secrets: int
    seed: int

    def problems(self):
        return check(self.secrets >= 0, "secrets", "must be >= 0", self.secrets)


#: the grad-sample modes a sharded (fsdp) run accepts: both resolve to opacus' ghost_fsdp (privacy/strategies.py)
FSDP_MODES = ("ghost", "auto")


@dataclass(frozen=True)
class DistributedParams:
    """Data-parallel training on one machine: the stage relaunches itself under torchrun."""

    #: processes (one per GPU on CUDA; gloo processes on CPU); 1 = a single process, no torch.distributed
    nproc_per_node: int
    #: ddp: every process holds the whole model (opacus' distributed optimizers) | fsdp: parameters, gradients and
    #: optimizer state sharded per module across the processes (FSDP2 through opacus' ghost_fsdp clipping), for a
    #: model whose full fine-tuning does not fit one device; DP only
    strategy: Literal["ddp", "fsdp"]

    def problems(self):
        return check(self.nproc_per_node >= 1, "nproc_per_node", "must be >= 1", self.nproc_per_node)


@dataclass(frozen=True)
class DiagnosticsParams:
    """Auditor-side diagnostics of a DP run with canaries (stages/finetune/diagnostics.py)."""

    #: canaries per kind whose per-example gradient (norm, share in own rows) is measured at the initial model
    gradient_canaries: int

    def problems(self):
        return check(self.gradient_canaries >= 0, "gradient_canaries", "must be >= 0", self.gradient_canaries)


@dataclass(frozen=True)
class ClaimParams:
    """A privacy guarantee stated by whoever trained an external model: reported as their claim, never measured."""

    epsilon: float
    delta: float
    #: the DP-SGD parameters the claim rests on (the audit's ceiling is computed from them)
    sample_rate: float
    steps: int
    noise_multiplier: float

    def problems(self):
        return (check(self.epsilon > 0, "epsilon", "must be > 0", self.epsilon)
                + check(0 < self.delta < 1, "delta", "must be in (0, 1)", self.delta)
                + check(0 < self.sample_rate <= 1, "sample_rate", "must be in (0, 1]", self.sample_rate)
                + check(self.steps >= 1, "steps", "must be >= 1", self.steps)
                + check(self.noise_multiplier > 0, "noise_multiplier", "must be > 0", self.noise_multiplier))


@dataclass(frozen=True)
class ExternalParams:
    """A run trained outside the pipeline on the set ``leakaudit export-canaries`` wrote: the finetune stage
    imports the model instead of training, and attack, audit and report run on it unchanged."""

    #: a Hugging Face model directory (config.json + weights + tokenizer) or a PEFT adapter directory
    #: (adapter_config.json) over the base model, trained with the exported tokenizer
    model: str
    #: the sealed membership file the export wrote (kept by the auditor, never given to the trainer)
    membership: str
    #: the trainer's own DP claim, or null (no DP claimed)
    claim: Optional[ClaimParams]


@dataclass(frozen=True)
class FinetuneParams:
    out_dir: str
    #: where each run's timings and host facts go (<run>.json: uncached, read by no stage, so a rerun with the
    #: same inputs leaves every downstream hash as it was)
    log_dir: str
    #: processed dataset whose training split is the fine-tuning text (canaries are mixed into it)
    dataset: str
    #: the secrets file the run reads (data/secrets/<secrets>.parquet): its dataset's, or ``none`` (an empty table)
    #: where the dataset has none. Derived from ``dataset`` and checked against it; every run names it because
    #: dvc.yaml's deps can only read the run's own entry, so a new dataset's secrets rerun no other run
    secrets: str
    objective: Literal["sft", "nwp"]
    #: lora | full (every decoder weight; the embedding too with train_embeddings) | prompt | prefix
    paradigm: Literal["lora", "full", "prompt", "prefix"]
    lora: LoraParams
    #: soft-prompt length (paradigm prompt) or key/value prefix length (paradigm prefix)
    virtual_tokens: int
    #: every vocabulary token a canary (any kind, member or not) uses as its secret gets its own trainable
    #: input and output row, as new tokens do: all canary kinds train the same parameters for their secrets
    secret_rows: bool
    #: also train the input embedding and the output head; a tied matrix is untied into two trainable copies
    #: (both start from it), as a weight shared by two modules cannot be clipped per example module by module
    train_embeddings: bool
    dp: DPParams
    #: adamw/adam (DP-Adam under DP) or sgd (DP-SGD under DP)
    optimizer: Literal["adamw", "adam", "sgd"]
    momentum: float
    steps: int
    #: q = batch_size / the candidate pool (text rows, formatted canaries and every canary of the run's kinds,
    #: member or not), so q does not depend on the membership draw; q * (pool actually trained on) are drawn per step
    batch_size: int
    #: set to fix q directly instead (then batch_size is ignored)
    sample_rate: Optional[float]
    #: at most this many examples per forward pass (memory bound)
    physical_batch_size: int
    lr: float
    weight_decay: float
    #: non-DP runs clip the averaged gradient at this norm (seed A.1); DP uses dp.max_grad_norm
    clip_norm: float
    max_length: int
    #: number of training rows of the dataset mixed with the member canaries
    max_text_rows: int
    #: held-out rows of the dataset's evaluation split scored for utility
    eval_rows: int
    #: insert the member canaries (false: train on the dataset alone, e.g. a user-inference run)
    canaries: bool
    #: also insert the user-level audit's canary users (canaries.audit_users: k rows each, one coin per user): the
    #: model gets their new-token rows; each user's rows one unit under user-level DP, k examples under example-level
    user_canaries: bool
    secret_control: SecretControlParams
    #: poisson: member canaries are examples like any other (each step includes each w.p. q);
    #: repetitions: each member canary is added to exactly canary_repetitions steps drawn at random
    #: (a deterministic exposure count; not covered by the DP accountant, so refused with DP)
    canary_insertion: Literal["poisson", "repetitions"]
    canary_repetitions: int
    seed: int
    device: Literal["auto", "cpu", "cuda"]
    distributed: DistributedParams
    #: save a resumable checkpoint every k steps (0 = never); a rerun with the same inputs resumes
    checkpoint_every: int
    checkpoint_dir: str
    diagnostics: DiagnosticsParams
    #: null: the pipeline trains the run; else the run was trained elsewhere (leakaudit export-canaries)
    external: Optional[ExternalParams]

    def problems(self):
        return (
            check(self.external is None or not self.dp.enabled, "external",
                  "an external run is not trained here: state its DP guarantee in external.claim, not dp.enabled",
                  self.dp.enabled)
            + check(self.external is None or self.distributed.nproc_per_node == 1, "external",
                    "an external run is imported, not trained: needs distributed.nproc_per_node: 1",
                    self.distributed.nproc_per_node)
            + check(self.distributed.strategy != "fsdp" or self.distributed.nproc_per_node >= 2, "distributed.strategy",
                    "fsdp shards the model across processes: needs distributed.nproc_per_node >= 2",
                    self.distributed.nproc_per_node)
            + check(self.distributed.strategy != "fsdp" or self.dp.enabled, "distributed.strategy",
                    "fsdp is built for DP runs (opacus' ghost_fsdp clipping): needs dp.enabled: true, or use ddp",
                    self.dp.enabled)
            + check(self.distributed.strategy != "fsdp" or self.dp.grad_sample_mode in FSDP_MODES,
                    "distributed.strategy", "fsdp clips through opacus' ghost_fsdp: needs dp.grad_sample_mode "
                    f"{' or '.join(FSDP_MODES)}", self.dp.grad_sample_mode)
            + check(self.dp.unit == "example" or self.dp.enabled, "dp.unit",
                    "user is a DP mechanism (user-level clipping and accounting): needs dp.enabled: true",
                    self.dp.unit)
            + check(not self.dp.per_user or self.distributed.nproc_per_node == 1, "dp.unit",
                    "user-level DP runs in one process: needs distributed.nproc_per_node: 1",
                    self.distributed.nproc_per_node)
            + check(not self.dp.per_user or self.dp.rows_per_user <= self.physical_batch_size, "dp.rows_per_user",
                    f"a user's rows are clipped together in one chunk: must be <= physical_batch_size "
                    f"({self.physical_batch_size})", self.dp.rows_per_user)
            + check(self.external is None or not self.user_canaries, "user_canaries",
                    "the audit users are trained here (export-canaries does not hand them out): needs no external",
                    self.user_canaries)
            + check(self.external is None or self.canaries, "external",
                    "an external run audits the exported canaries: needs canaries: true", self.canaries)
            + check(self.steps > 0, "steps", "must be > 0", self.steps)
            + check(self.sample_rate is None or 0 < self.sample_rate <= 1, "sample_rate", "must be in (0, 1]",
                    self.sample_rate)
            + check(self.virtual_tokens > 0, "virtual_tokens", "must be > 0", self.virtual_tokens)
            + check(0 <= self.momentum < 1, "momentum", "must be in [0, 1)", self.momentum)
            + check(self.checkpoint_every >= 0, "checkpoint_every", "must be >= 0", self.checkpoint_every)
            + check(1 <= self.canary_repetitions <= self.steps, "canary_repetitions", "must be in [1, steps]",
                    self.canary_repetitions)
            + check(not (self.dp.enabled and self.canary_insertion == "repetitions"), "canary_insertion",
                    "'repetitions' is a fixed schedule the DP accountant (Poisson sampling) does not cover; use "
                    "'poisson' with DP", self.canary_insertion)
            + check(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
            + check(self.physical_batch_size > 0, "physical_batch_size", "must be > 0", self.physical_batch_size)
            + check(self.lr > 0, "lr", "must be > 0", self.lr)
            + check(self.clip_norm > 0, "clip_norm", "must be > 0", self.clip_norm)
            + check(self.max_length >= 8, "max_length", "must be >= 8", self.max_length)
            + check(self.max_text_rows >= 0, "max_text_rows", "must be >= 0", self.max_text_rows)
            + check(self.eval_rows >= 0, "eval_rows", "must be >= 0", self.eval_rows)
        )

    def relations(self, raw: dict) -> list[tuple[str, str]]:
        return dataset_problem(self, raw, "finetune")

    def new_tokens(self, canary_meta: dict) -> int:
        """The run's new-token rows: the canary kinds', then with ``user_canaries`` one per audit user."""
        if self.user_canaries and "audit_users" not in canary_meta:
            raise ConfigError("finetune.user_canaries: the canaries stage made no audit users "
                              "(canaries.audit_users.enabled: false)")
        return canary_meta["num_new_tokens"] + (canary_meta["audit_users"]["new_tokens"] if self.user_canaries else 0)

    def trainable(self, canary_meta: dict) -> Trainable:
        """The model this run trains (recorded in run.json so the attack stage rebuilds it), from the
        canaries' meta.json: its new tokens (``new_tokens``) and, with ``secret_rows``, the vocabulary secret
        tokens."""
        rows = tuple(canary_meta["secret_token_ids"]) if self.secret_rows and self.canaries else ()
        return Trainable(paradigm=self.paradigm, lora_r=self.lora.r, lora_alpha=self.lora.alpha,
                         lora_dropout=self.lora.dropout, lora_targets=self.lora.targets,
                         virtual_tokens=self.virtual_tokens, num_new_tokens=self.new_tokens(canary_meta),
                         new_token_init=canary_meta["new_token_init"], secret_rows=rows,
                         train_embeddings=self.train_embeddings)


def dataset_problem(ft: FinetuneParams, raw: dict, prefix: str) -> list[tuple[str, str]]:
    """``<prefix>.dataset`` names a registered dataset or one the params ``raw`` declare, and ``<prefix>.secrets``
    names that dataset's secrets (``NO_SECRETS`` where it has none)."""
    known = dataset_names(raw)
    if ft.dataset not in known:
        return check(False, f"{prefix}.dataset", f"must be a dataset ({', '.join(known)})", ft.dataset)
    want = secrets_of(ft.dataset, raw)
    return check(ft.secrets == want, f"{prefix}.secrets",
                 f"must be {want!r}, the secrets of dataset {ft.dataset!r}"
                 + (" (it has no secrets.datasets entry)" if want == NO_SECRETS else ""), ft.secrets)


def load_finetune(run: str, path: str | Path = PARAMS_FILE, raw: dict | None = None) -> FinetuneParams:
    """``finetune`` with ``runs.<run>`` deep-merged on top; errors name the key where it was set."""
    raw = read_params(path) if raw is None else raw
    load(FinetuneParams, "finetune", path, raw)  # the shared section alone: its errors say finetune.*
    require_run(raw, run, path)
    try:  # the shared section is valid, so any error now comes from the run's override
        ft = build(FinetuneParams, deep_merge(raw.get("finetune") or {}, raw["runs"][run] or {}), f"runs.{run}")
        for key, msg in dataset_problem(ft, raw, f"runs.{run}"):
            raise ConfigError(f"{key}: {msg}")
        return ft
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
