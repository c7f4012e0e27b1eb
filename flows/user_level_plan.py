"""The user-level comparison's plan, before any user-level run: the ideal one-run audit over canary users under
example-level and under user-level DP-SGD at the design of studies.yaml ``user_level`` (orchestration only: the
numbers come from ``stages.tools.studies.user_level``), written with the design, the prediction and the commit it was
computed at to reports/user_level_plan.json (git-tracked; refused while studies.yaml differs from the commit, and
never rewritten once written).

    python -m flows.user_level_plan        # about 1 min on 2 cores at 20,000 trials per row
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from stages.shared.bounds.keys import BoundKeys, mc_interval_key
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import load, read_params
from stages.shared.core.records import read_record, record_json
from stages.shared.core.vcs import VcsError, git, git_dirty
from stages.shared.studies.user_level import Ideals, UserLevelPlan
from stages.tools.studies.user_level import UserLevelPlanParams, plan_ideals


def design_since(repo: Path, section: str = "user_level", path: str = "studies.yaml") -> str | None:
    """The oldest commit since which ``path``'s ``section`` has not changed up to HEAD (None: HEAD lacks it)."""
    now, found = None, None
    for commit in git(str(repo), "log", "--format=%H", "HEAD", "--", path).split():
        try:
            old = (yaml.safe_load(git(str(repo), "show", f"{commit}:{path}")) or {}).get(section)
        except VcsError:
            break
        if found is None:
            now = old
        elif old != now:
            break
        found = commit
    return found if now is not None else None


def plan(repo: Path) -> UserLevelPlan:
    raw = read_params(repo / "params.yaml")
    p = load(UserLevelPlanParams, "user_level", repo / "params.yaml", raw)
    out = repo / p.out
    if out.exists():
        raise ConfigError(f"{p.out}: a plan exists (it is fixed before the runs, never rewritten)")
    if git_dirty(str(repo), "studies.yaml", "params.yaml"):
        raise ConfigError("studies.yaml, params.yaml: commit the design before computing its plan")
    ideals = plan_ideals(epsilon=p.epsilon, delta=p.delta, sample_rate=p.sample_rate, steps=p.steps,
                         rows=list(p.rows), m=p.m, k_pos=p.k_pos, confidence=p.confidence, trials=p.trials,
                         seed=p.seed, accountant=p.accountant)
    data = UserLevelPlan(design=p, design_commit=design_since(repo), ideals=read_record(Ideals, ideals, "ideals"),
                         assumption="linear last-iterate model: a canary user's rows add clipped gradients along one "
                                    "direction (heuristic; a real audit can exceed it)")
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(record_json(data), indent=1) + "\n")
    tmp.replace(out)
    return data


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".", type=Path)
    args = ap.parse_args(argv)
    ideals = plan(args.repo.resolve()).ideals
    print(f"sigma {ideals.noise_multiplier:.4f} at (eps {ideals.epsilon}, delta {ideals.delta:g}), "
          f"q {ideals.sample_rate}, T {ideals.steps}; cap {ideals.cap_eps_lb:.3f}")
    k = BoundKeys(ideals.confidence)
    for r in ideals.rows:
        s = r.summaries
        lo, hi = s[mc_interval_key(k.ideal())]
        print(f"{r.unit:8s} DP, {r.rows} rows per user: ideal {k.label} median {s[k.ideal()]:.3f} "
              f"[MC {lo:.3f}-{hi:.3f}], p10 {s[k.ideal(summary='p10')]:.3f}, p90 {s[k.ideal(summary='p90')]:.3f}")


if __name__ == "__main__":
    main()
