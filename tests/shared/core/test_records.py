"""Typed records that cross stages: one reader that refuses what the record does not declare, in one line naming
the key, and one writer that gives back the file's shape (optional fields left out, flattened keys beside)."""
import json
import math
from enum import Enum

import pytest
from testkit.project import ROOT

from stages.audit.schema import METRICS_VERSION, metrics_of, read_metrics, write_metrics
from stages.shared.core.errors import DataError
from stages.shared.core.records import flattened, optional, read_record, record, record_json


class Colour(str, Enum):
    RED = "red"


@record
class Inner:
    value: float
    ci95: list[float] | None


@record
class Outer:
    name: str
    count: int
    inner: Inner
    colour: Colour
    by_key: dict[str, Inner]
    note: str | None = optional()
    nullable: float | None
    bounds: dict[str, float] = flattened(r"eps_lb_[0-9]+")


GOOD = {"name": "a", "count": 2, "inner": {"value": "inf", "ci95": None}, "colour": "red",
        "by_key": {"x": {"value": 1, "ci95": [0.5, 1.5]}}, "nullable": None, "eps_lb_95": 0.4, "eps_lb_99": 0.2}


def test_a_record_reads_and_writes_back_its_shape():
    r = read_record(Outer, GOOD, "f.json")
    assert r.inner.value == math.inf and r.by_key["x"].value == 1.0 and r.colour is Colour.RED
    assert r.note is None and r.bounds == {"eps_lb_95": 0.4, "eps_lb_99": 0.2}
    back = record_json(r)
    assert "note" not in back and back["nullable"] is None  # left out when optional; a null is written
    assert back["eps_lb_95"] == 0.4 and "bounds" not in back and back["colour"] == "red"
    with pytest.raises(Exception):
        r.count = 3  # frozen


@pytest.mark.parametrize("change, says", [
    ({"extra": 1}, "f.json: unknown key 'extra'"),
    ({"count": "2"}, "f.json.count: expected int, got '2'"),
    ({"count": True}, "f.json.count: expected int, got True"),
    ({"inner": {"value": 1.0}}, "f.json.inner: missing key 'ci95'"),
    ({"by_key": {"x": {"value": 1, "ci95": "wide"}}}, "f.json.by_key.x.ci95: expected"),
    ({"colour": "blue"}, "f.json.colour: must be one of ['red'], got 'blue'"),
    ({"eps_lb_x": 1.0}, "f.json: unknown key 'eps_lb_x'"),
])
def test_what_the_record_does_not_declare_is_refused_in_one_line_naming_the_key(change, says):
    with pytest.raises(DataError) as err:
        read_record(Outer, {**GOOD, **change}, "f.json")
    assert str(err.value).startswith(says) and "\n" not in str(err.value)


def test_missing_required_key_is_named():
    bad = dict(GOOD)
    del bad["count"]
    with pytest.raises(DataError, match=r"^f.json: missing key 'count'$"):
        read_record(Outer, bad, "f.json")


def test_the_committed_metrics_read_into_records_and_write_back_leaf_equal(tmp_path):
    path = ROOT / "reports" / "metrics.json"
    metrics = read_metrics(path)
    write_metrics(tmp_path / "metrics.json", metrics)
    assert json.loads((tmp_path / "metrics.json").read_text()) == json.loads(path.read_text())
    run = next(iter(metrics.runs.values()))
    assert run.privacy.epsilon_spent > 0 and run.training.n_population > 0


def test_a_metrics_record_of_another_version_names_it_and_the_command_that_regenerates_it():
    data = json.loads((ROOT / "reports" / "metrics.json").read_text())
    with pytest.raises(DataError) as err:
        metrics_of({**data, "schema_version": METRICS_VERSION - 1}, "reports/metrics.json")
    assert str(err.value) == (f"reports/metrics.json: metrics schema_version {METRICS_VERSION - 1}, expected "
                              f"{METRICS_VERSION} (regenerate it: dvc repro audit)")
