"""The headline block on runs built from the committed metrics: what it picks, what it says, and its lineage ids."""
import math
import re
from dataclasses import replace

import pytest
from testkit.records import committed_metrics, group, run_metrics

from stages.audit.schema import Interval, SeedStatus, Verdict
from stages.report.headline import (
    anchor,
    headline_html,
    headline_markdown,
    headline_metrics,
    headlines,
    reading,
    strongest_attack,
)
from stages.shared.bounds.keys import BoundKeys
from stages.shared.core.formatting import flatten
from stages.shared.core.records import record_json

BOUNDS = [BoundKeys(0.95), BoundKeys(0.99)]


def _attack(tpr, lo, hi, auroc=0.6, **fields):
    fields = {"auroc_ci95": [auroc - 0.1, auroc + 0.1], **fields}
    return group(auroc, 50, 50, tpr_at_fpr={"0.01": Interval(value=tpr, ci95=[lo, hi])}, **fields)


def _numbers(runs) -> dict:
    """metrics.json's numbers of ``runs`` (dotted path -> number), as the report flattens the file."""
    return flatten({"runs": record_json(runs)}, numbers_only=True)


def _run(dp=True, lb=0.4, acct=8.0, canaries=True, flagged=False, status="confirmation", secure=True,
         verdict=Verdict.NO_SHIFT):
    committed = committed_metrics().runs
    template = run_metrics("dp_eps8" if dp else "nondp")
    privacy = replace(committed["dp_eps8"].privacy, dp=dp, delta=1e-5, epsilon_spent=acct if dp else math.inf,
                      target_epsilon=acct, noise_multiplier=0.6, accountant="prv", optimizer="DP-adamw",
                      sample_rate=0.03, steps=80, secure_rng=secure, unit="example", rows_per_user=None)
    blind = replace(committed["nondp"].blind["text"], flagged=flagged, verdict=Verdict.SHIFT if flagged else verdict)
    vmr = committed["users"].memorization["vmr"]
    vmr = replace(vmr, randomised=True, trained=replace(vmr.trained, secrets=9, minus_base=0.1,
                                                        minus_base_ci95=[0.0, 0.2]))
    primary = replace(committed["dp_eps8"].audit_primary, attack="loss", kind="new_token", m=1000, v=40, r=50,
                      delta=1e-5, seeds=[7], seed_status=SeedStatus(status), ideal_percentile=20.0,
                      ideal_percentile_mcse=None, ideal_trials=None,
                      bounds={"eps_lb_95": lb, "eps_lb_99": lb / 2, "ideal_eps_lb_95_median": 1.5,
                              "max_provable_eps_lb_95": 2.5}) if canaries else None
    return replace(template, dataset="personachat", privacy=privacy,
                   trainable=replace(template.trainable, paradigm="lora"),
                   training=replace(template.training, steps=80, sample_rate=0.03),
                   utility=replace(template.utility, valid_perplexity=50.0),
                   attacks={"loss": {"text": _attack(0.5, 0.3, 0.7), "new_token": _attack(0.2, 0.1, 0.3)},
                            "zlib": {"text": _attack(0.1, 0.0, 0.2)}},
                   blind={"text": blind}, memorization={"vmr": vmr}, exposure=None, audit_user=None,
                   audit_primary=primary)


def test_readings_say_what_the_numbers_together_mean():
    text = reading(_run(lb=0.4), BOUNDS, "0.01")
    assert text.startswith("Consistent with the accountant (ε = 8.00 at δ = 1e-05, DP-AdamW)")
    assert "true ε lies between 0.40 and 8.00 at 95% confidence (δ = 1e-05)" in text
    assert "on a confirmation set (seeds 7; seed ledger)" in text
    assert "median ε̂ of 1.50" in text and "percentile 20" in text and "would typically" not in text
    assert "finds no leakage it can show (ε̂ = 0 at 95% confidence (δ = 1e-05))" in reading(_run(lb=0.0), BOUNDS,
                                                                                          "0.01")
    assert reading(_run(lb=9.0), BOUNDS, "0.01").startswith("INCONSISTENT")
    leaks = reading(_run(dp=False, lb=2.0), BOUNDS, "0.01")
    assert "shows this run leaks: ε ≥ 2.00 at 95% confidence (δ = 1e-05)" in leaks
    assert "50 guesses, all right, can show at most ε ≥ 2.50" in leaks  # what a 50-guess test can show at most
    assert "absence of evidence" in reading(_run(dp=False, lb=0.0), BOUNDS, "0.01")


