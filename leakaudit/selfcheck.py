"""``leakaudit selfcheck`` (``python -m leakaudit.selfcheck``): the DP engine audits itself. Orchestration only: each
configuration is trained by stages/tools/selfcheck/trials.py and judged by stages/tools/selfcheck/verdict.py; the table
is
printed and reports/selfcheck.json written (exit 1 when a configuration is flagged)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Sequence

from stages.tools.selfcheck import trials
from stages.tools.selfcheck import verdict as judge
from stages.tools.selfcheck.params import SelfcheckParams


def check(sc: SelfcheckParams, configs: Sequence[trials.Config] | None = None, seed: int | None = None,
          module: str = "stages.tools.selfcheck.trials", mutant: str | None = None,
          log: Callable[[str], None] = print, family: int | None = None) -> list[dict]:
    """Train and judge every configuration; rows as reports/selfcheck.json holds them. ``family``: the number of
    configurations the tests are corrected for (default: those checked here; a test checking one configuration at
    the default set's level passes the default set's size). ``module``/``mutant``: a test's broken engine
    (tests/testkit/mutants.py) for the torchrun workers, and its name."""
    configs = list(configs or trials.configs_of(sc))
    base = sc.seed if seed is None else seed
    rows = []
    for k, config in enumerate(configs):
        trial = trials.run_trial(sc, config, base * 1000 + k, module)
        rows.append({"config": config.name, "mode": config.mode, "paradigm": config.paradigm,
                     "processes": config.processes, "mutant": mutant, "seed": base * 1000 + k,
                     **judge.verdict(trial, config, sc.guesses_in, sc.guesses_out, sc.alpha, family or len(configs))})
        log(judge.format_row(rows[-1]))
    return rows


def design(sc: SelfcheckParams) -> dict:
    return {k: getattr(sc, k) for k in ("canaries", "transformer_canaries", "guesses_in", "guesses_out", "epsilon",
                                        "delta", "max_grad_norm", "accountant", "gradient_scale", "lr", "alpha",
                                        "rows_per_user", "seed")}


def main(argv: Sequence[str] | None = None) -> int:
    from stages.shared.core.cli import configure_process
    from stages.shared.core.io import write_json
    from stages.shared.core.params import PARAMS_FILE, load
    from stages.shared.core.records import record_json

    ap = argparse.ArgumentParser(prog="leakaudit selfcheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default=PARAMS_FILE)
    ap.add_argument("--out", default=None, help="default: selfcheck.out, relative to the params file's folder")
    args = ap.parse_args(argv)
    configure_process()
    trials.quiet_q1()
    sc = load(SelfcheckParams, "selfcheck", args.params)
    print(f"DP engine self-check: {sc.canaries} gradient canaries ({sc.transformer_canaries} in the transformer "
          f"probe), claimed ({sc.epsilon}, {sc.delta})-DP, {len(sc.configs)} configurations x "
          f"{len(judge.TESTS)} tests, each at {judge.level(sc.alpha, len(sc.configs)):.2g}")
    print(judge.HEADER)
    doc = judge.document(design(sc), check(sc))
    write_json(Path(args.out) if args.out else Path(args.params).parent / sc.out, record_json(doc))
    print("every configuration passes" if doc.all_pass else "FLAGGED: see the rows above")
    return 0 if doc.all_pass else 1


if __name__ == "__main__":
    raise SystemExit(main())
