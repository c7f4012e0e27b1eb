"""The variance study's table as the flow writes it, from labelled synthetic models."""
from __future__ import annotations


def study_table(tmp_path, study, rows):
    """The study's table as the flow writes it (its metadata: the registered design), from synthetic rows."""
    import json
    from dataclasses import asdict

    from stages.variance.schema import AUDIT_POINTS, write_audit_points

    full = [{**{f: None for f in AUDIT_POINTS.names}, **r} for r in rows]
    path = tmp_path / "audit_points.parquet"
    write_audit_points(path, full, {"study": json.loads(json.dumps(asdict(study))), "recipe": {}, "primary": {}})
    return path


#: the committed variance study's ideal medians of eps_lb_95 per configuration (params.yaml variance.study)
STUDY_IDEAL_MEDIANS = {"A": 1.81, "B": 1.39, "C": 1.07, "D": 1.39}


def synthetic_models(study, done: int | None = None) -> list[dict]:
    """Labelled synthetic: every registered model with drawn values (config A leaks most), the first ``done``."""
    import numpy as np

    rng = np.random.default_rng(3)
    rows = []
    for i, (c, cfg) in enumerate(study.configs.items()):
        for s in study.seeds:
            eps = float(max(0.0, STUDY_IDEAL_MEDIANS[c] + rng.normal(0, 0.15)))
            rows.append({"point": f"study-{c}-s{s}", "config": c, "seed": s, "status": "completed", "rev": "ab" * 20,
                         "base_commit": "cd" * 20, "epsilon": 8.0, "delta": 1e-5, "accountant_epsilon": 7.99,
                         "sample_rate": cfg.batch_size / 1402, "steps": cfg.steps, "batch_size": cfg.batch_size,
                         "lr": cfg.lr, "noise_multiplier": 0.8 + 0.1 * i, "m": 1000, "r": 100, "v": 70 + int(10 * eps),
                         "k_pos": 100, "k_neg": 0,
                         "seed_status": "preregistered", "eps_lb_95": eps, "gdp_eps_lb_95": 1.4 * eps,
                         "member_shift": eps / 3, "ideal_eps_lb_95_median": STUDY_IDEAL_MEDIANS[c],
                         "valid_perplexity": 80 - 5 * eps + float(rng.normal()), "exposure": float(rng.normal(1, .2)),
                         "exposure_control": 1.0})
    return rows[:done] if done is not None else rows
