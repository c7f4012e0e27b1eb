"""Real secrets of a text dataset with no code (``secrets.datasets.<name>``): phone numbers, a named regex and
recurring sequences mined from its completions by the secrets stage (labelled synthetic tickets)."""
import pytest
import yaml
from testkit.data import TICKETS, text_spec, write_jsonl
from testkit.data import preprocess_text as preprocess
from testkit.data import text_project as project

from stages.shared.core.errors import ConfigError


def secrets_params(params_path, entry: dict):
    p = yaml.safe_load(params_path.read_text())
    p["secrets"]["datasets"]["mine"] = {"prompt_chars": 11, "prompt_fraction": 0.6, "min_occurrences": 1,
                                        "max_per_kind": None, "base_check": False, "patterns": {},
                                        "mining": {"ngram_chars": 30, "top_k": 20, "min_count": 3}, **entry}
    params_path.write_text(yaml.safe_dump(p, sort_keys=False))
    from stages.secrets.params import load_secrets

    return load_secrets("mine", params_path)[1]


def test_phone_a_named_pattern_and_sequences_come_from_the_completions(tmp_path):
    from stages.secrets.extract import extract

    data = write_jsonl(tmp_path / "tickets.jsonl", TICKETS)
    params_path, out = project(tmp_path, {"path": str(data), "text_field": "Body Text", "id_field": "Ticket No"})
    preprocess(params_path)
    dsp = secrets_params(params_path, {"extractors": ["phone", "ref", "sequence"], "patterns": {"ref": r"REF-\d{4}"}})
    found = extract(text_spec(params_path), dsp, tmp_path / "processed")
    kinds = {k: [s for s in found if s["kind"] == k] for k in ("phone", "ref", "sequence")}
    train = {r["Ticket No"] for r in TICKETS} & {int(s["source"]) for s in kinds["phone"]}
    assert 0 < len(kinds["phone"]) <= 20 and train  # sources are the rows' ids
    assert all(s["value"].startswith("713-555-01") and s["prompt"] == "call me at " for s in kinds["phone"])
    assert 0 < len(kinds["ref"]) <= 15 and all(s["value"].startswith("REF-4") for s in kinds["ref"])
    assert any("arrived late, call me at 713-555-01" in s["value"] for s in kinds["sequence"])
    assert text_spec(params_path).secrets == "mine"  # declared: runs on it get VMR and the randomised control
    spec = text_spec(params_path)
    assert spec.trained_secrets([{"completion": "x REF-4003 y"}], kinds["ref"]) == [
        s["value"] == "REF-4003" for s in kinds["ref"]]


def test_what_a_text_dataset_cannot_have_names_the_key(tmp_path):
    from stages.secrets.extract import extract

    data = write_jsonl(tmp_path / "tickets.jsonl", TICKETS)
    params_path, _ = project(tmp_path, {"path": str(data), "text_field": "Body Text"})
    preprocess(params_path)
    dsp = secrets_params(params_path, {"extractors": ["genre"]})
    with pytest.raises(ConfigError, match=r"secrets.datasets.mine.extractors\[0\]: extractor 'genre' reads tofu"):
        extract(text_spec(params_path), dsp, tmp_path / "processed")
    dsp = secrets_params(params_path, {"extractors": ["phone"], "mining": None})
    with pytest.raises(ConfigError, match="secrets.datasets.mine.mining: needed"):
        extract(text_spec(params_path), dsp, tmp_path / "processed")
    with pytest.raises(ConfigError, match=r"secrets.datasets.mine.patterns.ref: not a valid regular expression"):
        secrets_params(params_path, {"extractors": ["ref"], "patterns": {"ref": "REF-(\\d"}})