def test_a_seeded_run_never_claims_where_the_true_epsilon_lies():
    text = reading(_run(lb=0.4, secure=False), BOUNDS, "0.01")
    assert "lies between" not in text and "assumes the seed is secret" in text


def test_a_development_seed_is_worded_as_a_look_never_as_evidence():
    text = reading(_run(lb=0.4, status="development"), BOUNDS, "0.01")
    assert "a development look (seeds 7; seed ledger: not evidence)" in text
    assert "lies between" not in text and "pre-registered" not in text and "confirmation" not in text
    fig = next(f for f in headlines({"a": _run(status="development")}, {}, BOUNDS, "0.01")[0].figures
               if f.key == "audit_eps_lb_95")
    assert fig.note.startswith("development look, seeds 7 (seed ledger): not evidence")


def test_a_pooled_recipe_leads_with_the_pooled_test():
    pooled = replace(committed_metrics().pooled["dp_eps8"], runs=["a", "a_r2", "a_r3"], seeds=[1, 2, 3],
                     seed_status=SeedStatus.CONFIRMATION, m=3000, r=300, v=250, delta=1e-5, sample_rate=0.23,
                     ideal_percentile=30.0, curve_assumption="the run's curve",
                     bounds={"eps_lb_95": 1.3, "eps_lb_99": 1.1, "gdp_eps_lb_95": 1.8, "gdp_eps_lb_99": 1.6,
                             "curve_eps_lb_95": 2.0, "curve_eps_lb_99": 1.7, "ideal_eps_lb_95_median": 1.85})
    head = headlines({"a": _run(secure=False)}, {}, BOUNDS, "0.01", {"a": pooled})[0]
    keys = [f.key for f in head.figures]
    assert keys.index("pooled_eps_lb_95") < keys.index("audit_eps_lb_95")
    assert head.figures[keys.index("audit_eps_lb_95")].label.startswith("this run alone")
    assert "audit_gdp_eps_lb_95" not in keys  # the other bounds: the audit section
    assert "the pooled test over 3 independent runs of this recipe, on a confirmation set (seeds 1, 2, 3; seed " \
           "ledger), gives ε ≥ 1.30 at 95% confidence (δ = 1e-05)" in head.reading
    note = head.figures[keys.index("pooled_eps_lb_95")].note
    assert note.startswith("confirmation set, seeds 1, 2, 3 (seed ledger)")
    assert "DP-AdamW" in head.trained and "DP-SGD" not in head.trained
    assert "example-level" in head.trained  # what the guarantee protects: one row
    user = _run(secure=False)
    user = replace(user, privacy=replace(user.privacy, unit="user", rows_per_user=4))
    assert "user-level (a user's rows, at most 4 a step, clipped as one unit" in headlines({"a": user}, {}, BOUNDS,
                                                                                          "0.01")[0].trained
    no_canary = reading(_run(dp=False, canaries=False), BOUNDS, "0.01")
    assert "no audit bound" in no_canary and "largest of 3 attack × pool results is loss on text" in no_canary


CONFIDENCE_WORDS = re.compile(r"95%|99%|confiden|above chance|significan|\[|distinguishable")


@pytest.mark.parametrize("lower", [0.3, 0.0])
def test_the_largest_attack_is_labelled_a_maximum_never_a_test(lower):
    """Its uncorrected lower bound above the FPR once printed "finds members above chance (... 95%)"; now neither
    the figure nor the reading uses confidence wording for a maximum picked after scoring."""
    r = _run(dp=False, canaries=False)
    r = replace(r, attacks={**r.attacks, "loss": {**r.attacks["loss"], "text": _attack(0.5, lower, 0.7)}})
    text = reading(r, BOUNDS, "0.01")
    fig = next(f for f in headlines({"a": r}, {}, BOUNDS, "0.01")[0].figures if f.key == "strongest_tpr")
    for words in (text, fig.label, fig.text, fig.note):
        assert not CONFIDENCE_WORDS.search(words), words
    assert "not a test" in text and "not a test" in fig.note and "largest of 3" in fig.note
    assert "shift guard" not in text
    r = replace(r, blind={"text": replace(r.blind["text"], verdict=Verdict.TOO_WEAK)})
    assert "shift guard is too weak at this size" in reading(r, BOUNDS, "0.01")


