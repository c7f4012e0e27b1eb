"""Report sections that turn checks into words: the blind-baseline verdicts and the canary-kind comparison."""
from dataclasses import replace
from pathlib import Path

from testkit.records import committed_metrics, group, metrics, run_metrics

from stages.audit.schema import (
    Blind,
    Difference,
    Interval,
    LargestAuroc,
    Power,
    ShiftCheck,
    ShiftPool,
    TrainableSummary,
    Verdict,
)
from stages.report.inputs import Inputs
from stages.report.render import to_markdown
from stages.report.sections.blind import blind_section
from stages.report.sections.canary_designs import _kinds_sentence
from stages.shared.bounds.keys import BoundKeys


def _pool(auroc, p, flagged, d, fp, v):
    return Blind(items=40, folds=5, members=20, non_members=20, auroc=auroc, pool=fp,
                 auroc_ci95=[auroc - .1, auroc + .1], p_value=p, flagged=flagged, verdict=Verdict(v),
                 test="Mann-Whitney (normal approximation)", detectable_auroc=None,
                 differences=[Difference(feature="log characters", members=4.1, non_members=5.0, d=d)])


def _row(pool, runs, attacks):
    return ShiftPool(pool=pool.pool, group="text", runs=runs, power=Power(auroc=0.7, power=0.8, trials=500, level=0.01),
                     largest_model_auroc={r: LargestAuroc(auroc=0.8, attack=a) for r, a in zip(runs, attacks)},
                     verdicts={r: pool.verdict for r in runs}, members=pool.members, non_members=pool.non_members,
                     auroc=pool.auroc, auroc_ci95=pool.auroc_ci95, p_value=pool.p_value, test=pool.test,
                     flagged=pool.flagged)


def _inputs(runs, rows):
    check = ShiftCheck(alpha=0.05, family_size=len(rows), per_test_alpha=0.05 / max(len(rows), 1),
                       correction="bonferroni", power_model="binormal", flagged=[], pools=rows)
    audit_params = replace(committed_metrics().audit_params, min_per_side=10)
    return Inputs(metrics(runs=runs, shift_check=check, audit_params=audit_params), {}, None, {}, {}, True, Path("."),
                  Path("."))


def test_a_flagged_pool_is_called_invalid_and_says_what_differs():
    a = _pool(0.85, 0.001, True, -1.3, "aaaaaaaaaaaa", "shift")
    b = _pool(0.5, 0.4, False, 0.1, "bbbbbbbbbbbb", "no_shift")
    mb = Interval(value=0.02, ci95=[-0.05, 0.09])
    runs = {"a": run_metrics(attacks={"loss": {"text": group(0.8, auroc_ci95=[0.7, 0.9])}}, blind={"text": a}),
            "b": run_metrics(attacks={"loss": {"text": group(0.82, auroc_ci95=[0.7, 0.9], minus_blind=mb)}},
                             blind={"text": b}),
            "c": run_metrics(attacks={"zlib": {"text": group(0.75, auroc_ci95=[0.6, 0.8], minus_blind=mb)}},
                             blind={"text": b})}
    md = to_markdown("t", [blind_section(_inputs(runs, [_row(a, ["a"], ["loss"]),
                                                        _row(b, ["b", "c"], ["loss", "zlib"])]))], Path("."))
    rows = [ln for ln in md.splitlines() if ln.startswith("| text ")]
    assert len(rows) == 2  # b and c share one pool: one row
    assert "INVALID MIA: distribution shift" in rows[0] and "log characters" in rows[0] and "d = -1.30" in rows[0]
    assert "no shift detected" in rows[1] and "no length/format feature differs" in rows[1]
    assert "b, c" in rows[1] and "b (loss): 0.020 [-0.050, 0.090]; c (zlib): 0.020" in rows[1]
    assert "0.05/2" in md


def test_kinds_sentence_is_true_to_the_parameterisation():
    t = TrainableSummary(paradigm="lora", lora_r=8, lora_targets=["q_proj", "v_proj"], virtual_tokens=16,
                         new_token_rows=1000, secret_token_rows=990, parameters=2_000_000, secret_rows=True)
    fair = _kinds_sentence({"nondp": t})
    assert "differ only in how the secret is chosen" in fair and "990 vocabulary tokens" in fair and "LoRA r=8" in fair
    unfair = _kinds_sentence({"nondp": replace(t, secret_rows=False, secret_token_rows=0)})
    assert "Not a like-for-like comparison" in unfair and "differ only" not in unfair


