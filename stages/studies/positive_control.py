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

from dataclasses import dataclass
from typing import Any

from ..core.params import check

#: the text membership attacks of the study (each scores text rows, and users through ``user_rows``)
TEXT_ATTACKS = ("loss", "ref_ratio", "zlib", "min_k", "min_k_pp", "ez_mia")
#: every instrument the rows can hold (as the attack registry names it), with what it measures
INSTRUMENTS = (*TEXT_ATTACKS, "blind", "user_inference", "vmr", "eia")
#: the predictions a design states, by id (``verdicts`` evaluates each)
PREDICTIONS = ("text_mia", "user_inference", "vmr", "dose", "gap", "newer", "dp")


@dataclass(frozen=True)
class PositiveControlParams:
    """studies.yaml ``positive_control``: runs at each of ``epochs`` expected passes over each row (q T, with
    q = 1 / a dataset's ``steps_per_epoch``), ``recipe`` deep-merged over ``finetune`` in each, the DP counterpart at
    ``dp`` (epsilon, delta) with the last checkpoint's recipe and steps, every run at ``seed``; ``datasets``: name ->
    {run: its pools' overrides, steps_per_epoch, attacks}; ``predictions``: id -> the prediction in words."""

    epochs: tuple[int, ...]
    recipe: dict[str, Any]
    dp: dict[str, float]
    seed: int
    datasets: dict[str, Any]
    predictions: dict[str, str]

    def problems(self):
        spec_keys = {"run", "steps_per_epoch", "attacks"}
        return (check(bool(self.epochs) and list(self.epochs) == sorted(set(self.epochs))
                      and all(e >= 1 for e in self.epochs), "epochs", "must list increasing epochs >= 1",
                      self.epochs)
                + check(set(self.dp) == {"epsilon", "delta"} and all(v > 0 for v in self.dp.values()), "dp",
                        "must set epsilon > 0 and delta > 0", self.dp)
                + check(bool(self.datasets) and all(isinstance(d, dict) and set(d) == spec_keys
                                                    for d in self.datasets.values()),
                        "datasets", f"each dataset sets exactly {sorted(spec_keys)}", self.datasets)
                + check(all(isinstance(d, dict) and isinstance(d.get("steps_per_epoch"), int)
                            and d["steps_per_epoch"] >= 1 for d in self.datasets.values()),
                        "datasets", "steps_per_epoch must be an integer >= 1", self.datasets)
                + check(all(isinstance(d, dict) and set(d.get("attacks") or ()) <= set(INSTRUMENTS)
                            for d in self.datasets.values()),
                        "datasets", f"attacks must be among {list(INSTRUMENTS)}", self.datasets)
                + check(set(self.predictions) <= set(PREDICTIONS), "predictions",
                        f"ids must be among {list(PREDICTIONS)}", sorted(self.predictions)))


def run_name(dataset: str, checkpoint: int | str) -> str:
    """``pc_<dataset>_e<epochs>``, or ``pc_<dataset>_dp`` for the DP counterpart."""
    return f"pc_{dataset}_{'dp' if checkpoint == 'dp' else f'e{checkpoint}'}"


def steps_of(design: PositiveControlParams, dataset: str, epochs: int) -> int:
    return epochs * design.datasets[dataset]["steps_per_epoch"]


def runs_of(design: PositiveControlParams, dataset: str) -> dict[str, dict]:
    """run name -> its overrides of ``finetune``: one per checkpoint, then the DP counterpart."""
    spec = design.datasets[dataset]
    base = {**design.recipe, **spec["run"], "dataset": dataset, "seed": design.seed,
            "sample_rate": 1.0 / spec["steps_per_epoch"]}
    out = {run_name(dataset, e): {**base, "steps": steps_of(design, dataset, e)} for e in design.epochs}
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


def study_overrides(design: PositiveControlParams, dataset: str) -> list[str]:
    """The design's overrides of one dataset's experiment (after the preset's): its runs and their attacks."""
    if dataset not in design.datasets:
        from ..core.errors import ConfigError
        raise ConfigError(f"--dataset {dataset}: the design's datasets are {sorted(design.datasets)} (studies.yaml "
                          f"positive_control.datasets)")
    attacks = _hydra(list(design.datasets[dataset]["attacks"]))
    return [line for run, over in runs_of(design, dataset).items()
            for line in (f"++runs.{run}={_hydra(over)}", f"++attack.runs.{run}={attacks}")]
