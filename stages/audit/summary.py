"""Per-run, per-attack, per-canary-kind audit summary (what reports/metrics.json holds, per ``schema.py``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..attack.schema import (
    FAMILY_SCHEMAS,
    AttackRecord,
    baseline_attacks,
    read_attack_json,
    read_attack_table,
    read_record,
    same_ranking,
)
from ..canaries.schema import AUDIT_USERS_KIND
from ..finetune.schema import PrivacyRecord, RunRecord, read_manifest, read_run
from ..shared.core.errors import ConfigError, DataError
from .exposure import summarize
from .primary import Canaries, exploratory_family, primary_test, with_ceiling
from .response import canary_response
from .roc import bootstrap_mean_ci, paired_auroc_difference, roc_curve, roc_metrics
from .schema import NON_CANARY_GROUPS
from .shift import blind_pool
from .user_level import user_test, with_user_ideal


def audit_delta(params, privacy: PrivacyRecord) -> float:
    """The delta of the null hypothesis: audit.delta, else the run's own (DP) delta, else the fallback."""
    if params.delta is not None:
        return params.delta
    return float(privacy.delta) if privacy.dp else params.fallback_delta


def audit_table(groups, params) -> dict:
    """ROC metrics (AUROC, TPR at the fixed FPRs, bootstrap intervals) per item group (``groups_of``)."""
    return {group: roc_metrics(s, y, params.fprs, params.bootstrap, params.seed, params.min_per_side)
            for group, s, y, _ in groups}


def groups_of(table) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """(group, scores, members, item ids) of a SCORES table, groups in sorted order."""
    groups = np.asarray(table.column("group").to_pylist())
    scores = table.column("score").to_numpy()
    members = np.asarray(table.column("member").to_pylist(), dtype=bool)
    ids = np.asarray(table.column("item_id").to_pylist())
    return [(g, scores[groups == g], members[groups == g], ids[groups == g]) for g in sorted(set(groups.tolist()))]


def canary_groups(canaries: Canaries, attack: str, groups) -> None:
    """Add the attack's canary-kind groups (randomised membership) to ``canaries`` (kind -> attack -> data)."""
    for group, s, y, ids in groups:
        if group not in NON_CANARY_GROUPS:
            canaries.setdefault(group, {})[attack] = (ids, s, y)


def _cell_metrics(s: np.ndarray, y: np.ndarray, params) -> dict:
    both = 0 < y.sum() < len(y)
    return roc_metrics(s, y, params.fprs, params.bootstrap, params.seed, params.min_per_side) if both else \
        {"members": int(y.sum()), "non_members": int((~y).sum()), "auroc": None, "auroc_ci95": None, "tpr_at_fpr": {}}


def by_length(groups, users: dict[str, dict], params) -> tuple[dict[str, dict], dict[str, dict]]:
    """Canary users' ROC metrics per shared-substring length, and per (length, trained documents) where a length's
    held-in users were trained on different counts (``canaries.users.documents``): the held-in users of that count
    against every held-out user of the length, whose scores no count touched (stratified bootstrap over held-in and
    held-out users; below ``min_per_side`` on a side the exact p-value instead). A cell whose scored users are all on
    one side gets counts only. ``users``: canary user -> its canary_users.parquet row. Keys: "<length>" and
    "<length>:<documents>" ("all": every trainable document)."""
    per_length: dict[str, dict] = {}
    per_documents: dict[str, dict] = {}
    for group, s, y, ids in groups:
        if group != "canary_users":
            continue
        length = np.array([users[str(i)]["length"] for i in ids])
        docs = np.array([users[str(i)].get("documents") or 0 for i in ids])
        for n in sorted(set(length.tolist())):
            sel = length == n
            per_length[str(n)] = _cell_metrics(s[sel], y[sel], params)
            counts = sorted(set(docs[sel & y].tolist()))
            if counts == [0]:
                continue
            for d in counts:
                cell = sel & (~y | (docs == d))
                per_documents[f"{n}:{d or 'all'}"] = _cell_metrics(s[cell], y[cell], params)
    return per_length, per_documents


