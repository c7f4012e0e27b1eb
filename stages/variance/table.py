"""The sweep table as markdown (the Prefect artifact and the report's appendix)."""
from __future__ import annotations

from typing import Mapping, Sequence


def _f(x, nd: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{nd}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{nd}f}".rstrip("0").rstrip(".") or "0"
    return str(x)


def markdown(rows: Sequence[Mapping], name: str, rev: str) -> str:
    head = ["point", "status", "ε", "b", "T", "η", "seed", "valid loss", "ε spent", "σ", "score mean", "score max",
            "ε̂95", "exposure", "experiment"]
    lines = [f"# Variance sweep {name}", "", f"Points from commit `{rev[:8]}`; each is a DVC experiment "
             "(`dvc exp show`, `dvc exp apply <point>`).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        status = r["status"] if r["status"] == "completed" else f"FAILED: {r.get('error') or ''}"[:160]
        lines.append("| " + " | ".join([
            r["point"], status, _f(r["epsilon"]), str(r["batch_size"]), str(r["steps"]), _f(r["lr"], 4),
            str(r["seed"]), _f(r.get("valid_loss")), _f(r.get("eps_spent")), _f(r.get("sigma")),
            _f(r.get("score_mean")), _f(r.get("score_max")), _f(r.get("eps_hat")), _f(r.get("exposure")),
            f"`{(r.get('rev') or '')[:8]}`" if r.get("rev") else "–"]).replace("\n", " ") + " |")
    return "\n".join(lines) + "\n"