def test_strongest_attack_skips_pools_the_blind_baseline_invalidated():
    assert strongest_attack(_run(), "0.01")[:2] == ("loss", "text")
    assert strongest_attack(_run(flagged=True), "0.01")[:2] == ("loss", "new_token")


def test_strongest_attack_skips_pools_too_small_for_an_interval():
    r = _run()
    small = {"users": replace(_attack(0.9, 0.0, 1.0), members=7, non_members=8,
                              auroc_ci95=None)}  # 7 vs 8: TPR moves in steps of 1/7
    r = replace(r, attacks={**r.attacks, "user_inference": small})
    assert strongest_attack(r, "0.01")[:2] == ("loss", "text")
    only_small = replace(r, attacks={"user_inference": small})
    assert strongest_attack(only_small, "0.01")[:2] == ("user_inference", "users")  # nothing else: still shown


def test_every_headline_number_carries_its_metrics_path():
    runs = {"a": _run(), "b": _run(dp=False, canaries=False)}
    heads = headlines(runs, {"a": {"name_or_path": "pkg:m", "num_parameters": 135_000_000}}, BOUNDS, "0.01")
    numbers = _numbers(runs)
    paths = [f.path for h in heads for f in h.figures if f.path]
    assert paths and all(p in numbers for p in paths)  # each is a real number's lineage id
    assert "runs.a.audit_primary.eps_lb_95" in paths and "runs.a.attacks.loss.text.tpr_at_fpr.0.01.value" in paths
    assert "135M parameters" in heads[0].trained
    html = headline_html(heads)
    assert html.count("class=\"card\"") == 2 and f'href="#{anchor("runs.a.privacy.epsilon_spent")}"' in html
    assert "0.40 / 0.20" in headline_markdown(heads)
    metrics = headline_metrics(heads, numbers, runs, BOUNDS)
    assert metrics["a"] == pytest.approx({"accountant_epsilon": 8.0, "audit_eps_lb_95": 0.4, "audit_eps_lb_99": 0.2,
                                          "attainable_eps_lb_95": 1.5, "strongest_tpr": 0.5, "vmr_minus_base": 0.1,
                                          "valid_perplexity": 50.0})
    assert "accountant_epsilon" not in metrics["b"]  # no DP: no number, not "inf"


def _user_run(unit="user", lb=0.9, acct=8.0, status="development"):
    r = _run(acct=acct, canaries=False)
    user = replace(committed_metrics().runs["user_dp"].audit_user, unit="user", attack="contrast", m=1000, k=4,
                   r=100, v=80, delta=1e-5, mechanism_unit=unit, ideal_percentile=40.0, ideal_percentile_mcse=0.5,
                   seeds=[0, 3111], seed_status=SeedStatus(status),
                   bounds={"eps_lb_95": lb, "eps_lb_99": lb / 2, "ideal_eps_lb_95_median": 1.4,
                           "ideal_eps_lb_95_median_mc95": [1.3, 1.4]})
    return replace(r, privacy=replace(r.privacy, unit=unit, rows_per_user=4), audit_user=user)


def test_a_user_level_run_leads_with_its_user_level_test_and_its_lineage():
    runs = {"u": _user_run()}
    head = headlines(runs, {}, BOUNDS, "0.01")[0]
    figs = {f.label: f for f in head.figures}
    test = figs["user-level audit ε̂ (95% / 99%, δ = 1e-05)"]
    assert test.text == "0.90 / 0.45" and test.path == "runs.u.audit_user.eps_lb_95"
    assert "development look" in test.note and "80 of 100 right over 1000 canary users" in test.note
    assert "each user's 4 rows" in test.note
    assert figs["ideal user-level ε̂ (95%, median)"].path == "runs.u.audit_user.ideal_eps_lb_95_median"
    assert "audit ε̂" not in figs  # no "no canaries" line where the user-level test stands
    assert "guarantee about users, so the bound must stay below it" in head.reading
    assert "development look" in head.reading
    numbers = _numbers(runs)
    assert headline_metrics([head], numbers, runs, BOUNDS)["u"]["audit_user_eps_lb_95"] == pytest.approx(0.9)
    assert reading(_user_run(lb=9.0), BOUNDS, "0.01").startswith("INCONSISTENT")
    example = reading(_user_run(unit="example", lb=3.0, acct=2.0), BOUNDS, "0.01")
    assert "group privacy" in example and not example.startswith("INCONSISTENT")
