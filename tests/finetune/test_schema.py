"""The fine-tune's records round-trip through their one writer and reader: the privacy record (every kind of run),
run.json and auditor.json; another version or an unknown key is refused."""
import math

import pytest
from testkit.models import finetune_params

from stages.finetune.schema import (
    RUN_VERSION,
    AuditorRecord,
    PrivacyRecord,
    RunRecord,
    Valid,
    no_dp_record,
    read_auditor,
    read_run,
    write_auditor,
    write_run,
)
from stages.shared.core.errors import DataError
from stages.shared.core.io import read_json, write_json
from stages.shared.core.records import record_json
from stages.shared.lm.trainable import Trainable

DP_HERE = PrivacyRecord(dp=True, epsilon_spent=7.996, sample_rate=0.23, steps=10, target_epsilon=8.0, delta=1e-5,
                        noise_multiplier=0.815, max_grad_norm=1.0, accountant="prv", public_divisor=322.0,
                        optimizer="DP-sgd", grad_sample_mode="bk", world_size=1, sharding=None, secure_rng=False,
                        grad_sample_mode_requested="auto", accounted_steps=10,
                        accountant_history=[[0.815, 0.23, 10]], profile=[{"delta": 1e-5, "epsilon": 7.996}])
CLAIM = PrivacyRecord(dp=True, epsilon_spent=4.0, sample_rate=0.1, steps=100, delta=1e-5, noise_multiplier=1.1,
                      max_grad_norm=None, accountant="trainer's claim", external=True, claimed=True,
                      accountant_epsilon_of_claim=3.9, profile=[{"delta": 1e-5, "epsilon": 3.9}])


@pytest.mark.parametrize("record", [DP_HERE, CLAIM, no_dp_record(0.0288, 80), no_dp_record(None, None, True)],
                         ids=["dp", "claim", "no_dp", "external_no_claim"])
def test_the_privacy_record_round_trips_through_json(tmp_path, record):
    write_json(tmp_path / "p.json", record.to_json())
    assert PrivacyRecord.from_json(read_json(tmp_path / "p.json")) == record  # inf written as "inf", read back


def test_the_privacy_record_writes_what_its_kind_has_and_states_its_rng_as_a_flag():
    assert set(no_dp_record(0.0288, 80).to_json()) == {"dp", "epsilon_spent", "sample_rate", "steps"}
    assert set(no_dp_record(None, None, True).to_json()) == {"dp", "epsilon_spent", "sample_rate", "steps",
                                                              "external"}
    here = DP_HERE.to_json()
    assert here["sharding"] is None and here["secure_rng"] is False and "rng" not in here  # a flag, not a sentence
    assert here["public_divisor"] == 322.0 and "expected_batch_size" not in here and "divisor" not in here
    assert CLAIM.to_json()["max_grad_norm"] is None and "secure_rng" not in CLAIM.to_json()
    assert [r.rng_label for r in (DP_HERE, CLAIM)] == ["seeded (finetune.seed)", "the trainer's"]
    assert math.isinf(no_dp_record(0.1, 5).epsilon_spent)
    with pytest.raises(DataError, match="unknown privacy key 'rng'"):
        PrivacyRecord.from_json({**here, "rng": "seeded (finetune.seed)"})  # a record of the older version


def _run_record() -> RunRecord:
    return RunRecord(version=RUN_VERSION, run="r", params=record_json(finetune_params()), device="cpu", world_size=1,
                     trainable=Trainable(paradigm="lora", lora_r=8, lora_alpha=16, lora_dropout=0.0,
                                         lora_targets=("q_proj", "v_proj"), virtual_tokens=16, num_new_tokens=0,
                                         new_token_init="mean", secret_rows=(), train_embeddings=False),
                     base_model={"name_or_path": "tiny"}, num_new_tokens=0, new_token_init="mean",
                     n_population=1402, has_canaries=True, has_formatted=True, canary_users=[], secret_control=None,
                     sample_rate=0.23, steps=10, expected_exposures_per_member=2.3, canary_insertion="poisson",
                     trainable_parameters=10, final_loss=None,
                     valid=Valid(rows=4, tokens=40, nll=3.0, perplexity=20.1), privacy=DP_HERE, external=None)


def test_run_and_auditor_records_round_trip_and_refuse_another_version(tmp_path):
    run = _run_record()
    (tmp_path / "r").mkdir()
    write_run(tmp_path / "r" / "run.json", run)
    back = read_run(tmp_path / "r")
    assert back == run and back.privacy == DP_HERE and back.params["seed"] == run.params["seed"]
    auditor = AuditorRecord(version=RUN_VERSION, run="r", n_examples=150, n_text_rows=100,
                            n_member_canaries={"new_token": 50}, n_formatted_rows=0, canary_share_of_tokens=0.1,
                            canary_share_of_loss_tokens=0.2, formatted_canary_share_of_tokens=0.0,
                            formatted_canary_share_of_loss_tokens=0.0, expected_drawn_batch=34.5,
                            canary_gradients=None)
    write_auditor(tmp_path / "r" / "auditor.json", auditor)
    assert read_auditor(tmp_path / "r") == auditor
    raw = read_json(tmp_path / "r" / "auditor.json")
    del raw["expected_drawn_batch"]
    write_json(tmp_path / "r" / "auditor.json", raw)
    with pytest.raises(DataError, match="auditor.json: missing key 'expected_drawn_batch'"):
        read_auditor(tmp_path / "r")
    write_json(tmp_path / "r" / "run.json", {**record_json(run), "version": RUN_VERSION - 1})
    with pytest.raises(DataError, match=f"expected {RUN_VERSION} \\(regenerate it: dvc repro finetune@r\\)"):
        read_run(tmp_path / "r")
    write_json(tmp_path / "r" / "run.json", {**record_json(run), "device_name": "cpu"})
    with pytest.raises(DataError, match="run.json: unknown key 'device_name'"):
        read_run(tmp_path / "r")
