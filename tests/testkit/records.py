"""Metrics records for report tests: the committed reports/metrics.json read through its one reader, and small
records built from it with only the fields a test varies replaced (``dataclasses.replace``)."""
from __future__ import annotations

from dataclasses import replace
from functools import cache

from stages.audit.schema import GroupMetrics, Metrics, RunMetrics, read_metrics
from stages.finetune.schema import RUN_VERSION, PrivacyRecord, RunRecord, Valid, no_dp_record
from stages.shared.core.records import record_json
from stages.shared.lm.spec import Trainable

from .project import ROOT


@cache
def committed_metrics() -> Metrics:
    """reports/metrics.json as main's audit wrote it (a frozen record: share it freely)."""
    return read_metrics(ROOT / "reports" / "metrics.json")


def group(auroc: float | None = 0.5, members: int = 20, non_members: int = 20, **fields) -> GroupMetrics:
    """One pool's ROC metrics with no interval and no TPRs unless given."""
    return GroupMetrics(members=members, non_members=non_members, auroc=auroc,
                        auroc_ci95=fields.pop("auroc_ci95", None), tpr_at_fpr=fields.pop("tpr_at_fpr", {}), **fields)


def run_metrics(template: str = "nondp", **fields) -> RunMetrics:
    """A committed run's entry with ``fields`` replaced (e.g. ``attacks={...}``, ``blind=None``)."""
    return replace(committed_metrics().runs[template], **fields)


def metrics(runs: dict[str, RunMetrics] | None = None, **fields) -> Metrics:
    """The committed metrics with ``runs`` (and any other field) replaced."""
    return replace(committed_metrics(), **({"runs": runs} if runs is not None else {}), **fields)


def run_record(privacy: PrivacyRecord | None = None, params_overrides: dict | None = None, **fields) -> RunRecord:
    """A fine-tuned run's record (run.json) of a LoRA run with the project's finetune params (``params_overrides``
    over them), no DP unless ``privacy`` is given, and ``fields`` replaced."""
    from .models import finetune_params

    trainable = Trainable(paradigm="lora", lora_r=8, lora_alpha=16, lora_dropout=0.0, lora_targets=("q_proj",),
                          virtual_tokens=16, num_new_tokens=1000, new_token_init="mean", secret_rows=(5, 6),
                          train_embeddings=False)
    base = RunRecord(version=RUN_VERSION, run="r", params=record_json(finetune_params(**(params_overrides or {}))),
                     trainable=trainable, device="cpu", world_size=1, base_model={"name_or_path": "tiny"},
                     num_new_tokens=1000, new_token_init="mean", n_population=2150, has_canaries=True,
                     has_formatted=False, canary_users=[], secret_control=None, sample_rate=0.0286, steps=80,
                     expected_exposures_per_member=2.3, canary_insertion="poisson", trainable_parameters=1234,
                     final_loss=None, valid=Valid(rows=4, tokens=40, nll=3.0, perplexity=20.0),
                     privacy=privacy or no_dp_record(0.0286, 80), external=None)
    return replace(base, **fields)
