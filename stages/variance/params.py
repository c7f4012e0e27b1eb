"""Params of the empirical-privacy-variance study (the ``variance`` section): the sweep the Prefect flow runs
(``variance.sweep``, read by flows/variance.py) and the analysis stage (the rest, read by ``python -m
stages.variance``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..shared.core.params import check, run_names, section_of


@dataclass(frozen=True)
class GridParams:
    """The hyperparameter grid (every combination is one configuration, each calibrated to every epsilon)."""

    batch_size: tuple[int, ...]
    steps: tuple[int, ...]
    lr: tuple[float, ...]

    def problems(self):
        return (check(len(self.batch_size) > 0 and all(b > 0 for b in self.batch_size), "batch_size",
                      "needs at least one value, each > 0", self.batch_size)
                + check(len(self.steps) > 0 and all(t > 0 for t in self.steps), "steps",
                        "needs at least one value, each > 0", self.steps)
                + check(len(self.lr) > 0 and all(x > 0 for x in self.lr), "lr", "needs at least one value, each > 0",
                        self.lr))


@dataclass(frozen=True)
class ClusterParams:
    """Where the points run: a Dask scheduler address, or (null) a LocalCluster of this many worker processes. A
    worker runs one point at a time; ``threads_per_worker`` is that point's torch/OMP thread count."""

    address: str | None
    workers: int
    threads_per_worker: int

    def problems(self):
        return (check(self.workers > 0, "workers", "must be > 0", self.workers)
                + check(self.threads_per_worker > 0, "threads_per_worker", "must be > 0", self.threads_per_worker))


@dataclass(frozen=True)
class SweepParams:
    """One DVC experiment per (epsilon, configuration, seed), each run in its own clone on a Dask worker."""

    name: str
    epsilons: tuple[float, ...]
    delta: float | None              # null: each run's own default delta = n^-1.1
    grid: GridParams
    seeds: tuple[int, ...]
    run: dict[str, Any]              # finetune overrides shared by every point (deep-merged over `finetune`)
    attacks: tuple[str, ...]         # the attacks each point runs (its attack.runs entry)
    targets: tuple[str, ...]         # the DVC stages each experiment reproduces (with their upstream)
    cluster: ClusterParams
    retries: int                     # a failed point is retried this many times, then recorded as failed
    diverged_loss: float             # a point whose validation loss is above this (or not finite) is recorded as failed
    work_dir: str                    # local default remotes live here (gitignored)
    git_remote: str | None           # null: a bare repo <work_dir>/remote.git created by the flow
    dvc_remote: str | None           # null: a local DVC remote <work_dir>/dvc-remote created by the flow
    worker_dir: str | None           # where a worker makes its clones; null: a temporary directory on the worker
    keep_clones: bool

    def problems(self):
        return (check(bool(self.name.strip()) and self.name.replace("-", "").replace("_", "").isalnum(), "name",
                      "must be letters, digits, - or _", self.name)
                + check(len(self.epsilons) > 0 and all(e > 0 for e in self.epsilons), "epsilons",
                        "needs at least one value, each > 0", self.epsilons)
                + check(self.delta is None or 0 < self.delta < 1, "delta", "must be null or in (0, 1)", self.delta)
                + check(len(self.seeds) > 0 and len(set(self.seeds)) == len(self.seeds), "seeds",
                        "needs at least one, no repeats", self.seeds)
                + check(len(self.attacks) > 0, "attacks", "needs at least one attack", self.attacks)
                + check(len(self.targets) > 0, "targets", "needs at least one DVC stage", self.targets)
                + check(self.retries >= 0, "retries", "must be >= 0", self.retries)
                + check(self.diverged_loss > 0, "diverged_loss", "must be > 0", self.diverged_loss)
                + check(not {"batch_size", "steps", "lr", "seed", "dp"} & set(self.run), "run",
                        "must not set batch_size, steps, lr, seed or dp (the sweep sets them per point)",
                        sorted(set(self.run))))


