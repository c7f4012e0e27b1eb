"""The variance sweep's grid (stages/variance/grid.py): the points, the params a worker writes, the divergence rule;
and the flow's check that every point's params load before any point is dispatched."""
import pytest
import yaml
from testkit.project import ROOT

from flows.variance import checked_points, finished
from stages.finetune.params import load_finetune
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import load, read_params
from stages.variance.api import RUN, apply_point, diverged, points
from stages.variance.params import VarianceParams


def test_every_point_is_one_dp_run_whose_params_read_back_exactly(tmp_path):
    raw = read_params(ROOT / "params.yaml")  # with studies.yaml: written whole into a file of its own
    raw["variance"]["sweep"]["delta"] = 1e-5  # PyYAML writes 1.0e-05, which reads back as a float (1e-05 would not)
    raw["variance"]["sweep"]["grid"]["lr"] = [0.0001, 0.00002]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    sp = load(VarianceParams, "variance", tmp_path / "params.yaml").sweep
    pts = points(sp)
    n = len(sp.epsilons) * len(sp.grid.batch_size) * len(sp.grid.steps) * len(sp.grid.lr) * len(sp.seeds)
    assert len(pts) == n and len({p["point"] for p in pts}) == n
    apply_point(tmp_path / "params.yaml", pts[-1])
    back = yaml.safe_load((tmp_path / "params.yaml").read_text())
    assert list(back["runs"]) == [RUN] and back["attack"]["runs"] == {RUN: list(sp.attacks)}
    assert back["audit"]["primary"]["runs"] == {}  # no guessing rule left for a run the point dropped
    ft = load_finetune(RUN, tmp_path / "params.yaml")
    assert (ft.batch_size, ft.steps, ft.lr, ft.seed) == (pts[-1]["batch_size"], pts[-1]["steps"], 0.00002,
                                                         pts[-1]["seed"])
    assert ft.dp.enabled and ft.dp.epsilon == sp.epsilons[-1] and ft.dp.delta == 1e-5
    assert back["preprocess"] == raw["preprocess"] and back["canaries"] == raw["canaries"]  # upstream untouched


def test_divergent_training_is_a_failure():
    assert diverged({"utility": {"valid_nll": 2.1}}, 10.0) is None
    assert "diverged" in diverged({"utility": {"valid_nll": 28.4}}, 10.0)
    assert "diverged" in diverged({"utility": {"valid_nll": float("nan")}}, 10.0)
    assert "diverged" in diverged({"utility": {}}, 10.0)


def test_every_point_of_the_project_grid_validates():
    params, pts = checked_points(ROOT / "params.yaml")
    assert len(pts) > 1 and params.variance.sweep.name in pts[0]["point"]


@pytest.mark.parametrize("where, value, key", [
    (("run", "max_lenght"), 64, r"runs\.point\.max_lenght: unknown key"),      # a typo in variance.sweep.run
    (("run", "dataset"), "nosuch", r"runs\.point\.dataset"),                   # a value the fine-tune refuses
    (("run", "objective"), "nosuch", r"runs\.point\.objective"),               # a choice outside its Literal
])
def test_a_bad_point_fails_before_dispatch_with_one_line_naming_the_key(tmp_path, where, value, key):
    raw = read_params(ROOT / "params.yaml")
    node = raw["variance"]["sweep"]
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=key) as err:
        checked_points(tmp_path / "params.yaml")
    assert "\n" not in str(err.value) and "variance point cpu-" in str(err.value)


class _Future:
    """A Prefect future's surface that ``finished`` reads: final after wait(), a result or the failure it raises."""

    def __init__(self, result=None, error=None, completed=True):
        self.value, self.error, self.waited = result, error, False
        self.state = type("State", (), {"is_completed": lambda _: completed})()

    def wait(self):
        self.waited = True

    def result(self, raise_on_failure=False):
        assert self.waited  # the state is final only after wait()
        if raise_on_failure and self.error is not None:
            raise self.error
        return self.value


def test_finished_gives_each_points_result_or_why_it_failed_in_the_order_given():
    """The one failure loop of the sweep and the studies: a failure is recorded (whitespace folded, 500 characters
    at most), never raised; a future that neither completed nor raised is "not run"."""
    futures = [("a", _Future({"rev": "abc"})),
               ("b", _Future(error=RuntimeError("dvc exp run failed:\n  " + "x" * 600), completed=False)),
               ("c", _Future(completed=False)), ("d", _Future(error=KeyboardInterrupt(), completed=False))]
    out = list(finished(iter(futures)))
    assert [k for k, _, _ in out] == ["a", "b", "c", "d"]
    assert out[0] == ("a", {"rev": "abc"}, None)
    assert out[1][1] is None and out[1][2].startswith("dvc exp run failed: xxx") and len(out[1][2]) == 500
    assert out[2] == ("c", None, "not run") and out[3] == ("d", None, "KeyboardInterrupt")
