"""The headline is the pre-registered test, whatever the other attacks show; the exploratory family is
Bonferroni-corrected over its distinct tests (identical rankings counted once)."""
import numpy as np
import pyarrow as pa
import pytest
from testkit.project import params
from testkit.records import run_record

from stages.attack.schema import SCORES, AttackRecord, write_record
from stages.audit.params import AuditParams
from stages.audit.summary import audit_run, by_length
from stages.finetune.schema import PrivacyRecord, write_manifest, write_run
from stages.shared.bounds.ceiling import last_iterate_epsilon
from stages.shared.bounds.one_run import epsilon_lower_bound, guesses
from stages.shared.core.errors import ConfigError, DataError
from stages.shared.core.io import write_table

M = 1000


def _scores(rng, members, strength):
    return members * strength + rng.normal(size=len(members))


def _meta(ranks_like=None) -> dict:
    return {"family": "membership", "threat_model": "black-box log-probabilities", "ranks_like": ranks_like or {},
            "baseline": False}


#: zlib declared (as registered) to rank like loss on both kinds
ZLIB_LIKE_LOSS = {"zlib": {"new_token": "loss", "random": "loss"}}


def _write(scores_dir, dp: bool, primary_strength=0.2, other_strength=3.0, declared=None):
    """loss weak on new_token, ref_ratio strong on it, zlib a monotone transform of loss (same ranking);
    ``declared``: attack -> its ranks_like, as written with the scores (default ZLIB_LIKE_LOSS)."""
    declared = ZLIB_LIKE_LOSS if declared is None else declared
    rng = np.random.default_rng(0)
    members = {k: rng.random(M) < 0.5 for k in ("new_token", "random")}
    loss = {k: _scores(rng, y, primary_strength) for k, y in members.items()}
    ref = {k: _scores(rng, y, other_strength) for k, y in members.items()}
    for attack, per_kind in (("loss", loss), ("ref_ratio", ref), ("zlib", {k: 3 * v + 1 for k, v in loss.items()})):
        rows = [{"item_id": f"{k}-{i}", "group": k, "member": bool(members[k][i]), "score": float(per_kind[k][i])}
                for k in per_kind for i in range(M)]
        write_table(pa.Table.from_pylist(rows, schema=SCORES), scores_dir / f"{attack}.parquet", SCORES)
    privacy = PrivacyRecord(dp=True, delta=1e-5, epsilon_spent=8.0, noise_multiplier=0.57, accountant="prv",
                            sample_rate=0.0286, steps=80) if dp else None
    record = run_record(privacy, {"dataset": "personachat", "secret_rows": True, "user_canaries": False})
    (scores_dir / "run").mkdir(parents=True, exist_ok=True)
    write_run(scores_dir / "run" / "run.json", record)  # the fine-tuned run's record and manifest
    write_manifest(scores_dir / "run", [
        {"source": "canary", "candidate_id": f"{k}-{i}", "group": k, "member": bool(members[k][i]), "rank": i,
         "inclusions": int(i % 4) if members[k][i] else 0, "prompt": None, "target": None}
        for k in members for i in range(M)])
    write_record(scores_dir, AttackRecord(run="r",
                                          attacks={a: _meta(declared.get(a)) for a in ("loss", "ref_ratio", "zlib")},
                                          skipped={"whitebox": "run r was trained elsewhere"}, model_fingerprints={},
                                          user_score="ref_ratio"))
    return members, loss, ref


def _params(**primary):
    """Audit params with the primary test's fields given (the rule of runs without DP: none unless given)."""
    return params(AuditParams, "audit", bootstrap=10, primary={"attack": "loss", "no_dp": None, **primary},
                  ceiling={"trials": 200})


def test_headline_is_the_primary_even_when_another_attack_beats_it(tmp_path):
    members, loss, ref = _write(tmp_path, dp=False)
    p = _params(attack="loss", kind="new_token", k_pos=100, k_neg=0)
    res, _ = audit_run(tmp_path / "run", tmp_path, p, {})
    head = res["audit_primary"]
    y = members["new_token"]
    m, r, v = guesses(loss["new_token"], y, 100, 0)
    assert (head["attack"], head["kind"], head["m"], head["r"], head["v"]) == ("loss", "new_token", m, r, v)
    assert head["eps_lb_95"] == pytest.approx(epsilon_lower_bound(m, r, v, 1e-5, 0.95))
    # ref_ratio's uncorrected bound is far above the primary's; it never becomes the headline
    uncorrected_other = epsilon_lower_bound(*guesses(ref["new_token"], y, 100, 0), 1e-5, 0.95)
    assert uncorrected_other > head["eps_lb_95"] + 1.0
    assert head["gdp_eps_lb_95"] is not None and "last_iterate_epsilon" not in head  # no ceiling without DP

    fam = res["audit_exploratory"]
    # zlib is declared to rank like loss on both kinds: one test; classes = {loss(=zlib), ref_ratio} x 2 kinds
    assert {(i["kind"], tuple(i["attacks"])) for i in fam["identical_rankings"]} == {
        ("new_token", ("loss", "zlib")), ("random", ("loss", "zlib"))}
    assert fam["family_size"] == 4 * len(p.grid) == len(fam["tests"])
    level = 1 - 0.05 / fam["family_size"]
    for t in fam["tests"]:
        assert t["eps_lb_95"] == pytest.approx(epsilon_lower_bound(t["m"], t["r"], t["v"], 1e-5, level)
                                               if t["r"] else 0)
    best = fam["best"]["eps_lb_95"]
    assert best["attack"] == "ref_ratio" and 0 < best["value"] < max(
        epsilon_lower_bound(*guesses(ref[k], members[k], a, b), 1e-5, 0.95) for k in members for a, b in p.grid)


