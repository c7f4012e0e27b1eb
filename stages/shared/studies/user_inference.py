"""The user-inference study's design (studies.yaml ``user_inference``, ``UserInferenceStudyParams``) and its table
(reports/user_inference.json: per experiment, one per substring length, a row per mechanism and documents count), as
records. flows/user_inference.py writes the table; the report reads it (``read_table``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.io import read_json
from ..core.params import check
from ..core.records import read_record, record


@dataclass(frozen=True)
class UserInferenceStudyParams:
    """studies.yaml ``user_inference``: canary users (Algorithm 1) over ``dataset``'s users, ``per_length`` of them
    at each substring length of ``lengths`` (one experiment per length, in this order), a held-in user trained on
    the values of ``documents`` in turn (null: all of its documents), scored by ``attack``, at ``seed``."""

    dataset: str
    lengths: tuple[int, ...]
    per_length: int
    documents: tuple[int | None, ...]
    attack: str
    seed: int
    #: the directions predicted before the runs, in words
    prediction: str

    def problems(self):
        return (check(all(n > 0 for n in self.lengths) and self.lengths, "lengths", "must list lengths > 0",
                      self.lengths)
                + check(self.per_length >= 200, "per_length", "must be >= 200 (100 held in and 100 held out: "
                        "the study's power)", self.per_length)
                + check(all(d is None or d >= 1 for d in self.documents) and self.documents, "documents",
                        "must list counts >= 1 or null (all)", self.documents))



@record
class InferenceRow:
    """One mechanism's user inference at one substring length over the held-in users trained on ``documents`` of
    their documents (a count, "all", or "mixed": every count's held-in users together) against every held-out user
    of the length: the AUROC with its interval (or, where a side is small, its exact p)."""

    mechanism: str
    unit: str | None
    epsilon: float | None
    delta: float | None
    length: int
    documents: int | str
    members: int
    non_members: int
    auroc: float | None
    auroc_ci95: list[float] | None
    auroc_p_exact: float | None
    valid_perplexity: float | None
    seed: int
    design_commit: str | None


@record
class InferenceExperiment:
    experiment: str
    commit: str
    length: int
    seed: int
    params: str  # its params.yaml and dvc.lock, kept beside the table
    lock: str
    rows: list[InferenceRow]


@record
class UserInferenceTable:
    design: UserInferenceStudyParams
    design_commit: str | None
    recipe: str
    experiments: list[InferenceExperiment]


def read_table(path: Path) -> UserInferenceTable:
    return read_record(UserInferenceTable, read_json(path, "python -m flows.user_inference"), str(path))
