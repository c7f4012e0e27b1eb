"""The report's "Can the instruments see?" section renders from the committed reports/positive_control.json beside the
committed metrics.json: a row per instrument and pool with the default run's, the profile's and the DP counterpart's
measure, a row per prediction with its verdict, the dose-response plot; and a null of the default run is worded with
what the same instrument reaches on the memorising profile."""
import json
from types import SimpleNamespace

import pytest
from testkit.project import ROOT
from testkit.records import committed_metrics

from stages.report.sections.positive_control import null_wording, positive_control_section
from stages.shared.core.errors import DataError


def _inputs(tmp_path, table, power=None):
    return SimpleNamespace(positive_control=table, positive_control_power=power, plots_dir=tmp_path / "plots",
                           runs=committed_metrics().runs)


def test_the_section_renders_the_committed_results(tmp_path):
    table = ROOT / "reports" / "positive_control.json"
    data = json.loads(table.read_text())
    s = positive_control_section(_inputs(tmp_path, table))
    rows, verdicts = s.tables
    datasets = {e["dataset"] for e in data["experiments"]}
    assert datasets and {r[0] for r in rows.rows} == datasets
    instruments = {r[1] for r in rows.rows}
    assert {"loss", "ez_mia", "user_inference"} <= instruments
    assert all(r[6] == "–" or "(ε " in r[6] for r in rows.rows)  # the DP counterpart's column names its epsilon
    profile = [r for r in verdicts.rows if r[0] == "memorising profile"]
    assert [r[1] for r in profile] == [v["says"] for v in data["verdicts"]]
    assert {r[2] for r in verdicts.rows} <= {"confirmed", "not confirmed", "not measured"}
    assert s.images and s.images[0][1].is_file()
    assert data["design_commit"][:10] in s.paragraphs[1]
    for e in data["experiments"]:
        assert e["experiment"] in s.paragraphs[1] and e["seconds"] and (ROOT / e["params"]).is_file()


def test_a_default_null_is_worded_with_the_profile_and_nothing_without_it(tmp_path):
    table = ROOT / "reports" / "positive_control.json"
    said = null_wording(_inputs(tmp_path, table), ("loss", "ref_ratio", "zlib", "min_k", "min_k_pp", "ez_mia"))
    assert said and all("no leakage seen at this recipe" in s for s in said)
    # the text rows: the profile sees (a positive control); a pool where it does not either is no evidence
    assert any("text rows" in s and "the same instruments on the memorising profile" in s for s in said)
    assert all("not evidence of no leakage" in s for s in said
               if "the same instruments on the memorising profile" not in s)
    assert null_wording(_inputs(tmp_path, tmp_path / "absent.json"), ("loss",)) == []


def test_no_experiment_is_no_measurement(tmp_path):
    data = json.loads((ROOT / "reports" / "positive_control.json").read_text())
    data["experiments"], data["verdicts"] = [], []
    f = tmp_path / "positive_control.json"
    f.write_text(json.dumps(data))
    s = positive_control_section(_inputs(tmp_path, f))
    assert not s.tables and not s.images and "nothing here is a measurement" in s.paragraphs[1]


def test_a_table_of_another_shape_is_refused_in_one_line_naming_the_key(tmp_path):
    """The table is read as records: a key it does not know, or one it lacks, stops the report naming it."""
    data = json.loads((ROOT / "reports" / "positive_control.json").read_text())
    f = tmp_path / "positive_control.json"
    f.write_text(json.dumps({**data, "schema": 2}))
    with pytest.raises(DataError, match=r"positive_control.json: unknown key 'schema'"):
        positive_control_section(_inputs(tmp_path, f))
    del data["experiments"][0]["checkpoints"][0]["users_loss"]["gap"]
    f.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"experiments\[0\]\.checkpoints\[0\]\.users_loss: missing key 'gap'"):
        positive_control_section(_inputs(tmp_path, f))


def test_the_power_follow_up_renders_in_its_own_column_with_its_sizes(tmp_path):
    """reports/positive_control_power.json (committed) beside the profile's table: each of its rows in the follow-up
    column with the members and non-members it stands on, rows only it measured (AIR) added, its verdicts marked as
    its own, its design and experiments in words; and a default null is worded with it where it sees."""
    power = ROOT / "reports" / "positive_control_power.json"
    data = json.loads(power.read_text())
    inp = _inputs(tmp_path, ROOT / "reports" / "positive_control.json", power)
    s = positive_control_section(inp)
    rows, verdicts = s.tables
    for ex in data["experiments"]:
        for r in ex["rows"]:
            row = next(x for x in rows.rows if (x[0], x[1]) == (ex["dataset"], r["instrument"])
                       and x[2] == {"users": "real users", "text": "text rows"}.get(r["pool"], x[2]))
            if r.get("auroc") is not None:
                assert f"({r['members']} vs {r['non_members']})" in row[7]
    ui = next(x for x in rows.rows if x[:3] == ["tofu_authors", "user_inference", "real users"])
    assert "(100 vs 100)" in ui[7]
    mine = [r for r in verdicts.rows if r[0] == "power follow-up"]
    assert [r[1] for r in mine] == [v["says"] for v in data["verdicts"]]
    assert data["design_commit"][:10] in s.paragraphs[2]
    assert all(e["experiment"] in s.paragraphs[2] for e in data["experiments"])
    said = null_wording(inp, ("user_inference",))
    assert any("power follow-up, 100 vs 100" in x and "the same instruments on the memorising profile" in x
               for x in said)
