"""Do the structural artifacts hash the same on another machine? A stand-in for a second machine of the same kind:
the same code and inputs run under two CPU kernel paths of torch (``ATEN_CPU_CAPABILITY``: avx2 and the machine's
default), whose float results differ in the last bits, as another CPU's would.

Runs ``secrets@<dataset>`` (every dataset of ``secrets.datasets``) and ``canaries`` twice into a temporary folder
(nothing under data/ is touched) and prints each output file's md5 under both, and whether they agree. The
structural files (which secrets, which canaries, who is a member) must agree; the reference (base-model) scores
in data/reference/ may not.

    python benchmarks/kernel_hashes.py [--params params.yaml] [--out /tmp/kernel_hashes] [--project DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CAPABILITIES = ("avx2", "default")


def params_for(params: Path, out: Path) -> Path:
    """A copy of ``params`` whose secrets/canaries outputs (structure and reference scores) go under ``out``."""
    p = yaml.safe_load(params.read_text())
    p["secrets"].update(out_dir=str(out / "secrets"), reference_dir=str(out / "reference" / "secrets"))
    p["canaries"].update(out_dir=str(out / "canaries"), reference_out=str(out / "reference" / "canaries.parquet"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "params.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path


def run_stages(params: Path, capability: str, project: Path) -> None:
    """secrets@<each dataset> and canaries with ``params``, in ``project`` (where its relative inputs are)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if capability != "default":
        env["ATEN_CPU_CAPABILITY"] = capability
    datasets = yaml.safe_load(params.read_text())["secrets"]["datasets"]
    for cmd in [["stages.secrets", "--dataset", d] for d in datasets] + [["stages.canaries"]]:
        subprocess.run([sys.executable, "-m", *cmd, "--params", str(params)], cwd=project, env=env, check=True)


def digests(folder: Path) -> dict[str, str]:
    return {str(f.relative_to(folder)): hashlib.md5(f.read_bytes()).hexdigest()[:8]
            for f in sorted(folder.rglob("*")) if f.is_file() and f.name != "params.yaml"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--out", type=Path, default=Path("/tmp/kernel_hashes"))
    ap.add_argument("--project", type=Path, default=ROOT,
                    help="the reproduced project the params' relative inputs are in (default: this checkout)")
    args = ap.parse_args()
    found = {}
    for cap in CAPABILITIES:
        run_stages(params_for(args.params, args.out.resolve() / cap), cap, args.project)
        found[cap] = digests(args.out / cap)
    for name in sorted(set().union(*found.values())):
        a, b = (found[c].get(name, "-") for c in CAPABILITIES)
        print(f"{name:40s} {a} {b} {'same' if a == b else 'DIFFERS'}")


if __name__ == "__main__":
    main()
