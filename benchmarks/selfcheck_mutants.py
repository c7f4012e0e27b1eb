"""Flag rates of the DP engine self-check over fresh seeds: each broken mechanism of tests/mutants.py, and the
correct engine (false flags), in the configuration the CI test uses (a family of one, flagged at 99.9%).

    python benchmarks/selfcheck_mutants.py --seeds 20          # about 25 min on 2 cores

Seeds 1000.. are used nowhere else (the tests use 11 and 21, the default self-check 0). Prints a table and
writes reports/selfcheck_mutants.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from flows import selfcheck as flow  # noqa: E402
from stages.core.params import load  # noqa: E402
from stages.finetune import selfcheck as S  # noqa: E402
from stages.finetune.params import SelfcheckParams  # noqa: E402

SETUPS = [(None, S.Config("bk", "lora", 1)), ("noise_halved", S.Config("hooks", "rows", 1)),
          ("clip_off", S.Config("hooks", "full", 1)), ("clip_off", S.Config("bk", "lora", 1)),
          ("accountant_q", S.Config("ghost", "train_embeddings", 1)), ("rank_noise", S.Config("hooks", "full", 2))]


def main() -> None:
    import mutants

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "reports/selfcheck_mutants.json"))
    ap.add_argument("--only", nargs="*", default=None, help="these setups only (numbers 0..5, in SETUPS order)")
    args = ap.parse_args()
    sc = load(SelfcheckParams, "selfcheck", ROOT / "params.yaml")
    os.chdir(ROOT)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    rows = []
    for i, (name, config) in enumerate(SETUPS):
        if args.only is not None and str(i) not in args.only:
            continue
        t0, flags, bounds = time.time(), 0, []
        for s in range(1000, 1000 + args.seeds):
            os.environ["SELFCHECK_MUTANT"] = name or ""
            module = "mutants" if name and config.processes > 1 else "stages.finetune.selfcheck"
            ctx = mutants.mutant(name) if name and config.processes == 1 else contextlib.nullcontext()
            with ctx:
                (row,) = flow.check(sc, [config], seed=s, module=module, mutant=name, log=lambda _: None)
            flags += row["flagged"]
            bounds.append(row["gdp_eps_lb_999"])
        rows.append({"mutant": name, "config": config.name, "seeds": args.seeds, "flagged": flags,
                     "accountant_epsilon": row["accountant_epsilon"], "gdp_eps_lb_999_min": min(bounds),
                     "gdp_eps_lb_999_max": max(bounds), "seconds": round(time.time() - t0)})
        r = rows[-1]
        print(f"{str(name):13s} {config.name:24s} flagged {flags:2d}/{args.seeds}  accountant eps "
              f"{r['accountant_epsilon']:.2f}  gdp eps-hat 99.9% {r['gdp_eps_lb_999_min']:.2f}.."
              f"{r['gdp_eps_lb_999_max']:.2f}  ({r['seconds']} s)", flush=True)
    Path(args.out).write_text(json.dumps({"family": 1, "alpha": sc.alpha, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
