"""``leakaudit doctor``: is this machine ready to run the pipeline? Each check is (ok, what, detail); nothing is
installed or downloaded, nothing secret is printed."""
from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from pathlib import Path

#: the packages the stages and flows import (distribution name -> module)
PACKAGES = {"torch": "torch", "transformers": "transformers", "peft": "peft", "opacus": "opacus",
            "datasets": "datasets", "pyarrow": "pyarrow", "great-expectations": "great_expectations",
            "prefect": "prefect", "dvc": "dvc", "scikit-learn": "sklearn", "gguf": "gguf", "matplotlib": "matplotlib"}


def _package(dist: str, module: str) -> tuple[bool, str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        importlib.import_module(module)
        return True, f"package {dist}", version(dist)
    except PackageNotFoundError:
        return True, f"package {dist}", "importable (no distribution metadata)"
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        return False, f"package {dist}", f"cannot import {module}: {type(exc).__name__}: {str(exc).splitlines()[0]}"


def _model(raw: dict) -> tuple[bool, str, str]:
    from stages.base_model.api import resolve
    from stages.shared.core.errors import StageError

    name = raw["model"]["name_or_path"]
    try:
        src = resolve(name)
    except StageError as exc:
        return False, "model.name_or_path", str(exc)
    if src.kind == "hub":
        cached = Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface")) / "hub"
        found = (cached / ("models--" + name.replace("/", "--"))).is_dir()
        return found, "model.name_or_path", f"hub id {name}: " + (
            "in the local HF cache" if found else "not in the local HF cache (this pipeline never downloads)")
    return True, "model.name_or_path", f"{name}: {src.kind} ({src.gguf_file or 'HF directory'})"


def _data(raw: dict, repo: Path) -> list[tuple[bool, str, str]]:
    out = []
    for name, spec in raw["preprocess"]["datasets"].items():
        p = repo / spec["path"]
        out.append((p.exists(), f"preprocess.datasets.{name}.path", f"{spec['path']}" + ("" if p.exists() else
                                                                                          ": not found")))
    return out


def _writable(what: str, folder: Path) -> tuple[bool, str, str]:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
        return True, what, f"{folder} is writable ({shutil.disk_usage(folder).free / 2**30:.1f} GiB free)"
    except OSError as exc:
        return False, what, f"{folder}: {exc.strerror or exc}"


def _dvc_cache(repo: Path) -> tuple[bool, str, str]:
    from stages.shared.core.vcs import VcsError, dvc

    try:
        return _writable("DVC cache", Path(dvc(repo, "cache", "dir").strip()))
    except VcsError as exc:
        return False, "DVC cache", str(exc)


def derived(repo: Path) -> str:
    """Per run, what params imply but do not state: the candidate pool (text rows, formatted rows and every canary,
    member or not), q = batch size / pool and the expected exposures q T, as the run's last fine-tune recorded them
    (run.json: public quantities); a run not trained yet says so."""
    from stages.finetune.schema import RUN_FILE, read_run
    from stages.params import load_params
    from stages.shared.core.formatting import Table, fmt, md_table

    params = load_params(repo / "params.yaml")
    t = Table(["run", "dataset", "batch size", "steps T", "candidate pool", "q", "q T", "DP"])
    for run, ft in params.runs.items():
        run_dir = repo / params.locations.run_dir(run)
        info = read_run(run_dir, run) if (run_dir / RUN_FILE).is_file() else None
        q = info.sample_rate if info else None
        t.rows.append([run, ft.dataset, ft.batch_size, ft.steps, info.n_population if info else "not trained yet",
                       fmt(q, 4) if q is not None else "–", fmt(q * ft.steps, 3) if q is not None else "–",
                       f"({ft.dp.epsilon}, {ft.dp.delta or 'n^-1.1'})" if ft.dp.enabled else "no"])
    return md_table(t)


def checks(repo: Path) -> list[tuple[bool, str, str]]:
    """Every check, in order; a failed import or missing file is a finding, never an exception."""
    import sys

    from stages.shared.core.errors import StageError
    from stages.shared.core.params import read_params

    found = [(sys.version_info >= (3, 10), "python", sys.version.split()[0])]
    found += [_package(d, m) for d, m in PACKAGES.items()]
    try:
        raw = read_params(repo / "params.yaml")
    except (StageError, OSError) as exc:
        return found + [(False, "params.yaml", str(exc))]
    found += [(True, "params.yaml", "read and parsed"), _model(raw), *_data(raw, repo)]
    found += [(bool(shutil.which("git")) and (repo / ".git").exists(), "git checkout",
               "found" if (repo / ".git").exists() else f"{repo} is not a git checkout (lineage needs a commit)"),
              _dvc_cache(repo), _writable("reports folder", repo / raw["report"]["out_dir"])]
    import torch

    found.append((True, "accelerator", f"CUDA: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
                  else "none (CPU; training still works, slower)"))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    found.append((True, "browser (optional)", chromium or "none: the report render test is skipped"))
    return found
