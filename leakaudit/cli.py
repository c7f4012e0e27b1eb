"""``leakaudit``: one entry point to the pipeline, in the style of ``dvc`` and ``lm_eval``.

    leakaudit run                      # the DVC pipeline through Prefect (one task per stage)
    leakaudit run --no-prefect         # plain `dvc repro`
    leakaudit sweep --name lr --set 'finetune.lr=0.001' --set 'finetune.lr=0.004'
    leakaudit report                   # rebuild reports/ (`dvc repro report`)
    leakaudit lineage reports/metrics.json:runs.dp_eps8.privacy.epsilon_spent
    leakaudit ui --cron "0 3 * * *"    # local Prefect server + the scheduled deployment; prints the URL
    leakaudit doctor                   # packages, model file, data paths, writable caches
    leakaudit selfcheck                # the DP engine audits itself -> reports/selfcheck.json
    leakaudit export-canaries --run ext --out export/   # a run's training set, to train elsewhere

Each subcommand only orchestrates: the stages, flows and DVC do the work. Errors are one line on stderr
(``error: ...``) with a non-zero exit.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

EXAMPLES = {
    "run": "leakaudit run                # whole pipeline through Prefect\n"
           "  leakaudit run --stages audit report\n  leakaudit run --no-prefect   # plain `dvc repro`",
    "sweep": "leakaudit sweep --name kinds --set 'canaries.kinds=[unigram];audit.primary.kind=unigram' \\\n"
             "      --set 'canaries.kinds=[bigram];audit.primary.kind=bigram'",
    "variance": "leakaudit variance           # the variance.sweep grid on Dask (one clone per point), then\n"
                "  leakaudit report             # `dvc repro report` analyses it (stage `variance`)",
    "report": "leakaudit report             # `dvc repro report`: reports/index.html, report.md, lineage.json",
    "lineage": "leakaudit lineage reports/metrics.json:runs.dp_eps8.audit_primary.eps_lb_95\n"
               "  leakaudit lineage reports/metrics.json:runs.nondp.privacy.steps --json",
    "ui": "leakaudit ui                 # UI at http://127.0.0.1:4200, deployment triggered from the UI\n"
          "  leakaudit ui --cron '0 3 * * *' --port 4300",
    "doctor": "leakaudit doctor             # exit 1 when a check fails",
    "selfcheck": "leakaudit selfcheck          # gradient canaries through the DP path in every clipping mode, probe\n"
                 "                               # and regime; tests the specification, writes reports/selfcheck.json, "
                 "exit 1 if flagged",
    "export-canaries": "leakaudit export-canaries --run ext --out /tmp/ext-export\n"
                       "                               # train.jsonl, dataset/, tokenizer/, export.json; the sealed "
                       "membership file\n                               # goes to runs.ext.external.membership",
    "release": "leakaudit release --run dp_eps8 --out /tmp/dp_eps8-release\n"
               "                               # config.json, model.safetensors, tokenizer, release_manifest.json "
               "(what was\n                               # left out: the membership file, auditor.json, run records)",
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="leakaudit", description=__doc__.split("\n\n")[0],
                                 epilog="subcommands:\n" + "\n".join(f"  {k:8s} {_first(v)}"
                                                                     for k, v in EXAMPLES.items()),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".", help="the project checkout (default: current directory)")
    sub = ap.add_subparsers(dest="command", required=True,
                            metavar="{run,sweep,variance,report,lineage,ui,doctor,selfcheck,export-canaries,release}")

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, epilog="example:\n  " + EXAMPLES[name],
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    run = add("run", "run the pipeline: Prefect flow over the DVC stages, or plain `dvc repro`")
    run.add_argument("--no-prefect", action="store_true", help="plain `dvc repro` (no Prefect)")
    run.add_argument("--stages", nargs="*", default=None, help="only these stages (and only if DVC finds them stale)")
    run.add_argument("--force", action="store_true", help="rerun even when DVC finds a stage up to date")
    run.epilog += ("\n\nexit codes: 0 done, 1 a stage failed (--no-prefect: DVC's code), 143 after SIGTERM and\n"
                   "130 after SIGINT, within 10 s: the running stage is stopped, no DVC lock is left held; the\n"
                   "next run skips finished stages and resumes a fine-tune from its last checkpoint")
    sweep = add("sweep", "sweep params through DVC experiments (flows.sweep; every flag is passed on)")
    sweep.add_argument("args", nargs=argparse.REMAINDER)
    var = add("variance", "empirical privacy variance: the variance.sweep grid of DP fine-tunes at a fixed epsilon, "
                          "one DVC experiment per point on Dask workers (flows.variance)")
    var.add_argument("--params", default="params.yaml")
    var.add_argument("--retabulate", action="store_true",
                     help="rebuild reports/variance/points.parquet from the experiments it names (no point reruns)")
    var.add_argument("--study", nargs="?", const="study", default=None, choices=("study", "silent"),
                     help="train a pre-registered study instead (variance.study: configurations x fresh seeds; "
                          "--study silent: variance.silent, settings the accountant does not see); resumable: "
                          "completed models in its table are kept")
    var.add_argument("--plan", action="store_true", help="with --study silent: write its power statement, stop")
    add("report", "rebuild the report (`dvc repro report`)")
    lin = add("lineage", "print where one reported number comes from, back to the raw files' md5")
    lin.add_argument("target", help="FILE:dotted.path, e.g. reports/metrics.json:runs.nondp.privacy.steps")
    lin.add_argument("--json", action="store_true", help="machine-readable output")
    ui = add("ui", "start a local Prefect server and serve the pipeline deployment (Ctrl-C stops both)")
    ui.add_argument("--port", type=int, default=4200)
    ui.add_argument("--cron", default=None, help="schedule, e.g. '0 3 * * *' (none: trigger from the UI)")
    ui.add_argument("--name", default="leakage-audit", help="deployment name")
    add("doctor", "check the environment: packages, model file, data paths, writable caches").add_argument(
        "--params", action="store_true", help="print each run's derived values instead (pool, q = batch / pool, q T)")
    sc = add("selfcheck", "the DP engine audits itself: gradient canaries trained through the fine-tune's own DP path, "
                          "tested against the mechanism its accountant booked (params: selfcheck)")
    sc.add_argument("--params", default="params.yaml")
    sc.add_argument("--out", default=None, help="default: selfcheck.out in the params")
    _handoff_commands(add)
    return ap


def _handoff_commands(add) -> None:
    """export-canaries and release: a run's data out to a trainer elsewhere, and its model out alone."""
    ex = add("export-canaries", "write a run's canary-augmented training set (no membership column) to train it "
                                "elsewhere, and the sealed membership file the audit of that model reads")
    ex.add_argument("--run", required=True, help="the run whose params decide the set (runs.<run>)")
    ex.add_argument("--out", required=True, help="directory to write (replaced atomically)")
    ex.add_argument("--membership", default=None,
                    help="where the auditor keeps the membership file (default: runs.<run>.external.membership)")
    ex.add_argument("--params", default="params.yaml")
    rl = add("release", "write a run's model as a plain transformers model (and tokenizer) alone, with a manifest of "
                        "what was left out (the membership file, the auditor's record, the pipeline's records)")
    rl.add_argument("--run", required=True)
    rl.add_argument("--out", required=True, help="directory to write (replaced atomically)")
    rl.add_argument("--params", default="params.yaml")
    ex.add_argument("--no-repro", action="store_true",
                    help="do not `dvc repro` the stages the export reads (base model, data, secrets, canaries)")