def test_dp_run_gets_its_ceiling(tmp_path):
    _write(tmp_path, dp=True)
    res, _ = audit_run(tmp_path / "run", tmp_path, _params(), {})
    head = res["audit_primary"]
    assert head["accountant_epsilon"] == 8.0
    assert head["last_iterate_epsilon"] == pytest.approx(last_iterate_epsilon(0.0286, 80, 0.57, 1e-5))
    assert head["ideal_eps_lb_95_p10"] <= head["ideal_eps_lb_95_median"] <= head["ideal_eps_lb_95_p90"]
    assert not any("efficiency" in k for k in head)  # one run's ratio to a median is never recorded
    low, high = head["ideal_eps_lb_95_median_mc95"]  # the median's Monte Carlo interval (order statistics)
    assert low <= head["ideal_eps_lb_95_median"] <= high
    assert 0 <= head["ideal_percentile"] <= 100 and "curve_eps_lb_95" in head and head["curve_assumption"]


def test_primary_must_exist_in_the_run(tmp_path):
    _write(tmp_path, dp=False)
    with pytest.raises(ConfigError, match=r"audit.primary.kind: run r has no 'bigram' canaries"):
        audit_run(tmp_path / "run", tmp_path, _params(kind="bigram"), {})
    with pytest.raises(ConfigError, match=r"audit.primary.attack: 'min_k' was not run on run r"):
        audit_run(tmp_path / "run", tmp_path, _params(attack="min_k"), {})


def test_canary_users_are_summarised_per_substring_length():
    """Per-length user inference: each length's own members/non-members and AUROC; a one-sided length gets counts;
    without capped documents there is no per-documents table."""
    ids = np.array([f"u{i}" for i in range(10)])
    users = {f"u{i}": {"length": (1 if i < 4 else 5 if i < 8 else 25), "documents": None} for i in range(10)}
    members = np.array([1, 0, 1, 0, 1, 1, 0, 0, 1, 1], dtype=bool)
    scores = np.array([0.9, 0.1, 0.8, 0.2, 0.3, 0.4, 0.35, 0.1, 0.5, 0.6])
    out, per_documents = by_length([("users", scores[:0], members[:0], ids[:0]),
                                    ("canary_users", scores, members, ids)], users, _params())
    assert set(out) == {"1", "5", "25"} and per_documents == {}
    assert (out["1"]["members"], out["1"]["non_members"], out["1"]["auroc"]) == (2, 2, 1.0)
    assert out["5"]["auroc"] == pytest.approx(0.75) and out["5"]["auroc_ci95"] is None  # 2 vs 2: no interval,
    assert out["5"]["auroc_p_exact"] == pytest.approx(2 / 6)  # the exact p instead (2 of C(4, 2) rank as well)
    assert out["25"] == {"members": 2, "non_members": 0, "auroc": None, "auroc_ci95": None, "tpr_at_fpr": {}}


def test_capped_documents_are_summarised_against_every_held_out_user_of_the_length():
    """Per (length, documents): the held-in users trained on that many documents against all held-out users of the
    length (whom no count touched), so the non-members are shared and the members split."""
    ids = np.array([f"u{i}" for i in range(8)])
    members = np.array([1, 1, 1, 1, 0, 0, 0, 0], dtype=bool)
    docs = [2, 2, None, None, None, None, None, None]
    users = {f"u{i}": {"length": 10, "documents": docs[i]} for i in range(8)}
    scores = np.array([0.9, 0.8, 0.3, 0.2, 0.5, 0.4, 0.1, 0.6])
    out, per_documents = by_length([("canary_users", scores, members, ids)], users, _params())
    assert set(per_documents) == {"10:2", "10:all"}
    assert (per_documents["10:2"]["members"], per_documents["10:2"]["non_members"]) == (2, 4)
    assert per_documents["10:2"]["auroc"] == pytest.approx(1.0)
    assert per_documents["10:all"]["auroc"] == pytest.approx(2 / 8)  # 0.3 beats 0.1 and 0.2 beats 0.1: 2 of 8
    assert out["10"]["members"] == 4 and out["10"]["non_members"] == 4


