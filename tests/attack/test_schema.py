"""The attack record round-trips through its one writer and reader; another version or key set is refused."""
import pytest

from stages.attack.schema import ATTACK_VERSION, AttackRecord, read_record, write_record
from stages.shared.core.errors import DataError
from stages.shared.core.io import read_json, write_json

RECORD = AttackRecord(run="nondp", attacks={"loss": {"family": "membership", "threat_model": "black-box loss",
                                                     "ranks_like": {}, "baseline": False}},
                      skipped={"whitebox": "trained elsewhere"}, model_fingerprints={"target": "abc"},
                      user_score="ref_ratio")


def test_the_attack_record_round_trips(tmp_path):
    write_record(tmp_path, RECORD)
    assert read_json(tmp_path / "run.json")["version"] == ATTACK_VERSION
    assert read_record(tmp_path) == RECORD


@pytest.mark.parametrize("edit, needle", [({"version": ATTACK_VERSION - 1}, "attack record version"),
                                          ({"extra": 1}, "attack record keys")])
def test_another_attack_record_is_refused_naming_the_stage(tmp_path, edit, needle):
    write_json(tmp_path / "run.json", {**RECORD.to_json(), **edit})
    with pytest.raises(DataError, match=f"{needle}.*rerun the attack@"):
        read_record(tmp_path)
