"""A development look at the pooled rule over the replicas of a scratch checkout (orchestration only: the counts and
bounds come from ``stages.audit.pooled.design_look``).

    python -m flows.design_look --repo /tmp/dev --replicas dev_s0 dev_s1 dev_s2 dev_s3 dev_s4 \
        --k 50 100 150 200 300 --pool-size 3 --subsample 1000 --out reports/audit_study/optimizer_dev.json

The scratch checkout holds the recipe as replicas at development seeds (``replicas.sets``), reproduced up to their
``replica_attack`` stages. For each per-run k, each replica's count of its k highest primary scores and the median
Steinke bound over every ``pool-size`` subset of replicas; with ``--subsample``, again on a seeded random subset of
each replica's canaries. A look on development seeds: it informs a committed choice and is never a claim.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from stages.audit.api import design_look, replica_primary
from stages.audit.params import AuditParams
from stages.shared.core.params import load, read_params
from stages.shared.core.vcs import git_dirty, head


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True, type=Path)
    ap.add_argument("--replicas", nargs="+", required=True)
    ap.add_argument("--k", nargs="+", type=int, required=True)
    ap.add_argument("--pool-size", type=int, default=3)
    ap.add_argument("--subsample", type=int, nargs="*", default=[])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    raw = read_params(repo / "params.yaml")
    params = load(AuditParams, "audit", repo / "params.yaml", raw)
    per_run, privacy = [], None
    for name in args.replicas:
        data, privacy = replica_primary(repo, name, params)
        per_run.append(data)
    delta = privacy["delta"]
    rev = head(repo)
    sets = raw["replicas"]["sets"]
    recipe = sets[args.replicas[0]]["run"]
    out = {"replicas": {n: sets[n]["seed"] for n in args.replicas}, "recipe": recipe,
           "recipe_overrides": raw["runs"][recipe], "scratch_commit": rev,
           "scratch_params_edited": git_dirty(repo, "params.yaml", "studies.yaml"), "attack": params.primary.attack,
           "kind": params.primary.kind,
           "privacy": {k: privacy.get(k) for k in ("optimizer", "sample_rate", "steps", "noise_multiplier",
                                                   "epsilon_spent", "delta")},
           "looks": {str(len(per_run[0][0])): design_look(per_run, args.k, delta, args.pool_size)}}
    for n in args.subsample:
        out["looks"][f"{n} (seeded subset)"] = design_look(per_run, args.k, delta, args.pool_size, subsample=n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(args.out)
    for label, look in out["looks"].items():
        print(f"m {label}: per-run v {look['v']}; median pooled eps-hat95 over {look['subsets']} subsets: "
              + ", ".join(f"k {k} -> {v:.3f}" for k, v in look["median_pooled_eps_lb"].items()))


if __name__ == "__main__":
    main()
