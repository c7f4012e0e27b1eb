"""Power of the pre-registered variance study's Q1 test under the ideal (the figures in params.yaml's
``variance.study`` comment and docs/method.md).

Each configuration of ``variance.study``: sigma calibrated by the PRV accountant to (epsilon, delta) at its q = b / n
(n: the recipe's candidate pool, ``--pool``) and T; ``trials`` one-run audits of the last-iterate linear model
(``stages.shared.bounds.ceiling.ideal_counts``: m canaries, the primary rule) give the ideal epsilon-hat95 draws; then
the
Kruskal-Wallis test of ``--seeds`` draws per configuration rejects at each level this often (a heuristic: real models
are not the linear model).

    python benchmarks/study_power.py [--trials 2000] [--seeds 4 5 6] [--levels 0.05 0.025] [--pool 1402]
"""
from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--pool", type=int, default=1402, help="the recipe's candidate pool (q = batch_size / pool)")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[4, 5, 6])
    ap.add_argument("--levels", type=float, nargs="+", default=[0.05, 0.025])
    args = ap.parse_args()
    import numpy as np

    from stages.audit.params import AuditParams
    from stages.shared.bounds.ceiling import ideal_counts, trial_bounds
    from stages.shared.bounds.keys import clip_guesses
    from stages.shared.core.params import load, read_params
    from stages.shared.core.privacy import calibrate_sigma
    from stages.variance.params import VarianceParams
    from stages.variance.study import kruskal_power

    study = load(VarianceParams, "variance", args.params).study
    primary = load(AuditParams, "audit", args.params).primary
    m = read_params(args.params)["canaries"]["num_canaries"]  # the primary kind's canaries (m)
    k_pos, k_neg = clip_guesses(primary.k_pos, primary.k_neg, m)
    draws, rows = {}, {}
    for name, c in study.configs.items():
        q = c.batch_size / args.pool
        sigma = calibrate_sigma(study.epsilon, study.delta, q, c.steps, "prv")
        counts = ideal_counts(q, c.steps, sigma, m=m, k_pos=k_pos, k_neg=k_neg, trials=args.trials, seed=study.seed)
        draws[name] = trial_bounds(counts, study.delta, 0.95)
        rows[name] = {"q": round(q, 4), "steps": c.steps, "sigma": round(sigma, 4),
                      "ideal_eps_lb_95_median": round(float(np.median(draws[name])), 3),
                      "sd": round(float(np.std(draws[name])), 3)}
        print(name, rows[name], flush=True)
    power = {f"{k} seeds, level {lv}": kruskal_power(draws, k, lv, args.trials, study.seed)
             for k in args.seeds for lv in args.levels}
    print(json.dumps({"configs": rows, "power": power}, indent=1))


if __name__ == "__main__":
    main()
