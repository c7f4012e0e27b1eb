"""The small adapter between Prefect and DVC: stage order from DVC's own graph, one stage run
through ``dvc repro --single-item`` (so dvc.lock stays the single source of truth), and the stage's
dvc.lock entry rendered for a Prefect artifact."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Callable

from stages.core import lineage


def stage_order(repo: str | Path) -> list[str]:
    """Every stage of dvc.yaml (foreach items expanded), dependencies before dependents."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(repo)) as r:
        graph = r.index.graph  # edges: stage -> the stage it depends on
        return [s.addressing for s in reversed(list(nx.topological_sort(graph)))]


def repro(stage: str, repo: str | Path, force: bool = False, echo: Callable[[str], None] = print) -> dict:
    """Run one stage through DVC; returns whether it ran (False = DVC found it up to date)."""
    cmd = ["dvc", "repro", "--single-item", stage] + (["--force"] if force else [])
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            lines.append(line)
            echo(line)
    rc = proc.wait()
    if rc != 0:
        errors = [ln for ln in lines if ln.startswith(("error:", "ERROR:"))]
        raise RuntimeError(f"dvc repro {stage} failed (exit {rc}): {(errors or lines or ['no output'])[-1]}")
    ran = any(f"Running stage '{stage}'" in ln for ln in lines)
    return {"stage": stage, "ran": ran}


def artifact_key(stage: str) -> str:
    return "dvc-lock-" + re.sub(r"[^a-z0-9-]+", "-", stage.lower()).strip("-")


def lock_markdown(repo: str | Path, stage: str) -> str:
    rec = lineage.stage_record(lineage.load_lock(Path(repo) / "dvc.lock"), stage)
    if rec is None:
        return f"# {stage}\n\nNo dvc.lock entry (stage has not completed)."
    git = lineage.git_state(Path(repo))
    rows = ["| kind | path | md5 |", "|---|---|---|"]
    rows += [f"| dep | `{d['path']}` | `{d['md5']}` |" for d in rec["deps"]]
    rows += [f"| out | `{o['path']}` | `{o['md5']}` |" for o in rec["outs"]]
    params = "\n".join(f"- `{k}`: `{v}`" for k, v in rec["params"].items()) or "- (none)"
    return (f"# dvc.lock: {stage}\n\n`{rec['cmd']}`\n\ngit commit `{git['commit']}`"
            f"{' (dirty)' if git['dirty'] else ''}\n\n" + "\n".join(rows) + f"\n\n## params\n{params}\n")


#: the report files the run's headline artifact links to
REPORT_FILES = (("HTML report (self-contained)", "index.html"), ("markdown report", "report.md"),
                ("every number", "metrics.json"), ("headline numbers (`dvc metrics diff`)", "headline.json"),
                ("lineage of every number", "lineage.json"))


def headline_artifact(repo: str | Path) -> str | None:
    """The report's headline block plus a table of links to the report files (None before a report exists)."""
    from stages.core.params import read_params

    report_dir = read_params(Path(repo) / "params.yaml")["report"]["out_dir"]
    folder = Path(repo).resolve() / report_dir
    head = folder / "headline.md"
    if not head.is_file():
        return None
    git = lineage.git_state(Path(repo))
    rows = ["| what | file |", "|---|---|"] + [f"| {what} | [{report_dir}/{name}]({(folder / name).as_uri()}) |"
                                               for what, name in REPORT_FILES if (folder / name).is_file()]
    return (f"# Headline\n\ngit commit `{git['commit']}`{' (dirty)' if git['dirty'] else ''}\n\n"
            + head.read_text() + "\n## Report\n\n" + "\n".join(rows) + "\n\n`leakaudit lineage "
            "reports/metrics.json:<path>` traces any number back to the raw files.\n")
