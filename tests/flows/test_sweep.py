"""Sweep tables on hand-made `dvc exp show` output."""
from flows.sweep import canary_table, collect


def _metrics(run, kind, tpr, auroc, primary=True):
    b, p = f"runs.{run}.attacks.loss.{kind}", f"runs.{run}.audit_primary"
    return {f"{b}.members": 10, f"{b}.non_members": 12, f"{b}.auroc": auroc, f"{b}.auroc_ci95": [auroc - 0.1, auroc + 0.05],
            f"{b}.tpr_at_fpr.0.01.value": tpr, f"{b}.tpr_at_fpr.0.01.ci95": [0.0, tpr + 0.1],
            **({f"{p}.kind": kind, f"{p}.attack": "loss", f"{p}.k_pos": 100, f"{p}.k_neg": 0, f"{p}.eps_lb_95": 1.5,
                f"{p}.eps_lb_99": 1.25} if primary else {})}


def test_collect_reads_named_experiments_from_dvc_exp_show():
    show = [{"rev": "workspace", "experiments": None},
            {"rev": "abc", "experiments": [{"revs": [
                {"name": "s-0", "rev": "1" * 40, "data": {"metrics": {"reports/metrics.json": {"data": {
                    "runs": {"nondp": {"attacks": {"loss": {"random": {"auroc": 0.5}}}}}}}}}},
                {"name": "other", "rev": "2" * 40, "data": {}}]}]}]
    (row,) = collect(show, ["s-0"])
    assert row == {"experiment": "s-0", "rev": "1" * 40, "metrics": {"runs.nondp.attacks.loss.random.auroc": 0.5}}
    # the committed metrics file, when readable, is used whole: `dvc exp show` drops lists such as intervals
    (row,) = collect(show, ["s-0"], read=lambda rev: {"a": {"auroc_ci95": [0.1, 0.2]}} if rev == "1" * 40 else None)
    assert row["metrics"] == {"a.auroc_ci95": [0.1, 0.2]}


def test_canary_table_has_one_line_per_run_and_kind_with_intervals():
    m = {**_metrics("nondp", "new_token", 0.5, 0.9), **_metrics("dp", "random", 0.0, 0.5),
         **_metrics("dp", "text", 0.1, 0.6, primary=False), **_metrics("nondp", "random", 0.2, 0.7, primary=False),
         "runs.users.dataset": "x"}
    md = canary_table([{"experiment": "s-0", "rev": "1" * 40, "metrics": m}], {"s-0": ["canaries.kinds=[x]"]})
    lines = md.splitlines()
    assert len(lines) == 5  # header, rule, three (run, kind) lines: no text rows, nothing for a run without canaries
    assert ("| s-0 | canaries.kinds=[x] | dp | random | 10 / 12 | 0.000 [0.000, 0.100] | 0.500 [0.400, 0.550] | "
            "loss, k₊=100, k₋=0 | 1.500 | 1.250 |") in lines
    assert "| nondp | new_token |" in lines[3] and "0.500 [0.000, 0.600]" in lines[3]
    # a kind that is not the run's primary shows its MIA numbers and no bound
    assert "| nondp | random |" in lines[4] and lines[4].endswith("| – | – | – |")
    assert canary_table([{"experiment": "s-0", "rev": None, "metrics": {}}], {}) == ""
