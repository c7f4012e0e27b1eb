"""Your own dataset reruns only your stages: on the reproduced tiny project, a text dataset with its own secrets and a
run on it are added to params.yaml (README, "Audit your own private text"), the new preprocess and secrets stages run,
and DVC's own `dvc status` then finds stale only the new run's fine-tune and attack, the audit, the Data Docs (a page
for the new dataset's contracts) and the report: every existing canaries, fine-tune, attack and replica stage still
matches dvc.lock (each depends on the dataset folder and the secrets file it reads, not the folders)."""
import json

import pytest
import yaml
from testkit.project import ALL_STAGES, run

pytestmark = pytest.mark.slow


def test_a_new_dataset_its_secrets_and_a_run_leave_every_existing_stage_up_to_date(reproduced_project):
    dest = reproduced_project
    assert json.loads(run(["dvc", "status", "--json"], dest).stdout) == {}
    raw = dest / "data/raw/mine/notes.jsonl"
    raw.parent.mkdir(parents=True)
    raw.write_text("".join(json.dumps({"body": f"note {i}: the parcel for desk {i % 9} waits at gate {i % 4}, call "
                                               f"555-01{i % 7:02d}"}) + "\n" for i in range(120)))
    p = yaml.safe_load((dest / "params.yaml").read_text())
    p["preprocess"]["datasets"]["mine"] = {
        "kind": "text", "path": "data/raw/mine/notes.jsonl", "format": "jsonl", "text_field": "body",
        "prompt_field": None, "completion_field": None, "id_field": None, "user_field": None, "rows_per_user": None,
        "user_level": None, "split_field": None, "split": {"valid": 0.1, "test": 0.1}, "min_chars": 1,
        "max_chars": None, "dedupe": True, "seed": 0, "rows": {}}
    p["secrets"]["datasets"]["mine"] = {
        "extractors": ["sequence", "phone"], "patterns": {}, "prompt_chars": 20, "prompt_fraction": 0.6,
        "min_occurrences": 1, "max_per_kind": 10, "base_check": False,
        "mining": {"ngram_chars": 20, "top_k": 10, "min_count": 2}}
    p["runs"]["mine_nondp"] = {"dataset": "mine", "secrets": "mine"}
    p["attack"]["runs"]["mine_nondp"] = None
    (dest / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    run(["dvc", "repro", "preprocess@mine", "secrets@mine"], dest)
    assert (dest / "data/processed/mine/train.parquet").is_file() and (dest / "data/secrets/mine.parquet").is_file()
    stale = set(json.loads(run(["dvc", "status", "--json"], dest).stdout))
    assert stale == {"finetune@mine_nondp", "attack@mine_nondp", "audit", "data_docs", "report"}
    assert {s for s in ALL_STAGES if s.split("@")[0] in {"canaries", "finetune", "attack", "secrets", "no_secrets"}
            or s.startswith("replica_")} & stale == set()
