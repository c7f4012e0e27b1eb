"""The positive control's design (studies.yaml ``positive_control``, ``PositiveControlParams``) and its table,
reports/positive_control.json, as records: the design it ran under, one experiment per dataset (its checkpoints
and every instrument's row at each, the DP counterpart's with its epsilon) and each stated prediction's verdict.
``stages/tools/studies/positive_control.py`` builds it (``python -m flows.positive_control``); the report reads it
(``read_table``)."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..core.io import read_json
from ..core.params import check
from ..core.records import read_record, record
from .rows import TEXT_ATTACKS, AurocRow, EiaRow, ValueRow

#: every instrument the rows can hold (as the attack registry names it), with what it measures
INSTRUMENTS = (*TEXT_ATTACKS, "blind", "user_inference", "vmr", "air", "eia")
#: the memorisation instruments: a value minus the base model's on the trained secrets and on the held-out control
MEMORIZATION = ("vmr", "air")
#: the predictions a design states, by id (``verdicts`` evaluates each)
PREDICTIONS = ("text_mia", "user_inference", "vmr", "air", "dose", "gap", "newer", "dp")
#: the keys of a design's dataset: those it must set, and those it may (``preprocess``: overrides of the dataset's
#: ``preprocess.datasets.<name>`` entry, e.g. its users; ``attack``: overrides of the ``attack`` section, e.g. how
#: many secrets memorisation scores), each leaf on its own
DATASET_KEYS, DATASET_OPTIONAL = frozenset({"run", "steps_per_epoch", "attacks"}), frozenset({"preprocess", "attack"})


@dataclass(frozen=True)
class PositiveControlParams:
    """studies.yaml ``positive_control`` (or a follow-up design of the same shape, e.g. ``positive_control_power``):
    runs at each of ``epochs`` expected passes over each row (q T, with q = 1 / a dataset's ``steps_per_epoch``),
    ``recipe`` deep-merged over ``finetune`` in each, the DP counterpart at ``dp`` (epsilon, delta) with the last
    checkpoint's recipe and steps (None: no DP counterpart in this design), every run at ``seed``; ``datasets``:
    name -> {run: its pools' overrides, steps_per_epoch, attacks, optionally preprocess and attack: overrides of the
    dataset's preprocessing and of the attack section}; ``predictions``: id -> the prediction in words."""

    epochs: tuple[int, ...]
    recipe: dict[str, Any]
    dp: dict[str, float] | None
    seed: int
    datasets: dict[str, Any]
    predictions: dict[str, str]

    def problems(self):
        return (check(bool(self.epochs) and list(self.epochs) == sorted(set(self.epochs))
                      and all(e >= 1 for e in self.epochs), "epochs", "must list increasing epochs >= 1",
                      self.epochs)
                + check(self.dp is None or (set(self.dp) == {"epsilon", "delta"}
                                            and all(v > 0 for v in self.dp.values())), "dp",
                        "must set epsilon > 0 and delta > 0 (or be null: no DP counterpart)", self.dp)
                + check(bool(self.datasets) and all(isinstance(d, dict) and DATASET_KEYS <= set(d)
                                                    <= DATASET_KEYS | DATASET_OPTIONAL
                                                    for d in self.datasets.values()),
                        "datasets", f"each dataset sets {sorted(DATASET_KEYS)} and may set "
                                    f"{sorted(DATASET_OPTIONAL)}", self.datasets)
                + check(all(isinstance(d, dict) and all(isinstance(d.get(k, {}), dict) for k in DATASET_OPTIONAL)
                            for d in self.datasets.values()), "datasets",
                        f"{' and '.join(sorted(DATASET_OPTIONAL))} must be mappings", self.datasets)
                + check(all(isinstance(d, dict) and isinstance(d.get("steps_per_epoch"), int)
                            and d["steps_per_epoch"] >= 1 for d in self.datasets.values()),
                        "datasets", "steps_per_epoch must be an integer >= 1", self.datasets)
                + check(all(isinstance(d, dict) and set(d.get("attacks") or ()) <= set(INSTRUMENTS)
                            for d in self.datasets.values()),
                        "datasets", f"attacks must be among {list(INSTRUMENTS)}", self.datasets)
                + check(set(self.predictions) <= set(PREDICTIONS), "predictions",
                        f"ids must be among {list(PREDICTIONS)}", sorted(self.predictions)))


class PredictionVerdict(str, Enum):
    """A prediction's verdict: every check holds, one does not, or none was measured."""

    CONFIRMED = "confirmed"
    NOT_CONFIRMED = "not confirmed"
    NOT_MEASURED = "not measured"


@record
class UsersLoss:
    """The held-in and held-out users' mean loss (nats per token) over the attacker's samples, and the user-level
    generalisation gap (held-out minus held-in); None where a side has no user."""

    held_in: float | None
    held_out: float | None
    gap: float | None
    users: tuple[int, int]  # held in, held out


@record
class Checkpoint:
    run: str
    checkpoint: int | str  # the epochs, or "dp" for the DP counterpart
    epochs: int
    steps: int
    sample_rate: float
    dp: bool
    epsilon: float | None  # the accountant's, DP only
    delta: float | None
    valid_nll: float | None
    users_loss: UsersLoss


@record
class AurocAt(AurocRow):
    """An AUROC row of one checkpoint's run."""

    run: str
    checkpoint: int | str
    epsilon: float | None


@record
class EiaAt(EiaRow):
    """Embedding inversion's row of one checkpoint's run."""

    run: str
    checkpoint: int | str
    epsilon: float | None


@record
class ValueAt(ValueRow):
    """A value row of one checkpoint's run."""

    run: str
    checkpoint: int | str
    epsilon: float | None


#: a row of one checkpoint's run; ``AT[type(row)]``: the kind of row that adds its run, checkpoint and epsilon
RowAt = AurocAt | EiaAt | ValueAt
AT = {AurocRow: AurocAt, EiaRow: EiaAt, ValueRow: ValueAt}


@record
class Experiment:
    """One dataset's DVC experiment: where it ran (its commit, the params and lock kept beside the table), how long
    (seconds; None where not recorded), its checkpoints and rows."""

    experiment: str
    commit: str
    dataset: str
    params: str
    lock: str
    seconds: int | None
    checkpoints: list[Checkpoint]
    rows: list[RowAt]

    def row(self, instrument: str, pool: str, checkpoint: int | str) -> RowAt | None:
        return next((r for r in self.rows if (r.instrument, r.pool, r.checkpoint) == (instrument, pool, checkpoint)),
                    None)


@record
class Check:
    """One check a prediction's words name, on one experiment: what, the numbers, whether it holds."""

    experiment: str
    what: str
    value: Any  # a number, an interval or a list of numbers (as ``what`` says)
    holds: bool


@record
class Prediction:
    prediction: str  # its id in studies.yaml positive_control.predictions
    says: str
    verdict: PredictionVerdict
    checks: list[Check]
    failed: int
    of: int


@record
class PositiveControlTable:
    """The design (studies.yaml ``positive_control``, as it was) and the commit that last changed it, the recipe's
    preset, the experiments and the predictions' verdicts."""

    design: PositiveControlParams
    design_commit: str | None
    recipe: str
    experiments: list[Experiment]
    verdicts: list[Prediction]


def read_table(path: Path) -> PositiveControlTable:
    return read_record(PositiveControlTable, read_json(path, "python -m flows.positive_control"), str(path))
