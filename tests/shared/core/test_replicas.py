"""Replicas of a recipe (stages/shared/core/replicas.py): a pipeline point of their own, never a repeated draw."""
import copy

import pytest
from testkit.project import project_raw

from stages.shared.core.errors import ConfigError
from stages.shared.core.replicas import load_replicas, replica_raw, replicas_of


def _raw(sets):
    raw = copy.deepcopy(project_raw())
    raw["replicas"]["sets"] = sets
    return raw


def test_a_replica_is_its_run_at_its_own_seed_with_its_own_outputs():
    raw = project_raw()
    name, rep = next(iter(raw["replicas"]["sets"].items()))
    point = replica_raw(raw, name)
    assert list(point["runs"]) == [name] and point["runs"][name]["seed"] == rep["seed"]
    assert point["runs"][name]["dp"] == raw["runs"][rep["run"]]["dp"]  # the recipe itself
    assert point["canaries"]["seed"] == rep["seed"] == point["canaries"]["formatted"]["seed"]
    root = f"{raw['replicas']['out_dir']}/{name}"
    assert point["canaries"]["out_dir"] == f"{root}/canaries" and point["finetune"]["out_dir"] == f"{root}/models"
    assert point["attack"]["out_dir"] == f"{root}/scores" and point["attack"]["attacks"] == raw["replicas"]["attacks"]
    assert raw["canaries"]["seed"] != rep["seed"]  # the input is untouched
    assert replicas_of(load_replicas(raw), rep["run"])[0] == name


@pytest.mark.parametrize("sets, message", [
    ({"r2": {"run": "dp_eps8", "seed": 3102}, "r3": {"run": "dp_eps8", "seed": 3102}},
     "replicas.sets.r3.seed: seed 3102 repeats replica r2"),
    ({"r2": {"run": "dp_eps8", "seed": 3111}}, "replicas.sets.r2.seed: seed 3111 is run dp_eps8's own seed"),
    ({"r2": {"run": "nope", "seed": 5}}, "replicas.sets.r2.run: no such run"),
    ({"r2": {"run": "users", "seed": 5}}, "replicas.sets.r2.run: run 'users' has no canaries"),
    ({"nondp": {"run": "dp_eps8", "seed": 5}}, "replicas.sets.nondp: a replica's name must not be a run's name"),
])
def test_a_replica_that_would_repeat_a_draw_is_refused(sets, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_replicas(_raw(sets))


def test_an_unknown_replica_names_the_known_ones():
    with pytest.raises(ConfigError, match="replicas.sets.zz: no such replica"):
        replica_raw(project_raw(), "zz")
