"""Can the instruments see? The positive control of every instrument but the canary audit (which has its own: the
non-DP run's 300 of 300): non-DP full fine-tunes trained until they memorise, one run per checkpoint, every
instrument at each on the default run's pools, and the DP counterpart at the last checkpoint's recipe and steps.

The design (studies.yaml ``positive_control``) is fixed before its runs: the checkpoints (epochs, q T), the recipe
every run shares, the DP counterpart's (epsilon, delta), the seed, per dataset its pools, attacks and q, and the
predictions, each stated in words before any run; ``verdicts`` reads each prediction's rule. One experiment per
dataset (presets/positive_control.args drops the default runs; ``study_overrides`` adds the study's).

A checkpoint is a run of its own from the base model at the design's seed: Poisson sampling from the run's sampler
stream and a constant learning rate, so the first steps of a longer run draw the same batches as a shorter one's.
"""
from __future__ import annotations

from typing import Any

from ...audit.schema import Metrics, instrument_rows
from ...shared.core.errors import ConfigError
from ...shared.datasets import secrets_of
from ...shared.studies.positive_control import (  # noqa: F401  (the design's params: read here and by the flow)
    AT,
    INSTRUMENTS,
    MEMORIZATION,
    PREDICTIONS,
    Check,
    Checkpoint,
    Experiment,
    PositiveControlParams,
    Prediction,
    PredictionVerdict,
    RowAt,
    UsersLoss,
)
from ...shared.studies.rows import TEXT_ATTACKS, AurocRow


def run_name(dataset: str, checkpoint: int | str) -> str:
    """``pc_<dataset>_e<epochs>``, or ``pc_<dataset>_dp`` for the DP counterpart."""
    return f"pc_{dataset}_{'dp' if checkpoint == 'dp' else f'e{checkpoint}'}"


def steps_of(design: PositiveControlParams, dataset: str, epochs: int) -> int:
    return epochs * design.datasets[dataset]["steps_per_epoch"]


def checkpoints_of(design: PositiveControlParams) -> tuple[int | str, ...]:
    """The design's checkpoints: its epochs, then ``"dp"`` where it has a DP counterpart."""
    return (*design.epochs, *(("dp",) if design.dp else ()))


def runs_of(design: PositiveControlParams, dataset: str, raw: dict) -> dict[str, dict]:
    """run name -> its overrides of ``finetune``: one per checkpoint, then the DP counterpart where the design has one
    (``raw``: the params that declare the dataset, for the secrets file its runs name)."""
    spec = design.datasets[dataset]
    base = {**design.recipe, **spec["run"], "dataset": dataset, "secrets": secrets_of(dataset, raw),
            "seed": design.seed, "sample_rate": 1.0 / spec["steps_per_epoch"]}
    out = {run_name(dataset, e): {**base, "steps": steps_of(design, dataset, e)} for e in design.epochs}
    if design.dp:
        out[run_name(dataset, "dp")] = {**base, "steps": steps_of(design, dataset, design.epochs[-1]),
                                        "dp": {"enabled": True, **design.dp}}
    return out