@dataclass(frozen=True)
class StudyConfig:
    """One configuration of the study: DP fine-tuning hyperparameters (sigma: the accountant's, for epsilon)."""

    batch_size: int
    steps: int
    lr: float

    def problems(self):
        return (check(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
                + check(self.steps > 0, "steps", "must be > 0", self.steps)
                + check(self.lr > 0, "lr", "must be > 0", self.lr))


#: what a study model's row holds that Q1 and Q2 may name (stages.variance.study)
STUDY_MEASURES = ("eps_lb_95", "gdp_eps_lb_95", "member_shift")
STUDY_AGAINST = ("valid_perplexity", "vmr", "air", "acr", "exposure")


@dataclass(frozen=True)
class StudyParams:
    """The pre-registered Q1 / Q2 study (stages/variance/study.py): configurations x fresh seeds of one canary-bearing
    recipe at one (epsilon, delta), and the analysis, all fixed before the first model is trained."""

    table: str                       # one row per model (git-tracked; the variance stage's input)
    run: str                         # the canary-bearing recipe each configuration varies (runs.<run>)
    epsilon: float
    delta: float                     # fixed, never n^-1.1 (which allows near-disclosure of a row at small n)
    configs: dict[str, StudyConfig]
    seeds: tuple[int, ...]           # each seed: its own canary draw and coins, text sample, sampler and noise
    measures: tuple[str, ...]        # Q1's measures: the first its one test (at alpha), the others secondary
    q2_against: tuple[str, ...]      # Q2: Spearman of the first measure with each of these
    alpha: float
    bootstrap: int                   # resamples of the models for each Spearman interval
    power_trials: int                # simulated studies for the Q1 power under the ideal
    seed: int                        # the bootstrap's and the power simulation's

    def problems(self):
        return (check(len(self.configs) >= 2, "configs", "needs at least two configurations", sorted(self.configs))
                + check(len(self.seeds) >= 2 and len(set(self.seeds)) == len(self.seeds), "seeds",
                        "needs at least two, no repeats", self.seeds)
                + check(self.epsilon > 0, "epsilon", "must be > 0", self.epsilon)
                + check(0 < self.delta < 1, "delta", "must be in (0, 1)", self.delta)
                + check(len(self.measures) > 0 and set(self.measures) <= set(STUDY_MEASURES), "measures",
                        f"needs at least one of {', '.join(STUDY_MEASURES)}", self.measures)
                + check(set(self.q2_against) <= set(STUDY_AGAINST), "q2_against",
                        f"each one of {', '.join(STUDY_AGAINST)}", self.q2_against)
                + check(0 < self.alpha < 1, "alpha", "must be in (0, 1)", self.alpha)
                + check(self.bootstrap >= 100, "bootstrap", "must be >= 100", self.bootstrap)
                + check(self.power_trials >= 0, "power_trials", "must be >= 0", self.power_trials))

    def registered(self, raw: dict) -> list[tuple[str, str]]:
        """The recipe is a configured run, and every seed was registered as fresh (audit.seeds.preregistered), never
        a development seed. Checked on the project's params by a test (the flow that will train the study must
        check it too; it is not written yet), not on every derived params file (a sweep point or a test's project
        drops runs and seeds the study names)."""
        return registered(self, raw, "variance.study")


@dataclass(frozen=True)
class SilentConfig(StudyConfig):
    """One setting of the second study: the first study's hyperparameters and the optimizer (DP-SGD or DP-Adam(W)),
    which the accountant does not see."""

    optimizer: Literal["adamw", "adam", "sgd"]


#: what the second study's primary and secondary measures may name (a study model's row)
SILENT_MEASURES = ("v", "member_shift", "eps_lb_95")


@dataclass(frozen=True)
class SilentParams:
    """The second pre-registered study (stages/variance/paired.py): at one (q, T, sigma), so one ideal audit, settings
    the accountant does not see (learning rate, optimizer), each model paired by seed with the base setting's; the
    primary test of each setting is Wilcoxon's signed-rank test of its paired difference from the base in the
    primary measure, Holm-corrected over the settings. Fixed, with its analysis, before the first model."""

    table: str                       # one row per model (git-tracked; the variance stage's input)
    plan: str                        # the design's power statement, written before the first model (git-tracked)
    run: str                         # the canary-bearing recipe (runs.<run>) every setting varies
    epsilon: float
    delta: float
    configs: dict[str, SilentConfig]  # the settings; all at one batch size and step count (one q, T and sigma)
    base: str                        # the setting every other is compared with
    seeds: tuple[int, ...]           # each seed: one model of every setting (its canary draw, coins, sampler, noise)
    measure: str                     # the primary measure (v: correct "in" guesses of the primary rule)
    secondary: tuple[str, ...]       # reported with the same paired test, no verdict
    alpha: float                     # family-wise level over the settings (Holm)
    effect: float                    # the stated effect in the primary measure that the power statement is for
    power_trials: int                # simulated studies for that power
    seed: int                        # the power simulation's

    @property
    def q2_against(self) -> tuple[str, ...]:
        """The flow's study interface: the second study scores no Q2 measure (its models run the primary attack)."""
        return ()

    def problems(self):
        shapes = {(c.batch_size, c.steps) for c in self.configs.values()}
        return (check(len(self.configs) >= 3, "configs", "needs the base and at least two other settings",
                      sorted(self.configs))
                + check(self.base in self.configs, "base", "must name one of configs", self.base)
                + check(len(shapes) == 1, "configs", "must share one batch_size and steps (one q, T and sigma)",
                        sorted(shapes))
                + check(len(self.seeds) >= 8 and len(set(self.seeds)) == len(self.seeds), "seeds",
                        "needs at least eight, no repeats", self.seeds)
                + check(self.epsilon > 0, "epsilon", "must be > 0", self.epsilon)
                + check(0 < self.delta < 1, "delta", "must be in (0, 1)", self.delta)
                + check(self.measure in SILENT_MEASURES, "measure", f"one of {', '.join(SILENT_MEASURES)}",
                        self.measure)
                + check(set(self.secondary) <= set(SILENT_MEASURES), "secondary",
                        f"each one of {', '.join(SILENT_MEASURES)}", self.secondary)
                + check(0 < self.alpha < 1, "alpha", "must be in (0, 1)", self.alpha)
                + check(self.effect > 0, "effect", "must be > 0", self.effect)
                + check(self.power_trials >= 0, "power_trials", "must be >= 0", self.power_trials))

    def registered(self, raw: dict) -> list[tuple[str, str]]:
        return registered(self, raw, "variance.silent")


def registered(study, raw: dict, key: str) -> list[tuple[str, str]]:
    """A study's recipe is a configured run, and every seed was registered as fresh (audit.seeds.preregistered),
    never a development seed."""
    missing = sorted(set(study.seeds) - set(section_of(raw, "audit.seeds.preregistered") or ()))
    used = sorted(set(study.seeds) & set(section_of(raw, "audit.seeds.development") or ()))
    return ([(f"{key}.run", f"no such run in runs ({study.run!r})")] if study.run not in run_names(raw) else []) \
        + ([(f"{key}.seeds", f"must stand in audit.seeds.preregistered (missing {missing})")] if missing else []) \
        + ([(f"{key}.seeds", f"must not be development seeds ({used})")] if used else [])


@dataclass(frozen=True)
class VarianceParams:
    """The analysis stage: reads the sweep table, writes the analysis (JSON) and its plots."""

    table: str                       # the sweep table flows/variance.py writes (git-tracked; this stage's input)
    out_dir: str
    measure: Literal["vmr", "air"]   # the empirical privacy score (a memorization attack every point runs)
    primary: Literal["mean", "max"]  # mean (section 3) or max (worst case, App. F) over the curated secrets
    min_points: int                  # fewer completed points at an epsilon: regressions are skipped
    #: the control test's level (Bonferroni over the target epsilons), fixed before the points: regressions,
    #: heuristic accuracies and the Algorithm-1 selection of a statistic are computed only where it passes
    control_alpha: float
    sweep: SweepParams
    study: StudyParams
    silent: SilentParams

    def problems(self):
        return (check(self.min_points >= 3, "min_points", "must be >= 3", self.min_points)
                + check(0 < self.control_alpha < 1, "control_alpha", "must be in (0, 1)", self.control_alpha))
