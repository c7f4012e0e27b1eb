"""Flag rates of the DP engine self-check over fresh seeds: each broken mechanism of tests/testkit/mutants.py, and the
correct engine (false flags), each on a configuration of the default set, judged at the default family's level
(alpha / (configurations x tests)), as ``leakaudit selfcheck`` judges it. Most run on the transformer probe: its
m is the default set's smallest (the weakest noise test) and it is the fastest.

    python benchmarks/selfcheck_mutants.py --seeds 20          # about 45 min on 2 cores (+ ~25 min: FSDP setups)
    python benchmarks/selfcheck_mutants.py --only 15 16 ... --merge   # some setups, merged into the written rows

Seeds 2000.. were fixed (this file, committed) before any run of this design at them, and are used nowhere
else (the tests use 4, 11 and 21, the default self-check 0, the development looks 7). Prints a table and writes
reports/selfcheck_mutants.json (rows: mutant, config, flagged, seeds, what the flags named); ``--merge`` keeps the
rows already written and replaces those of the setups run (rows so written also name their family and commit).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from leakaudit import selfcheck as flow  # noqa: E402
from stages.shared.core.params import load  # noqa: E402
from stages.shared.core.records import read_record, record_json  # noqa: E402
from stages.shared.studies.selfcheck import MutantsReport  # noqa: E402
from stages.tools.selfcheck import trials as S  # noqa: E402
from stages.tools.selfcheck.params import SelfcheckParams  # noqa: E402

FIRST_SEED = 2000
#: fresh seeds for a setup whose mutant was changed after a run at FIRST_SEED.. (those seeds are then development seeds
#: for it): fixed here before any run at them, used nowhere else (``--first-seed``)
SECOND_SEED = 2100
#: (mutant or None, fields picking one configuration of the default set)
SETUPS = [
    (None, dict(resume=True)),
    (None, dict(mode="hooks", probe="transformer")),
    ("noise_x0.9", dict(mode="hooks", probe="transformer")),
    ("sensitivity_sqrt2", dict(mode="bk", probe="transformer")),
    ("resume_noise", dict(resume=True)),
    ("sampler_q", dict(mode="ghost", probe="transformer")),
    ("cross_terms", dict(mode="ghost", probe="transformer")),
    ("cross_terms", dict(mode="bk", probe="transformer")),
    ("noise_halved", dict(mode="hooks", probe="transformer")),
    ("clip_off", dict(mode="hooks", probe="transformer")),
    ("clip_off", dict(mode="bk", paradigm="lora", processes=1)),
    ("accountant_q", dict(mode="ghost", probe="transformer")),
    ("rank_noise", dict(mode="bk", paradigm="lora", processes=2)),
    # sharded (added after reports/selfcheck_mutants.json was written; run alone with --only 13 14: docs/results.md)
    (None, dict(mode="ghost_fsdp", paradigm="lora")),
    ("rank_noise", dict(mode="ghost_fsdp", paradigm="lora")),
    # bugs DP libraries shipped in 2026 (tests/testkit/mutants.py), where each can occur; --only 15 .. 25 --merge
    (None, dict(mode="ghost", probe="transformer")),
    (None, dict(mode="ghost", paradigm="rows", probe="linear")),
    (None, dict(mode="hooks", probe="transformer")),
    ("divisor_n", dict(mode="hooks", probe="transformer")),  # any mode: the divisor is the optimizer's
    ("divisor_n", dict(mode="ghost", paradigm="rows", probe="linear")),
    ("noise_on_mean", dict(mode="hooks", probe="transformer")),  # opacus' DPOptimizer
    ("noise_on_mean", dict(mode="bk", probe="transformer")),  # its fast-gradient-clipping optimizer
    ("ignore_index", dict(mode="ghost", probe="transformer")),  # two passes: the norms' loss is not the sum's
    ("shuffled_batches", dict(mode="ghost", probe="transformer")),  # q < 1 (at q = 1 every batch is the pool)
    ("shuffled_batches", dict(mode="ghost", paradigm="rows", probe="linear")),
    # book-keeping forms its sum from the norm pass: the same wrong loss in both, a wrong objective, not a leak
    ("ignore_index", dict(mode="bk", probe="transformer")),
    # user-level DP (finetune.dp.unit: user): each canary a user of several rows; --only 26 27 --merge
    (None, dict(paradigm="users")),
    ("user_clip_per_example", dict(paradigm="users")),  # rows clipped one by one, users accounted
]
#: setups whose mutant is not a privacy failure: the self-check passing them is right (their rows are kept apart from
#: the flag-rate table the report shows: ``expected_pass_rows``)
EXPECTED_PASS = {25}


def pick(sc: SelfcheckParams, match: dict) -> S.Config:
    (config,) = [c for c in S.configs_of(sc) if all(getattr(c, k) == v for k, v in match.items())]
    return config


def main() -> None:
    from testkit import mutants

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", default=None, help="default: selfcheck.mutants in params.yaml")
    ap.add_argument("--only", nargs="*", default=None, help="these setups only (numbers, in SETUPS order)")
    ap.add_argument("--merge", action="store_true", help="keep the rows already written, replacing the setups run")
    ap.add_argument("--first-seed", type=int, default=FIRST_SEED, choices=(FIRST_SEED, SECOND_SEED))
    args = ap.parse_args()
    S.quiet_q1()
    sc = load(SelfcheckParams, "selfcheck", ROOT / "params.yaml")
    family = len(sc.configs)
    os.chdir(ROOT)
    os.environ["PYTHONPATH"] = str(ROOT)
    rows, at = [], commit()  # the code the rows run (read before they run: a checkout may move meanwhile)
    for i, (name, match) in enumerate(SETUPS):
        if args.only is not None and str(i) not in args.only:
            continue
        config = pick(sc, match)
        t0, flags, named = time.time(), 0, collections.Counter()
        for s in range(args.first_seed, args.first_seed + args.seeds):
            os.environ["SELFCHECK_MUTANT"] = name or ""
            module = "testkit.mutants" if name and config.processes > 1 else "stages.tools.selfcheck.trials"
            ctx = mutants.mutant(name) if name and config.processes == 1 else contextlib.nullcontext()
            with ctx:
                (row,) = flow.check(sc, [config], seed=s, module=module, mutant=name, log=lambda _: None,
                                    family=family)
            flags += row["flagged"]
            named.update(row["broke"])
        rows.append({"mutant": name, "config": config.name, "seeds": args.seeds, "first_seed": args.first_seed,
                     "flagged": flags, "named": dict(sorted(named.items())), "seconds": round(time.time() - t0)})
        if args.merge:
            rows[-1].update(family=family, commit=at)
        rows[-1]["expected_pass"] = i in EXPECTED_PASS
        print(f"{str(name):18s} {config.name:46s} flagged {flags:2d}/{args.seeds}  {dict(named)}  "
              f"({rows[-1]['seconds']} s)", flush=True)
    out = Path(args.out or ROOT / sc.mutants)
    passing = [r for r in rows if r["expected_pass"]]
    rows = [r for r in rows if not r["expected_pass"]]
    for r in rows + passing:
        del r["expected_pass"]
    doc = {"family": family, "alpha": sc.alpha, "tests": 5, "rows": rows, "expected_pass_rows": passing}
    if args.merge and out.is_file():
        doc = json.loads(out.read_text())
        for key, new in (("rows", rows), ("expected_pass_rows", passing)):
            ran = {(r["mutant"], r["config"]) for r in new}
            doc[key] = [r for r in doc.get(key, []) if (r["mutant"], r["config"]) not in ran] + new
    report = read_record(MutantsReport, doc, str(out))  # the table's record: what the report reads back
    out.write_text(json.dumps(record_json(report), indent=1) + "\n")


def commit() -> str:
    """The commit the rows were run at (``+`` where the code differed from it: a change outside reports/)."""
    import subprocess

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!reports"], cwd=ROOT,
                           capture_output=True, text=True)
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


if __name__ == "__main__":
    main()
