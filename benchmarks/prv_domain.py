"""The PRV accountant's discretisation domain from ``stages.shared.core.privacy.PRV`` (its RDP bound summed as arrays)
against opacus' own ``PRVAccountant._get_domain``, over a grid of (q, sigma, steps, delta error): how many domains are
identical, and the time of each, as a ratio within one run.

    python benchmarks/prv_domain.py                    # the full grid (630 configurations, about 3 min)
    python benchmarks/prv_domain.py --q 0.23 --sigma 0.8 --steps 10 --delta-error 1e-8   # one configuration
"""
from __future__ import annotations

import argparse
import itertools
import time
import warnings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--q", type=float, nargs="+", default=[0.001, 0.0293, 0.1, 0.2296718972895863, 0.25, 0.5, 0.99])
    ap.add_argument("--sigma", type=float, nargs="+", default=[0.3, 0.61248779296875, 0.8154296875, 1.0, 1.7, 4.0])
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 4, 10, 80, 1000])
    ap.add_argument("--delta-error", type=float, nargs="+", default=[1e-8, 1e-9, 1e-13])
    args = ap.parse_args(argv)
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV

    from stages.shared.core.privacy import create_accountant

    warnings.simplefilter("ignore", RuntimeWarning)
    ours, theirs = create_accountant("prv"), PRVAccountant()
    same = n = 0
    t_ours = t_theirs = 0.0
    for q, sigma, steps, de in itertools.product(args.q, args.sigma, args.steps, args.delta_error):
        kw = dict(prvs=[PoissonSubsampledGaussianPRV(q, sigma)], num_self_compositions=[steps], eps_error=0.01,
                  delta_error=de)
        t = time.perf_counter()
        a = ours._get_domain(**kw)
        t_ours += time.perf_counter() - t
        t = time.perf_counter()
        b = theirs._get_domain(**kw)
        t_theirs += time.perf_counter() - t
        n += 1
        if (a.t_min, a.t_max, a.size) == (b.t_min, b.t_max, b.size):
            same += 1
        else:
            print(f"differs at q {q}, sigma {sigma}, steps {steps}, delta error {de}: {a} vs {b}")
    print(f"domains identical: {same} of {n}")
    print(f"time: opacus {t_theirs:.2f} s, ours {t_ours:.2f} s, ours / opacus = {t_ours / t_theirs:.2f}")
    return 0 if same == n else 1


if __name__ == "__main__":
    raise SystemExit(main())