def _first(text: str) -> str:
    return text.splitlines()[0]


def main(argv: Sequence[str] | None = None) -> None:
    """Dispatch a subcommand; errors and exit codes as in every stage CLI (stages.shared.core.cli.run_cli)."""
    from stages.shared.core.cli import run_cli

    def dispatch(argv: Sequence[str] | None) -> None:
        args = _parser().parse_args(argv)
        raise SystemExit(COMMANDS[args.command](args) or 0)

    run_cli(dispatch, argv)


def cmd_run(args) -> int:
    """Exit 0 when every stage is done; 1 when one failed (--no-prefect: DVC's code); 143 after SIGTERM, 130 after
    SIGINT, within seconds (flows.runtime.dvc_adapter.exit_on_signal): the running stage's process group is stopped, DVC
    leaves no lock held, and the next run skips the finished stages and resumes a fine-tune from its checkpoint."""
    from flows.runtime.dvc_adapter import changed_stages, exit_on_signal, run_dvc, stage_graph, time_table

    with exit_on_signal():
        if args.no_prefect:
            return run_dvc(["dvc", "repro"] + (["--force"] if args.force else []) + list(args.stages or []), args.repo)
        if not args.force and not changed_stages(args.repo):  # one `dvc status`: nothing to run, no flow to start
            order, _ = stage_graph(args.repo)
            print("every stage matches dvc.lock (dvc status): nothing ran")
            print(time_table([{"stage": s, "ran": False, "seconds": 0.0} for s in order]))
            return 0
        from stages.shared.core.prefect_env import apply_offline_defaults

        apply_offline_defaults()
        from flows.pipeline import pipeline

        state = pipeline(repo=args.repo, stages=args.stages, force=args.force, return_state=True)
        if state.is_completed():
            print(time_table(state.result()))
        return 0 if state.is_completed() else 1


def cmd_sweep(args) -> int:
    from stages.shared.core.prefect_env import apply_offline_defaults

    apply_offline_defaults()
    from flows.sweep import main as sweep_main

    sweep_main(["--repo", args.repo, *args.args] if "--repo" not in args.args else args.args)
    return 0