def test_rankings_are_declared_not_inferred(tmp_path):
    """Undeclared, zlib is its own test even though it ranks like loss; a declaration the scores contradict (ref_ratio
    ranks like loss) is refused."""
    _write(tmp_path, dp=False, declared={})
    p = _params()
    fam = audit_run(tmp_path / "run", tmp_path, p, {})[0]["audit_exploratory"]
    assert fam["identical_rankings"] == [] and fam["family_size"] == 6 * len(p.grid)
    _write(tmp_path, dp=False, declared={"ref_ratio": {"new_token": "loss"}})
    with pytest.raises(DataError, match=r"attacks \['loss', 'ref_ratio'\] are declared to rank the new_token canaries "
                                        r"identically"):
        audit_run(tmp_path / "run", tmp_path, _params(), {})


def test_registered_declarations_are_what_the_record_says():
    """Every attack declares a threat model; ranks_like names registered attacks of its family; the record's
    same-ranking groups are those declarations, anchor first."""
    from stages.attack.catalog import ATTACKS
    from stages.attack.schema import same_ranking

    declared = {name: ATTACKS.get(name).declared() for name in ATTACKS.names()}
    assert all(d["threat_model"] for d in declared.values())
    for name, d in declared.items():
        for kind, like in d["ranks_like"].items():
            assert like in declared and declared[like]["family"] == d["family"] == "membership", (name, kind)
    assert [n for n, d in declared.items() if d["baseline"]] == ["blind"]
    order = ["loss", "ref_ratio", "zlib", "min_k", "contrast"]
    assert same_ranking({n: declared[n] for n in order}) == {"new_token": [["loss", "zlib", "min_k"]],
                                                              "random": [["loss", "min_k"]]}
    assert same_ranking({n: declared[n] for n in ("min_k", "contrast")}) == {}  # loss did not run: nothing to share


def test_per_run_rule_and_canary_response(tmp_path):
    """A run's own (k_pos, k_neg); the response bins canaries by inclusions, the ideal line only under DP."""
    members, loss, _ = _write(tmp_path, dp=True)
    p = params(AuditParams, "audit", bootstrap=10, ceiling={"trials": 200},
               primary={"attack": "loss", "kind": "new_token", "k_pos": 100, "k_neg": 0,
                        "runs": {"r": {"k_pos": 300, "k_neg": 200}}})
    res, _ = audit_run(tmp_path / "run", tmp_path, p, {})
    head = res["audit_primary"]
    assert (head["k_pos"], head["k_neg"], head["r"]) == (300, 200, 500)
    assert head["v"] == guesses(loss["new_token"], members["new_token"], 300, 200)[2]
    resp = res["canary_response"]["attacks"]["loss"]
    y = members["new_token"]
    counts = {b: resp["bins"][b]["canaries"] for b in ("0", "1", "2", "3+")}
    assert counts["0"] == (~y).sum() + sum(1 for i in range(M) if y[i] and i % 4 == 0)
    assert counts["3+"] == sum(1 for i in range(M) if y[i] and i % 4 == 3)
    assert resp["bins"]["0"]["ideal_z"] == 0 and resp["bins"]["2"]["ideal_z"] == pytest.approx(2 / (80 ** 0.5 * 0.57))
    assert abs(resp["bins"]["0"]["mean_z"]) < 0.1  # the null bin sits at zero by construction


@pytest.mark.parametrize("dp,own,expected", [(False, False, (300, 0)), (True, False, (100, 0)),
                                             (False, True, (20, 10))])
def test_a_run_without_dp_takes_the_no_dp_rule_unless_it_has_its_own(tmp_path, dp, own, expected):
    """audit.primary.no_dp: the rule of every run without a DP guarantee (fixed by params: the run's dp.enabled or
    external claim); a run's own rule (audit.primary.runs.<run>) wins over it. The skipped attacks pass through."""
    members, loss, _ = _write(tmp_path, dp=dp)
    p = _params(kind="new_token", k_pos=100, k_neg=0, no_dp={"k_pos": 300, "k_neg": 0},
                runs={"r": {"k_pos": 20, "k_neg": 10}} if own else {})
    res, _ = audit_run(tmp_path / "run", tmp_path, p, {})
    head = res["audit_primary"]
    assert (head["k_pos"], head["k_neg"]) == expected
    assert head["v"] == guesses(loss["new_token"], members["new_token"], *expected)[2]
    assert res["attacks_skipped"] == {"whitebox": "run r was trained elsewhere"}
