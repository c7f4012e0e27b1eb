"""The analysis stage's work: read the sweep table, analyse each score statistic, draw the plots."""
from __future__ import annotations

from pathlib import Path

from .analysis import analyse, config_key
from .paired import silent_result
from .params import VarianceParams
from .plots import eps_delta, jitter_plot, profiles_plot, selection_plot, study_plot
from .schema import SCORE_COLUMNS, read_points
from .study import study_result

STATS = ("mean", "max")


def analyse_table(params: VarianceParams) -> tuple[dict, list[dict]]:
    """The analysis of every statistic (the primary first), the pre-registered study's account and the sweep
    table's rows."""
    rows, meta = read_points(params.table)
    stats = (params.primary, *[s for s in STATS if s != params.primary])
    per = {s: analyse(rows, SCORE_COLUMNS[s], params.min_points, params.control_alpha) for s in stats}
    first = per[params.primary]
    return {"sweep": meta.get("sweep"), "base_commit": meta.get("base_commit"), "measure": params.measure,
            "primary": params.primary, "control_alpha": params.control_alpha, "points": first["points"],
            "completed": first["completed"],
            "failed": first["failed"], "table": [{k: r[k] for k in ("point", "rev", "status")} for r in rows],
            "statistics": {s: a["epsilons"] for s, a in per.items()},
            "study": study_result(params.study, Path(params.study.table)),
            "second_study": silent_result(params.silent, Path(params.silent.table))}, rows


def draw(result: dict, rows: list[dict], params: VarianceParams, out: Path) -> dict[str, str]:
    """Every plot into ``out`` from the analysis (configuration means, picks, profiles; the study's models) and, for
    the jitter plot's per-seed crosses, the completed rows; returns name -> file name."""
    done = [r for r in rows if r["status"] == "completed"]
    files: dict[str, str] = {}
    study = result["study"]
    if study["completed"]:
        study_plot(study, out / "study.png")
        files["study"] = "study.png"
    if not done:
        return files
    jitter_plot(done, [SCORE_COLUMNS[s] for s in result["statistics"]], params.measure.upper(), out / "jitter.png")
    files["jitter"] = "jitter.png"
    primary = SCORE_COLUMNS[params.primary]
    for key, a in result["statistics"][params.primary].items():
        means = [m for m in a["config_means"] if m[primary] is not None and m["utility"] is not None]
        if a["picks"]:
            at = {config_key(m): i for i, m in enumerate(means)}
            picks = {name: at[tuple(cfg)] for name, cfg in a["picks"].items()}
            selection_plot(means, primary, picks, params.measure.upper(), eps_delta(key, a["deltas"]),
                           out / f"selection_eps{key}.png")
            files[f"selection_eps{key}"] = f"selection_eps{key}.png"
        if a["profiles"]:
            profiles_plot(a["profiles"], eps_delta(key, a["deltas"]), out / f"profiles_eps{key}.png")
            files[f"profiles_eps{key}"] = f"profiles_eps{key}.png"
    return files
