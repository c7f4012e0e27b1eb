"""Params of ``attack@<run>`` (the ``attack`` section)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..shared.core.params import check, missing_keys, run_names


@dataclass(frozen=True)
class GenerationParams:
    """Sampled decoding for VMR/AIR (the Hugging Face defaults the paper uses)."""

    samples: int
    temperature: float
    top_k: int
    top_p: float
    air_max_new_tokens: int
    #: at most this many trained secrets (plus as many untrained ones as a control)
    max_secrets: int
    seed: int
    #: which secrets of each arm are scored when an arm holds more than max_secrets: a seeded draw (never the
    #: secrets file's order, which is by frequency)
    arm_seed: int

    def problems(self):
        return (check(self.samples > 0, "samples", "must be > 0", self.samples)
                + check(self.temperature >= 0, "temperature", "must be >= 0", self.temperature)
                + check(0 < self.top_p <= 1, "top_p", "must be in (0, 1]", self.top_p)
                + check(self.max_secrets > 0, "max_secrets", "must be > 0", self.max_secrets))


@dataclass(frozen=True)
class EIAParams:
    """Embedding inversion: auxiliary/evaluation sizes and the attacker decoder's budget."""

    aux_texts: int
    test_texts: int
    max_length: int
    width: int
    layers: int
    steps: int
    batch_size: int
    lr: float
    seed: int

    def problems(self):
        return (check(self.aux_texts > 0 and self.test_texts > 0, "aux_texts", "sizes must be > 0", self.aux_texts)
                + check(self.steps > 0, "steps", "must be > 0", self.steps)
                + check(self.width % 4 == 0, "width", "must be a multiple of 4 (attention heads)", self.width))


@dataclass(frozen=True)
class ACRParams:
    """GCG search budget for the adversarial compression ratio (off by default on CPU)."""

    max_secrets: int
    seconds_per_secret: float
    max_prompt_tokens: int
    max_target_tokens: int
    top_k: int
    candidates: int
    seed: int

    def problems(self):
        return (check(self.seconds_per_secret > 0, "seconds_per_secret", "must be > 0", self.seconds_per_secret)
                + check(self.max_prompt_tokens > 0, "max_prompt_tokens", "must be > 0", self.max_prompt_tokens)
                + check(self.candidates > 0 and self.top_k > 0, "candidates", "must be > 0", self.candidates))


@dataclass(frozen=True)
class BlindParams:
    """The model-free blind baseline (stages/attack/blind.py): stratified k-fold cross-validation."""

    folds: int
    seed: int

    def problems(self):
        return check(self.folds >= 2, "folds", "must be >= 2", self.folds)


#: the per-example membership scores (``scores.PER_EXAMPLE``), the choices of ``attack.user_score``
PER_EXAMPLE_SCORES = ("loss", "ref_ratio", "zlib", "min_k", "min_k_pp", "ez_mia")


@dataclass(frozen=True)
class AttackParams:
    out_dir: str
    #: the default list of attacks ...
    attacks: tuple[str, ...]
    #: ... and every run's own entry here (run name -> its attacks, or null: the default list). Every run has one, so
    #: each attack@<run> stage depends on its own entry only (dvc.yaml): adding a run reruns no other run's attacks
    runs: dict[str, Optional[tuple[str, ...]]]
    batch_size: int
    #: min-k%: the fraction of least likely tokens averaged
    min_k: float
    #: Min-K%++: the fraction of lowest standardised tokens averaged
    min_k_pp: float
    #: EZ-MIA: an example with fewer error positions (the fine-tuned model's top-1 token wrong) is scored over all its
    #: positions
    ez_min_errors: int
    #: user inference: the per-example score averaged over each user's attacker samples (one of PER_EXAMPLE_SCORES)
    user_score: str
    #: text MIA: at most this many training rows (and as many held-out rows); null = all trained rows
    text_items: Optional[int]
    generation: GenerationParams
    eia: EIAParams
    acr: ACRParams
    blind: BlindParams
    #: offline RMIA's a: Pr(x_t) = (1 + a)/2 * mean_k p_k(x_t) + (1 - a)/2 (Zarifzadeh et al. 2024, offline); its
    #: reference fine-tunes are the ``reference`` section's (``stages.reference.params``)
    rmia_a: float

    def problems(self):
        return (check(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
                + check(len(self.attacks) > 0, "attacks", "needs at least one attack", self.attacks)
                + check(0 < self.min_k <= 1, "min_k", "must be in (0, 1]", self.min_k)
                + check(0 < self.min_k_pp <= 1, "min_k_pp", "must be in (0, 1]", self.min_k_pp)
                + check(self.ez_min_errors >= 1, "ez_min_errors", "must be >= 1", self.ez_min_errors)
                + check(self.user_score in PER_EXAMPLE_SCORES, "user_score",
                        f"must be one of {', '.join(PER_EXAMPLE_SCORES)}", self.user_score)
                + check(self.text_items is None or self.text_items > 0, "text_items", "must be > 0",
                        self.text_items)
                + check(0 <= self.rmia_a <= 1, "rmia_a", "must be in [0, 1]", self.rmia_a))

    def relations(self, raw: dict) -> list[tuple[str, str]]:
        """Each per-run attack list names a configured run (a misspelt one would silently run the defaults), and
        every run has its entry (attack@<run> depends on attack.runs.<run>: DVC needs the key)."""
        names = run_names(raw)
        return missing_keys(self.runs, names, "attack.runs", "run in runs") + [
            (f"attack.runs.{r}", "missing: every run names its attacks here (null: the default list attack.attacks)")
            for r in names if r not in self.runs]

    def for_run(self, run: str) -> tuple[str, ...]:
        return self.runs.get(run) or self.attacks