def blind_groups(scores_dir: Path, record: AttackRecord) -> list:
    """The model-free baseline's out-of-fold scores (``groups_of``; the attack declared ``baseline``), read once;
    empty without one."""
    baselines = baseline_attacks(record.attacks)
    if len(baselines) > 1:
        raise ValueError(f"attack@{record.run}: more than one model-free baseline ({', '.join(baselines)})")
    return groups_of(read_attack_table(scores_dir, baselines[0], "membership")) if baselines else []


def minus_blind(metrics: dict, groups, blind_groups: list, params) -> None:
    """Per non-randomised pool the attack scored: its AUROC minus the blind baseline's on the same items, with a
    95% paired bootstrap interval (``minus_blind`` in the group's metrics, in place). Only where the blind
    baseline scored exactly the attack's items with the same labels."""
    blind = {g: {str(i): (float(x), bool(m)) for i, x, m in zip(ids, s, y)} for g, s, y, ids in blind_groups}
    for group, s, y, ids in groups:
        pool = blind.get(group)
        if not pool or set(pool) != set(ids.tolist()):
            continue
        b = np.array([pool[str(i)][0] for i in ids])
        if any(pool[str(i)][1] != bool(m) for i, m in zip(ids, y)):
            continue
        metrics[group]["minus_blind"] = paired_auroc_difference(s, b, y, params.bootstrap, params.seed,
                                                                params.min_per_side)


def roc_rows(run: str, attack: str, groups) -> list[dict]:
    """Every point of every group's ROC curve (the ROC artifact the report draws)."""
    rows = []
    for group, s, y, _ in groups:
        fpr, tpr = roc_curve(s, y)
        rows += [{"run": run, "attack": attack, "group": group, "fpr": float(f), "tpr": float(t)}
                 for f, t in zip(fpr, tpr)]
    return rows


def trainable_summary(info: RunRecord) -> dict:
    """What the run trained: paradigm, own rows of new tokens and of vocabulary secret tokens, parameter count."""
    t = info.trainable
    return {"paradigm": t.paradigm, "secret_rows": info.params["secret_rows"], "lora_r": t.lora_r,
            "lora_targets": t.to_json()["lora_targets"], "virtual_tokens": t.virtual_tokens,
            "new_token_rows": t.num_new_tokens, "secret_token_rows": len(t.secret_rows),
            "parameters": info.trainable_parameters}


def member_inclusions(run_dir: Path) -> dict[str, int]:
    """Member canary id -> steps that sampled it, from the run's manifest."""
    return {r["candidate_id"]: r["inclusions"] for r in read_manifest(run_dir, "canary") if r["member"]}


def run_header(info: RunRecord, record: AttackRecord) -> dict:
    """What the audit copies from the run's record (training, privacy, utility, what it trained), the attacks to
    fill and those the run could not have."""
    return {
        "privacy": info.privacy.to_json(),
        # public quantities only: the member count and q x n are the auditor's (the run's auditor.json)
        "training": {"steps": info.steps, "sample_rate": info.sample_rate,
                     "expected_exposures_per_member": info.expected_exposures_per_member,
                     "n_population": info.n_population, "public_divisor": info.privacy.public_divisor},
        "trainable": trainable_summary(info),
        "dataset": info.params["dataset"],
        "utility": {"valid_nll": info.valid.nll, "valid_perplexity": info.valid.perplexity},
        "attacks": {},
        # attacks of the default list the run cannot have, with the reason (attack.attacks: left out, not failed)
        "attacks_skipped": dict(record.skipped),
        "other": {},
    }


