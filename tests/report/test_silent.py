"""The report's account of the second variance study (stages/report/sections/silent.py) from the variance stage's
structured result: the question, each setting's paired test with its Holm verdict, the power stated before the
models, and every model. Synthetic rows (labelled: values drawn here, no model trained)."""
from dataclasses import asdict

import numpy as np
from testkit.project import params

from stages.report.sections.silent import second_study
from stages.variance.paired import analyse_silent
from stages.variance.params import SilentParams


def result(study, rows, analysed=True):
    models = [{**r, "point": f"silent-{r['config']}-s{r['seed']}", "rev": "abcdef0123", "r": 100, "m": 1000,
               "ideal_eps_lb_95_median": 1.2, "valid_perplexity": 90.0, "sample_rate": 0.23,
               "noise_multiplier": 0.70, "accountant_epsilon": 7.99} for r in rows]
    return {"run": study.run, "epsilon": study.epsilon, "delta": study.delta, "base": study.base,
            "configs": {c: asdict(v) for c, v in study.configs.items()}, "registered": 24,
            "completed": len(rows), "failed": [], "pending": 24 - len(rows), "models": models,
            "plan": {"effect": 8.0, "power": {"8.0": 0.809}, "ideal_v": {"mean": 84.0, "sd": 3.8},
                     "assumption": "independent draws of the ideal"},
            "analysis": analyse_silent(rows, study) if analysed else None}


def rows_of(values):
    return [{"config": c, "seed": 3301 + i, "status": "completed", "v": float(v), "member_shift": v / 100,
             "eps_lb_95": v / 50} for c, vs in values.items() for i, v in enumerate(vs)]


def test_the_answer_names_each_setting_its_test_and_the_stated_power():
    study = params(SilentParams, "variance.silent")
    base = np.arange(80, 88, dtype=float)
    paras, tables = second_study(result(study, rows_of({"base": base, "lr_quarter": base - 9,
                                                         "adamw": base + np.array([1, -1, 2, -2, 1, -1, 0, 3])})))
    text = " ".join(paras)
    assert "does what leaks vary beyond what (q, T, σ) predict?" in text and "yes: " not in text
    assert text.count("the audit's count differs: ") == 1 and "as configured here" in text
    assert "a lower count under one attack is not less leakage" in text
    assert "lr_quarter − base in v: median -9.000" in text and "Holm p = 0.016: differs" in text
    assert "adamw − base in v" in text and "not shown to differ" in text
    assert "probability 0.809" in text and "b = 322, T = 5" in text
    assert len(tables[0].rows) == 24 and tables[0].rows[0][4] == "80 of 100"


def test_before_every_model_has_run_nothing_is_concluded_and_no_table_means_no_text():
    study = params(SilentParams, "variance.silent")
    paras, _ = second_study(result(study, rows_of({"base": [80.0]}), analysed=False))
    assert "1 of 24 models have completed" in paras[0] and not any("Answer" in p for p in paras)
    assert second_study(None) == ([], [])
