"""``Trainable``, the model description run.json records: it reads back what it wrote and refuses, naming the key,
a record with a key it does not know or without one it needs (a run.json of another version)."""
import pytest

from stages.shared.core.errors import DataError
from stages.shared.lm.spec import Trainable

SPEC = Trainable(paradigm="lora", lora_r=4, lora_alpha=8, lora_dropout=0.0, lora_targets=("q_proj", "v_proj"),
                 virtual_tokens=0, num_new_tokens=3, new_token_init="mean", secret_rows=(5, 9),
                 train_embeddings=False)


def test_it_reads_back_what_it_wrote():
    assert Trainable.from_json(SPEC.to_json()) == SPEC
    auto = Trainable(**{**SPEC.__dict__, "lora_targets": "auto"})
    assert Trainable.from_json(auto.to_json()) == auto


def test_an_unknown_or_missing_key_is_refused_naming_it():
    with pytest.raises(DataError, match=r"^data/models/x/run.json.trainable: unknown key 'rank'"):
        Trainable.from_json({**SPEC.to_json(), "rank": 4}, "data/models/x/run.json.trainable")
    data = SPEC.to_json()
    del data["secret_rows"]
    with pytest.raises(DataError, match=r"^trainable: missing key 'secret_rows'"):
        Trainable.from_json(data)