def test_canary_response_and_study_sections_show_what_explains_the_audit(tmp_path):
    import json

    from stages.audit.schema import AttackResponse, CanaryResponse, ResponseBin
    from stages.finetune.schema import RUN_VERSION, AuditorRecord
    from stages.report.sections.response import response_section
    from stages.report.sections.study import study_section

    bins = {b: ResponseBin(canaries=n, mean_z=z, ci95=[z - .1, z + .1], ideal_z=iz)
            for b, n, z, iz in (("0", 550, 0.0, 0.0), ("1", 150, 0.2, 0.39), ("2", 150, 0.5, 0.78),
                                ("3+", 150, 0.8, 1.3))}
    response = CanaryResponse(kind="new_token", bins=["0", "1", "2", "3+"], ideal_model="linear",
                              attacks={"whitebox": AttackResponse(bins=bins, z_per_inclusion=0.27, member_shift=None,
                                                                  ideal_z_per_inclusion=0.39)})
    runs = {"dp": run_metrics("dp_eps8", canary_response=response), "nondp": run_metrics(canary_response=None)}
    gradients = {"new_token": {"canaries": 32, "clip_norm": 1.0, "norm_median": 51.0, "norm_p10": 45.0,
                               "norm_p90": 57.0, "clipped_share": 1.0, "own_rows_share_median": 0.99,
                               "own_rows_share_p10": 0.91}}
    auditor = {"dp": AuditorRecord(version=RUN_VERSION, run="dp", n_examples=150, n_text_rows=100,
                                   n_member_canaries={"new_token": 50}, n_formatted_rows=0,
                                   canary_share_of_tokens=0.1, formatted_canary_share_of_tokens=0.0,
                                   canary_share_of_loss_tokens=0.2, formatted_canary_share_of_loss_tokens=0.0,
                                   expected_drawn_batch=34.5, canary_gradients=gradients)}
    assert "51.0" not in to_markdown("t", [response_section(runs)], Path("."))  # metrics.json alone: no gradients
    md = to_markdown("t", [response_section(runs, auditor)], Path("."))
    assert "whitebox: mean z [95% CI]" in md and "ideal canary z (linear model)" in md
    assert "| dp | 3+ | 150 | 0.800 [0.700, 0.900] | 1.300 |" in md.replace("0.8 ", "0.800 ")
    assert "51.0" in md and "own rows" in md and "auditor-only" in md  # the member statistic, labelled
    assert study_section(tmp_path) is None  # no study yet: no section
    row = {"phase": "recipes", "recipe": "dp_sgd", "profile": "p", "design": "whitebox k+100 k-0", "v": 80, "r": 100,
           "eps_lb_95": 0.9, "ideal_eps_lb_95_median": 1.3, "valid_perplexity": 30.0}
    summary = [{"phase": "confirmation", "profile": "p", "design": "whitebox k+100 k-0", "threat_model": "white-box",
                "seeds": [100, 101], "median_eps_lb_95": 1.1, "median_gdp_eps_lb_95": 1.5, "median_ideal": 1.3,
                "max_eps_lb_95": 1.2, "accountant_epsilon": 8.0,
                "median_valid_perplexity": 30.0}]
    (tmp_path / "study.json").write_text(json.dumps({"rows": [row], "summary": summary, "committed_primary": {
        "attack": "whitebox", "kind": "new_token", "k_pos": 100, "k_neg": 0}}))
    md = to_markdown("t", [study_section(tmp_path, {"whitebox": "white-box weights"})], Path("."))
    assert "recipe (descriptive, one seed)" in md and "dp_sgd" in md and "white-box weights" in md
    assert "confirmation" in md and "1.2" in md and "÷" not in md


def test_canary_designs_reads_the_bound_at_the_audits_clipped_guess_counts():
    """The primary asks for more guesses than a kind has canaries: the audit clipped them (audit.schema.clip_guesses),
    and the report must find the exploratory test at the clipped counts, not show no bound."""
    from stages.audit.schema import ExploratoryTest
    from stages.report.sections.canary_designs import _family_bound

    tests = [ExploratoryTest(attack="loss", same_ranking=[], kind="random", m=40, k_pos=40, k_neg=0, r=40, v=40,
                             bounds={"eps_lb_95": 1.2}),
             ExploratoryTest(attack="loss", same_ranking=[], kind="random", m=40, k_pos=10, k_neg=10, r=20, v=20,
                             bounds={"eps_lb_95": 0.4})]
    r = run_metrics(audit_exploratory=replace(committed_metrics().runs["nondp"].audit_exploratory, tests=tests))
    assert _family_bound(r, "loss", "random", {"k_pos": 100, "k_neg": 50}, BoundKeys(0.95)) == 1.2
    assert _family_bound(r, "loss", "random", {"k_pos": 10, "k_neg": 10}, BoundKeys(0.95)) == 0.4
    assert _family_bound(r, "zlib", "random", {"k_pos": 10, "k_neg": 10}, BoundKeys(0.95)) is None