def audit_run(run_dir: Path, scores_dir: Path, params, canary_users: dict[str, dict],
              audit_users: tuple[dict[str, int], int] | None = None) -> tuple[dict, list[dict]]:
    """The run's metrics (``schema.RunMetrics`` as JSON: training, privacy, utility, every attack summarised) and its
    ROC points, from the fine-tuned run's record and manifest (``run_dir``) and its attacks' scores (``scores_dir``);
    ``canary_users``: canary user -> its canary_users row (user inference per length); ``audit_users``: (audit-user row
    id -> its user, rows per user) of the canaries stage's audit users (the user-level test), or None."""
    record = read_record(scores_dir)
    info = read_run(run_dir)
    delta = audit_delta(params, info.privacy)
    result = run_header(info, record)
    if "user_inference" in record.attacks:
        result["user_score"] = record.user_score
    roc: list[dict] = []
    canaries: Canaries = {}
    user_rows = None  # the audit users' rows as audit.user.attack scored them
    blind = blind_groups(scores_dir, record)
    for attack, meta in record.attacks.items():
        family = meta["family"]
        if family not in FAMILY_SCHEMAS:  # e.g. inversion: a JSON summary, passed on as written
            result["other"][attack] = read_attack_json(scores_dir, attack)
            continue
        if family == "membership" and meta["baseline"]:  # model-free: a shift check, not a leakage number
            notes = read_attack_json(scores_dir, attack)
            result["blind"] = {g: blind_pool(s, y, notes[g], params) for g, s, y, _ in blind}
            continue
        table = read_attack_table(scores_dir, attack, family)
        if family == "membership":
            groups = groups_of(table)
            result["attacks"][attack] = audit_table(groups, params)
            minus_blind(result["attacks"][attack], groups, blind, params)
            canary_groups(canaries, attack, groups)
            if attack == params.user.attack:
                user_rows = next((g for g in groups if g[0] == AUDIT_USERS_KIND), None)
            per_length, per_documents = by_length(groups, canary_users, params)
            if per_length:
                result.setdefault("canary_users_by_length", {})[attack] = per_length
            if per_documents:
                result.setdefault("canary_users_by_documents", {})[attack] = per_documents
            roc += roc_rows(record.run, attack, groups)
        elif family == "exposure":
            result["exposure"] = summarize(table)
        elif family == "memorization":
            result.setdefault("memorization", {})[attack] = memorization_summary(table, params,
                                                                                 info.secret_control)
    primary = primary_test(canaries, params, delta, record.run, dp=info.privacy.dp)
    result["audit_primary"] = with_ceiling(primary, info.privacy, params) if primary and info.privacy.dp else primary
    if info.params["user_canaries"]:
        result["audit_user"] = audit_user(user_rows, audit_users, info, params, delta, record.run)
    result["audit_exploratory"] = exploratory_family(canaries, params, delta, same_ranking(record.attacks))
    if canaries and not info.external:  # an external run's inclusion counts are unknown
        result["canary_response"] = canary_response(canaries, params.primary.kind, member_inclusions(run_dir),
                                                    info.privacy, params.bootstrap, params.seed,
                                                    params.min_per_side)
    return result, roc


def audit_user(user_rows, audit_users: tuple[dict[str, int], int] | None, info: RunRecord, params, delta: float,
               run: str) -> dict:
    """The run's user-level one-run test over the audit users (``user_level.py``), with its ideal for a DP run."""
    if audit_users is None:
        raise DataError(f"run {run} trained on audit users the canaries stage no longer has (canaries.audit_users)")
    if user_rows is None:
        raise ConfigError(f"audit.user.attack: {params.user.attack!r} did not score run {run}'s audit users "
                          "(add it to the run's attack list)")
    _, s, y, ids = user_rows
    test = user_test(ids, s, y, audit_users[0], audit_users[1], params, delta)
    return with_user_ideal(test, info.privacy, params) if info.privacy.dp else test


def memorization_summary(table, params, control: dict | None) -> dict:
    """Mean score of the fine-tuned and the base model and their difference (base leakage removed), and the
    largest per-secret difference (the worst case, empirical-privacy-variance App. F), for secrets the run trained on
    and for the untrained control; 95% bootstrap over secrets. ``control``:
    the run's randomised control record (None: trained/untrained by occurrence, not randomised)."""
    t = table.to_pandas()
    out: dict = {"randomised": bool(control)}
    if control:
        out["control"] = {**{k: control[k] for k in ("candidates", "rows_dropped", "trained_still_present", "seed")},
                          "coin_trained": len(control["trained"]), "coin_held_out": len(control["held_out"])}
    for name, g in (("trained", t[t["trained"]]), ("untrained", t[~t["trained"]])):
        diff = (g["score"] - g["base_score"]).to_numpy()
        out[name] = {"secrets": int(len(g)), "score": float(g["score"].mean()) if len(g) else None,
                     "base_score": float(g["base_score"].mean()) if len(g) else None,
                     "minus_base": float(diff.mean()) if len(g) else None,
                     "max_minus_base": float(diff.max()) if len(g) else None,
                     "minus_base_ci95": bootstrap_mean_ci(diff, params.bootstrap, params.seed,
                                                          min_count=params.min_per_side) if len(g) else None}
    return out