def _hydra(value: Any) -> str:
    """A value in Hydra's override grammar (flow-style, unquoted keys)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _leaves(prefix: str, mapping: dict) -> list[str]:
    """``++<prefix>.<dotted key>=<value>`` for each leaf of ``mapping`` (a nested mapping's leaves one by one)."""
    out = []
    for k, v in mapping.items():
        out += _leaves(f"{prefix}.{k}", v) if isinstance(v, dict) and v else [f"++{prefix}.{k}={_hydra(v)}"]
    return out


def study_overrides(design: PositiveControlParams, dataset: str, raw: dict) -> list[str]:
    """The design's overrides of one dataset's experiment (after the preset's): the dataset's preprocessing where the
    design overrides it and the attack section's (each leaf on its own, so the other keys stay), its runs and their
    attacks."""
    if dataset not in design.datasets:
        raise ConfigError(f"--dataset {dataset}: the design's datasets are {sorted(design.datasets)} (studies.yaml "
                          f"positive_control.datasets)")
    spec = design.datasets[dataset]
    attacks = _hydra(list(spec["attacks"]))
    prep = (_leaves(f"preprocess.datasets.{dataset}", spec.get("preprocess") or {})
            + _leaves("attack", spec.get("attack") or {}))
    return prep + [line for run, over in runs_of(design, dataset, raw).items()
                   for line in (f"++runs.{run}={_hydra(over)}", f"++attack.runs.{run}={attacks}")]


CONFIRMED, NOT_CONFIRMED, NOT_MEASURED = PredictionVerdict


def users_loss(user_scores: list[dict]) -> UsersLoss:
    """The held-in and held-out users' mean loss (nats per token) over the attacker's samples, from the ``loss``
    attack's per-user scores (a user's mean log-likelihood), and the user-level generalisation gap: held-out minus
    held-in."""
    held_in = [-u["score"] for u in user_scores if u["member"]]
    held_out = [-u["score"] for u in user_scores if not u["member"]]
    users = (len(held_in), len(held_out))
    if not held_in or not held_out:
        return UsersLoss(held_in=None, held_out=None, gap=None, users=users)
    a, b = sum(held_in) / len(held_in), sum(held_out) / len(held_out)
    return UsersLoss(held_in=a, held_out=b, gap=b - a, users=users)


def dataset_rows(design: PositiveControlParams, dataset: str, metrics: Metrics,
                 user_scores: dict[str, list]) -> tuple[list[Checkpoint], list[RowAt]]:
    """One experiment's checkpoints (run, epochs, steps, epsilon, the validation loss and the users' losses) and
    rows (each instrument's measure at each checkpoint), from its metrics.json and the ``loss`` attack's per-user
    scores of each run (``users_loss``)."""
    checkpoints, rows = [], []
    for e in checkpoints_of(design):
        run = run_name(dataset, e)
        r = metrics.runs[run]
        pv = r.privacy
        point = Checkpoint(run=run, checkpoint=e, epochs=design.epochs[-1] if e == "dp" else e,
                           steps=r.training.steps, sample_rate=r.training.sample_rate, dp=pv.dp,
                           epsilon=pv.epsilon_spent if pv.dp else None, delta=pv.delta if pv.dp else None,
                           valid_nll=r.utility.valid_nll, users_loss=users_loss(user_scores[run]))
        checkpoints.append(point)
        rows += [AT[type(row)](**vars(row), run=run, checkpoint=e, epsilon=point.epsilon)
                 for row in instrument_rows(r)]
    return checkpoints, rows


def _spearman(x, y) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(spearmanr(x, y).statistic)


def _check(experiment: Experiment, what: str, value, holds: bool) -> Check:
    return Check(experiment=experiment.experiment, what=what, value=value, holds=bool(holds))


def _verdict(checks: list[Check]) -> PredictionVerdict:
    if not checks:
        return NOT_MEASURED
    return CONFIRMED if all(c.holds for c in checks) else NOT_CONFIRMED


def prediction_checks(design: PositiveControlParams, experiments: list[Experiment]) -> dict[str, list[Check]]:
    """Per prediction id, the checks its words name over every experiment (one per dataset); a prediction with no
    check is not measured."""
    last = design.epochs[-1]
    out: dict[str, list[Check]] = {p: [] for p in PREDICTIONS}
    for ex in experiments:
        for a in TEXT_ATTACKS:
            row = ex.row(a, "text", last)
            if row:
                out["text_mia"].append(_check(ex, f"{a} text AUROC 95% interval at {last} epochs",
                                              row.auroc_ci95, row.sees()))
        row = ex.row("user_inference", "users", last)
        if row:
            out["user_inference"].append(_check(
                ex, f"user_inference AUROC over real users ({row.members} vs {row.non_members}) at {last} "
                    f"epochs: {'95% interval' if row.auroc_ci95 else 'exact p'}",
                row.auroc_ci95 or row.auroc_p_exact, row.sees()))
        for m in MEMORIZATION:
            trained, held_out = ex.row(m, "trained", last), ex.row(m, "held_out", last)
            if trained and held_out:
                name = m.upper()
                out[m].append(_check(ex, f"{name} minus base of the trained secrets, 95% interval, at {last} epochs",
                                     trained.ci95, trained.ci95 is not None and trained.ci95[0] > 0))
                out[m].append(_check(ex, f"{name} minus base: trained vs held-out secrets",
                                     [trained.value, held_out.value], trained.value > held_out.value))
        series = ([(a, "text") for a in TEXT_ATTACKS] + [("user_inference", "users")]
                  + [(m, "trained") for m in MEMORIZATION])
        for instrument, pool in series:
            rows = [ex.row(instrument, pool, e) for e in design.epochs]
            if all(rows):
                ys = [r.measure for r in rows]
                rho = _spearman(list(design.epochs), ys)
                out["dose"].append(_check(ex, f"{instrument} ({pool}): first and last checkpoint, Spearman with epochs",
                                          [ys[0], ys[-1], rho], ys[-1] > ys[0] and rho is not None and rho > 0))
        points = [(c.users_loss.gap, ex.row("user_inference", "users", c.checkpoint))
                  for c in ex.checkpoints if not c.dp]
        if all(g is not None and r for g, r in points):
            rho = _spearman([g for g, _ in points], [r.auroc for _, r in points])
            out["gap"].append(_check(ex, "Spearman of the user-inference AUROC with the user-level gap",
                                     rho, rho is not None and rho >= 0.8))
        base = ex.row("loss", "text", last)
        for a in ("ez_mia", "min_k_pp"):
            row = ex.row(a, "text", last)
            if base and row:
                out["newer"].append(_check(ex, f"{a} vs loss text AUROC at {last} epochs",
                                           [row.auroc, base.auroc], row.auroc > base.auroc))
        for row in ex.rows:
            if row.checkpoint == "dp" and row.instrument not in ("eia", "blind") and row.pool != "held_out":
                shown = (row.auroc_ci95 or row.auroc_p_exact) if isinstance(row, AurocRow) else row.ci95
                out["dp"].append(_check(ex, f"DP counterpart: {row.instrument} ({row.pool}) covers chance",
                                        shown, row.covers_chance()))
    return out


def verdicts(design: PositiveControlParams, experiments: list[Experiment]) -> list[Prediction]:
    """Each stated prediction (studies.yaml ``positive_control.predictions``) with its verdict over the experiments
    run so far: confirmed where every check holds, not confirmed where one fails, not measured without a check."""
    checks = prediction_checks(design, experiments)
    return [Prediction(prediction=p, says=says, verdict=_verdict(checks[p]), checks=checks[p],
                       failed=sum(not c.holds for c in checks[p]), of=len(checks[p]))
            for p, says in design.predictions.items()]