def test_training_table_needs_no_timings():
    """Run records carry no train_seconds (timings are not artifacts): the training table neither reads nor shows
    them."""
    from stages.audit.schema import Training, Utility
    from stages.finetune.schema import PrivacyRecord
    from stages.report.sections.training import training_section

    run = run_metrics("dp_eps8", dataset="personachat",
                      privacy=PrivacyRecord(dp=True, noise_multiplier=0.8, max_grad_norm=1.0, grad_sample_mode="bk",
                                            epsilon_spent=8.0, sample_rate=0.2, steps=10, secure_rng=False),
                      training=Training(sample_rate=0.2, steps=10, expected_exposures_per_member=2.0,
                                        n_population=100, public_divisor=None),
                      utility=Utility(valid_nll=None, valid_perplexity=70.0))
    md = to_markdown("t", [training_section(_inputs({"dp": run}, []))], Path("."))
    assert ("seconds" not in md
            and "| dp | personachat | yes | 0.800 | 1.000 | 0.200 | 10 | 2.000 | 100 | 70.000 |" in md)


def test_selfcheck_section_shows_each_regime_the_power_and_the_mutants(tmp_path):
    """The committed self-check (reports/selfcheck.json) and the mutants' flag rates, as the report shows them."""
    import json

    from testkit.project import ROOT

    from stages.report.sections.selfcheck import selfcheck_section

    data = json.loads((ROOT / "reports/selfcheck.json").read_text())
    mutants = tmp_path / "mutants.json"
    mutants.write_text(json.dumps({"family": 17, "alpha": 0.001, "tests": 5, "rows": [
        {"mutant": None, "config": "bk/linear:lora/q1xT1/sgd/1p", "seeds": 20, "first_seed": 0, "flagged": 0,
         "named": {}, "seconds": 9},
        {"mutant": "noise_x0.9", "config": "hooks/transformer:rows/q0.5xT4/adamw/1p", "seeds": 20, "first_seed": 0,
         "flagged": 20, "named": {"noise scale": 20}, "seconds": 9}], "expected_pass_rows": []}))
    md = to_markdown("t", [selfcheck_section(ROOT / "reports/selfcheck.json", mutants)], Path("."))
    assert md.count("| pass |") == len(data["rows"]) and "transformer" in md and "adamw" in md
    assert "noise ÷ booked [CI]" in md and "0.9 × the booked σ" in md and "Not checked:" in md
    assert "| none (the correct engine) | bk/linear:lora/q1xT1/sgd/1p | 0 of 20 | — |" in md
    assert "| noise_x0.9 |" in md and "noise scale (20)" in md
    assert selfcheck_section(tmp_path / "missing.json") is None


def test_the_variance_section_states_q1_and_q2_with_the_papers_numbers(tmp_path):
    """The study's account (labelled synthetic models, stages/variance) rendered: while models are missing, no Q1 /
    Q2 and a statement why; complete, Q1 in one sentence with H, p and the effect size, Q2 with rho and its interval,
    the numbers of Hu et al. 2025 beside them, and the assumptions."""
    import dataclasses

    from testkit.project import params
    from testkit.studies import study_table, synthetic_models

    from stages.report.sections.variance import _study
    from stages.variance.params import VarianceParams
    from stages.variance.study import study_result

    study = dataclasses.replace(params(VarianceParams, "variance").study, bootstrap=200, power_trials=40)
    part = study_result(study, study_table(tmp_path, study, synthetic_models(study, 3)))
    paras, tables, images = _study(part, tmp_path, {})
    text = " ".join(paras)
    assert "3 of 20 models" in text and "nothing is concluded" in text and "Kruskal" not in text
    assert "−0.71" in text and len(tables[1].rows) == 3 and images == []
    full = study_result(study, study_table(tmp_path, study, synthetic_models(study)))
    paras, tables, images = _study(full, tmp_path, {"study": "study.png"})
    text = " ".join(paras)
    assert "Q1" in text and "Kruskal–Wallis H = " in text and "η²_H" in text and "power under the ideal" in text
    assert "blocked by seed" in text and "Friedman χ² = " in text and "assumes independent groups" in text
    assert "Q2" in text and "with valid perplexity ρ = " in text and "95% bootstrap over 5 seed blocks" in text
    assert "−0.13" in text and "δ fixed at 1e-05" in text and "heuristic" in text
    assert images[0][1] == tmp_path / "study.png" and "fresh seed" not in text
    assert "beyond what (q, T, σ) predict" in text and "Wilcoxon signed-rank" in text and "proved" not in text
    assert "coupled random streams" not in text and "Second pre-registered" not in text  # synthetic commits; none
    flagged = {**full, "coupled_streams": ["e50835c2c238cc14644ab46d6861b86f53f77601"]}
    text = " ".join(_study(flagged, tmp_path, {})[0])
    assert "coupled random streams" in text and "`e50835c2`" in text and "seed s + 1's initialisation" in text
    # the second study's own account: tests/report/test_silent.py
