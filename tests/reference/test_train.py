"""RMIA's reference fine-tunes train on rows no membership game scores, and a set is used by the runs of its recipe."""
import json

import pyarrow.parquet as pq
import pytest
from testkit.data import users_dataset
from testkit.project import ROOT, params, project_raw

from flows.runtime.deps import imported_modules
from stages.reference.params import ReferenceParams
from stages.reference.schema import recipe_of
from stages.reference.train import population_rows
from stages.shared.core.artifacts import locations
from stages.shared.core.errors import ConfigError
from stages.shared.datasets import get_dataset


def test_population_rows_are_no_scored_row(tmp_path):
    """User-level data: the held-out users' set-aside rows; never a trained row, a text non-member (test rows of
    held-in users), nor an attacker's sample; no canary user's row."""
    (tmp_path / "processed").mkdir()
    users_dataset(tmp_path / "processed")
    (tmp_path / "canaries").mkdir()
    raw = project_raw()
    raw["preprocess"]["out_dir"], raw["canaries"]["out_dir"] = str(tmp_path / "processed"), str(tmp_path / "canaries")
    rows = population_rows(locations(raw), get_dataset("enron_users"))
    scored = {r["message_id"] for s in ("train", "test", "attacker", "valid")
              for r in pq.read_table(tmp_path / "processed/enron_users" / f"{s}.parquet").to_pylist()}
    assert rows and not ({r["message_id"] for r in rows} & scored)
    assert all(r["user_set"] == "held_out" for r in rows)


def test_a_recipe_leaves_out_how_and_where_a_run_trains():
    ft = project_raw()["finetune"]
    a = recipe_of(json.loads(json.dumps(ft)))
    b = recipe_of({**ft, "seed": 9, "device": "cuda", "checkpoint_dir": "elsewhere"})
    assert a == b and recipe_of({**ft, "lr": 1.0}) != a


def test_reference_sets_name_their_run_and_a_seed_of_their_own():
    """The reference section is the reference stage's own (the attack stage reads it, never the reverse)."""
    raw = project_raw()
    own = raw["finetune"]["seed"]
    raw["reference"]["sets"] = {"r1": {"run": "nondp", "seed": own}}
    from stages.shared.core.params import load

    with pytest.raises(ConfigError, match=rf"reference\.sets\.r1\.seed: seed {own} is run nondp's own"):
        load(ReferenceParams, "reference", "params.yaml", raw)
    raw["reference"]["sets"] = {"r1": {"run": "nodp", "seed": 1}}
    with pytest.raises(ConfigError, match=r"reference\.sets\.r1\.run: no such run"):
        load(ReferenceParams, "reference", "params.yaml", raw)
    assert params(ReferenceParams, "reference").sets == {}
    imports = {mod for f in (ROOT / "stages/reference").glob("*.py") for mod in imported_modules(f)}
    assert "stages.reference.params" in imports and not {m for m in imports if m.startswith("stages.attack")}
