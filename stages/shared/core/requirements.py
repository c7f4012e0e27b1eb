"""What the audit needs of each run, checked from the params mapping alone when any stage starts.

A rule that spans sections and runs (the pre-registered test scores a run's canaries with one attack, so every run
that trains canaries must run it) would otherwise surface only in the audit stage, after every fine-tune. Every
stage's entry (``stages.shared.core.cli.stage_args``) and the whole-file check (``stages.params.validate_params``) run
``run_requirements``, so ``dvc repro`` stops at its first stage with one line naming both keys. It reads the raw
mapping only (no stage's params module), so it is in every stage's closure without pulling the others in.
"""
from __future__ import annotations

from typing import Any

from .params import deep_merge, section_of


def _trains(raw: dict, run: str, key: str) -> bool:
    """The run's merged ``finetune`` flag ``key`` (canaries, user_canaries)."""
    merged = deep_merge(raw.get("finetune") or {}, (raw.get("runs") or {}).get(run) or {})
    return bool(merged.get(key))


def run_requirements(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """``[(dotted key, problem)]``: every run that trains canaries has ``audit.primary.attack`` in its attack list
    (``attack.runs.<run>``, null: ``attack.attacks``), and every run that trains the audit users (user_canaries)
    ``audit.user.attack``. Sections a partial params file lacks are not checked here (their own loaders name
    them)."""
    primary = section_of(raw, "audit.primary.attack")
    runs = raw.get("runs")
    if not isinstance(primary, str) or not isinstance(runs, dict):
        return []
    lists = section_of(raw, "attack.runs") or {}
    default = section_of(raw, "attack.attacks") or []
    problems = []
    for run in runs:
        own = lists.get(run) if isinstance(lists, dict) else None
        names, key = (own, f"attack.runs.{run}") if own else (default, "attack.attacks")
        if _trains(raw, run, "canaries") and isinstance(names, list) and primary not in names:
            problems.append((key, f"lacks {primary!r}, the attack audit.primary.attack names: run {run} trains "
                                  f"canaries and the pre-registered test scores them with it (add it to {key})"))
        user = section_of(raw, "audit.user.attack")
        if (_trains(raw, run, "user_canaries") and isinstance(names, list) and isinstance(user, str)
                and user not in names):
            problems.append((key, f"lacks {user!r}, the attack audit.user.attack names: run {run} trains the audit "
                                  f"users and the user-level test scores them with it (add it to {key})"))
    return problems