def cmd_variance(args) -> int:
    from stages.shared.core.prefect_env import apply_offline_defaults

    apply_offline_defaults()
    from flows.variance import main as variance_main

    variance_main(["--repo", args.repo, "--params", args.params, *(["--retabulate"] if args.retabulate else []),
                   *(["--study", args.study] if args.study else []), *(["--plan"] if args.plan else [])])
    return 0


def cmd_report(args) -> int:
    from flows.runtime.dvc_adapter import exit_on_signal, run_dvc

    with exit_on_signal():
        return run_dvc(["dvc", "repro", "report"], args.repo)


def cmd_lineage(args) -> int:
    from leakaudit.trace import trace

    result = trace(args.target, Path(args.repo))
    print(json.dumps(result, indent=2) if args.json else render_trace(result))
    return 0


def render_trace(t: dict) -> str:
    """The chain as text: value -> producing stage -> params -> inputs' md5 -> upstream stages -> raw files -> git."""
    from stages.shared.core.formatting import flatten

    lines = [f"{t['path']} = {t['value']!r}", f"  in {t['file']}, written by stage '{t['stage']}'"]
    for i, s in enumerate(t["chain"]):
        lines.append(f"\n{'stage' if i == 0 else 'upstream'} {s['stage']}: {s['cmd']}")
        params = flatten(s["params"])
        for key, value in params.items():
            text = json.dumps(value)
            lines.append(f"    param  {key} = {text if len(text) <= 70 else text[:67] + '...'}")
        for d in s["deps"]:
            lines.append(f"    input  {d['path']}  md5 {d['md5']}  ({d['from']})")
    lines.append("\nraw data at the root of the chain:")
    lines += [f"    {r['path']}  md5 {r['md5']}" for r in t["raw"]] or ["    (none)"]
    git = t["git"]
    lines.append(f"\ngit commit {git.get('commit') or 'unknown'}"
                 + (" (working tree DIRTY: code or params differ from the commit)" if git.get("dirty") else " (clean)")
                 + ("; dvc status: no code, params or data dep of the chain changed since dvc.lock" if t.get("checked")
                    else ""))
    if t.get("not_in_workspace"):
        lines.append("not in this workspace (a clean clone: `dvc repro` or `dvc pull` brings them; dvc.lock's md5 "
                     "above identify them): " + ", ".join(t["not_in_workspace"]))
    return "\n".join(lines)


def cmd_ui(args) -> int:
    from leakaudit.ui import serve_with_server

    return serve_with_server(str(Path(args.repo).resolve()), args.port, args.name, args.cron)


def cmd_selfcheck(args) -> int:
    from leakaudit.selfcheck import main as selfcheck_main

    return selfcheck_main(["--params", str(Path(args.repo) / args.params)]
                          + (["--out", args.out] if args.out else []))


def cmd_export_canaries(args) -> int:
    from stages.finetune.params import load_finetune
    from stages.shared.core.params import read_params
    from stages.shared.datasets import get_dataset
    from stages.tools.handoff.export import export_for

    repo = Path(args.repo)
    params = repo / args.params
    if not args.no_repro:
        raw = read_params(params)
        spec = get_dataset(load_finetune(args.run, params, raw).dataset, raw)
        stages = ["canaries"] + ([f"secrets@{spec.secrets}"] if spec.secrets else [])
        from flows.runtime.dvc_adapter import exit_on_signal, run_dvc
        from stages.shared.core.errors import StageError

        with exit_on_signal():
            rc = run_dvc(["dvc", "repro", *stages], repo)
        if rc:
            raise StageError(f"dvc repro {' '.join(stages)} failed (exit {rc}): nothing exported")
    membership = Path(args.membership) if args.membership else None
    manifest = export_for(args.run, params, Path(args.out), membership)
    print(f"exported {manifest['rows']} rows ({manifest['canary_rows']} member canaries) to {args.out}; "
          f"membership sha-256 {manifest['membership_sha256']}")
    return 0


def cmd_release(args) -> int:
    from stages.tools.handoff.release import release_for

    manifest = release_for(args.run, Path(args.repo) / args.params, Path(args.out))
    print(f"released run {args.run}: {len(manifest['files'])} files to {args.out}; left out: "
          f"{', '.join(manifest['left_out'])}")
    return 0


def cmd_doctor(args) -> int:
    from leakaudit.doctor import checks, derived

    if args.params:
        print(derived(Path(args.repo)))
        return 0
    failed = 0
    for ok, what, detail in checks(Path(args.repo)):
        failed += not ok
        print(f"[{'ok' if ok else 'FAIL'}] {what}: {detail}")
    print("all checks passed" if not failed else f"{failed} check(s) failed")
    return 1 if failed else 0


COMMANDS = {"run": cmd_run, "sweep": cmd_sweep, "variance": cmd_variance, "report": cmd_report, "lineage": cmd_lineage,
            "ui": cmd_ui, "doctor": cmd_doctor, "selfcheck": cmd_selfcheck, "export-canaries": cmd_export_canaries,
            "release": cmd_release}

if __name__ == "__main__":
    main()
