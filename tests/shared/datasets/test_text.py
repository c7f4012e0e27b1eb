"""Your own text declared in params only (stages/shared/datasets/text.py): jsonl / csv / parquet with any field names, a
user-level split, the data contract, and a one-line error naming the file, row and key for each bad input, with no
partial output (the preprocess stage writes nothing)."""
import csv
import json
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from testkit.data import TICKETS, text_spec, write_jsonl
from testkit.data import preprocess_text as preprocess
from testkit.data import text_project as project
from testkit.project import PYTHON, ROOT

from stages.shared.core.errors import ConfigError, DataError
from stages.shared.core.params import read_params


def test_a_jsonl_with_a_user_field_is_split_by_user_and_checked(tmp_path):
    from stages.shared.datasets import read_split

    data = write_jsonl(tmp_path / "tickets.jsonl", TICKETS + [TICKETS[3]])  # one exact duplicate
    params_path, out = project(tmp_path, {"path": str(data), "text_field": "Body Text", "id_field": "Ticket No",
                                          "user_field": "customer-handle", "dedupe": True})
    with pytest.raises(DataError, match="repeats id '1003'"):
        preprocess(params_path)  # the duplicate row repeats its id: ids must be unique
    assert not out.exists()
    params_path, out = project(tmp_path, {"path": str(data), "text_field": "Body Text",
                                          "user_field": "customer-handle", "rows": {"train": [30, 40]}})
    preprocess(params_path)
    spec = text_spec(params_path)
    splits = {s: read_split(tmp_path / "processed", text_spec(params_path), s) for s in spec.splits}
    assert sum(len(v) for v in splits.values()) == 60  # the duplicate dropped
    users = {s: {r["user"] for r in rows} for s, rows in splits.items()}
    assert not (users["train"] & users["valid"]) and not (users["train"] & users["test"]) and len(users["train"]) == 8
    assert spec.pairs(splits["train"][:1]) == [("", splits["train"][0]["completion"])]
    gx = json.loads((out / "gx_results.json").read_text())
    assert all(s["success"] for s in gx.values()) and gx["mine_user_split"]["rows"] == 12


def test_a_csv_of_prompts_and_completions_and_a_parquet_with_a_split_column(tmp_path):
    from stages.shared.datasets import read_split

    data = tmp_path / "qa.csv"
    with data.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["Q?", "A!"])
        w.writeheader()
        w.writerows({"Q?": f"question {i}", "A!": f" answer {i}" if i % 10 else ""} for i in range(40))
    params_path, _ = project(tmp_path, {"path": str(data), "format": "csv", "prompt_field": "Q?",
                                        "completion_field": "A!"})
    preprocess(params_path)
    spec = text_spec(params_path)
    rows = [r for s in ("train", "valid", "test") for r in read_split(tmp_path / "processed", spec, s)]
    assert len(rows) == 36 and all(r["prompt"].startswith("question") for r in rows)  # 4 empty answers dropped
    assert text_spec(params_path).pairs(rows[:1]) == [(rows[0]["prompt"], rows[0]["completion"])]
    table = pa.table({"txt": [f"row {i}" for i in range(30)], "part": ["train"] * 20 + ["valid"] * 5 + ["test"] * 5})
    pq.write_table(table, tmp_path / "t.parquet")
    params_path, _ = project(tmp_path, {"path": str(tmp_path / "t.parquet"), "format": "parquet", "text_field": "txt",
                                        "split_field": "part"})
    preprocess(params_path)
    spec = text_spec(params_path)
    assert [len(read_split(tmp_path / "processed", spec, s)) for s in ("train", "valid", "test")] == [20, 5, 5]


def test_user_level_text_gives_the_user_inference_layout_by_a_field_or_by_row_blocks(tmp_path):
    """``user_level``: half the users held in, each user's rows split into valid/test, the attacker's samples and
    the rest (trained for held-in users only); the spec is a user-level one (user inference, canary users), the
    contract checks the sets, and ``rows_per_user`` makes users of consecutive row blocks (TOFU's layout)."""
    from stages.shared.datasets import read_split
    from stages.shared.datasets.users import USER_SPLITS

    level = {"heldout_fraction": 0.2, "attacker_fraction": 0.25, "min_rows": 5, "max_users": None}
    data = write_jsonl(tmp_path / "t.jsonl", TICKETS)  # 12 customers x 5 tickets
    params_path, out = project(tmp_path, {"path": str(data), "text_field": "Body Text", "id_field": "Ticket No",
                                          "user_field": "customer-handle", "user_level": level})
    preprocess(params_path)
    spec = text_spec(params_path)
    assert spec.users and spec.splits == USER_SPLITS and spec.user_columns == ("id", "completion")
    splits = {s: read_split(tmp_path / "processed", text_spec(params_path), s) for s in spec.splits}
    sets = {r["user"]: r["user_set"] for rows in splits.values() for r in rows}
    held_in = {u for u, s in sets.items() if s == "held_in"}
    assert len(sets) == 12 and len(held_in) == 6
    assert {r["user"] for r in splits["train"]} == held_in and not {r["user"] for r in splits["heldout"]} & held_in
    assert {r["user"] for r in splits["attacker"]} == set(sets)  # one attacker sample of every user
    assert [len(splits[s]) for s in USER_SPLITS] == [18, 12, 0, 12, 18]  # per user: 1 valid, 1 attacker, 3 trained
    ids = [r["id"] for rows in splits.values() for r in rows]
    assert len(ids) == len(set(ids)) == 60
    gx = json.loads((out / "gx_results.json").read_text())
    assert all(s["success"] for s in gx.values()) and {"mine_user_sets", "mine_train_is_held_in"} <= set(gx)
    blocks = write_jsonl(tmp_path / "qa.jsonl", [{"question": f"q{i}", "answer": f"a{i}"} for i in range(40)])
    params_path, _ = project(tmp_path, {"path": str(blocks), "prompt_field": "question", "completion_field": "answer",
                                        "rows_per_user": 8, "user_level": {**level, "min_rows": 8}})
    preprocess(params_path)
    rows = [r for s in USER_SPLITS for r in read_split(tmp_path / "processed", text_spec(params_path), s)]
    by_user = {}
    for r in rows:
        by_user.setdefault(r["user"], set()).add(int(r["id"].split("-")[1]) // 8)
    assert sorted(by_user) == [f"user-{i}" for i in range(5)] and all(len(v) == 1 for v in by_user.values())


@pytest.mark.parametrize("entry,says", [
    ({"user_field": "customer-handle", "rows_per_user": 5}, "rows_per_user: set user_field or rows_per_user"),
    ({"user_level": {"heldout_fraction": 0.2, "attacker_fraction": 0.2, "min_rows": 4, "max_users": None}},
     "user_level: needs a user (user_field or rows_per_user)"),
    ({"rows_per_user": 5,
      "user_level": {"heldout_fraction": 0.2, "attacker_fraction": 0.0, "min_rows": 4, "max_users": None}},
     "user_level.attacker_fraction: must be in (0, 1)"),
])
def test_user_level_params_are_checked_naming_the_key(tmp_path, entry, says):
    data = write_jsonl(tmp_path / "t.jsonl", TICKETS)
    params_path, out = project(tmp_path, {"path": str(data), "text_field": "Body Text", **entry})
    with pytest.raises(ConfigError, match=f"preprocess.datasets.mine.{says}".replace("(", r"\(").replace(")", r"\)")):
        preprocess(params_path)
    assert not out.exists()


def test_canary_users_are_loaded_for_the_dataset_they_were_drawn_from_only(tmp_path):
    import pyarrow as pa

    from stages.canaries.schema import CANARY_USERS, CANARY_USERS_FILE, load_canary_users
    from stages.shared.core.io import write_table

    rows = [{"dataset": "enron_users", "user": "a@x", "length": 1, "user_set": "held_in", "substring": "zz"}]
    write_table(pa.Table.from_pylist(rows, schema=CANARY_USERS), tmp_path / CANARY_USERS_FILE, CANARY_USERS)
    assert set(load_canary_users(tmp_path, "enron_users")) == {"a@x"} and set(load_canary_users(tmp_path)) == {"a@x"}
    assert load_canary_users(tmp_path, "mine") == {}  # another user-level dataset's runs: not their users


@pytest.mark.parametrize("case", ["missing field", "empty file", "wrong type", "bad split value", "not json"])
def test_a_bad_file_is_one_line_naming_file_and_field_and_writes_nothing(tmp_path, case):
    good = [{"Body Text": f"t{i}", "part": "train"} for i in range(3)]
    bad = {"missing field": {"body": "x"}, "wrong type": {"Body Text": 3}, "bad split value": {"Body Text": "x",
                                                                                                "part": "dev"}}
    data = tmp_path / "bad.jsonl"
    if case == "empty file":
        data.write_text("")
    elif case == "not json":
        data.write_text('{"Body Text": "x"}\n{oops\n')
    else:
        write_jsonl(data, good + [bad[case]])
    params_path, out = project(tmp_path, {"path": str(data), "text_field": "Body Text",
                                          "split_field": "part" if case == "bad split value" else None})
    says = {"missing field": "row 3 has no field 'Body Text' (preprocess.datasets.mine.text_field",
            "empty file": "no rows (preprocess.datasets.mine.path)",
            "wrong type": "row 3 field 'Body Text' is int, not text (preprocess.datasets.mine.text_field)",
            "bad split value": "row 3 field 'part' is 'dev', not one of train, valid, test "
                               "(preprocess.datasets.mine.split_field)",
            "not json": "bad.jsonl:2: not a JSON line"}[case]
    with pytest.raises(DataError) as err:
        preprocess(params_path)
    assert str(data) in str(err.value) and says in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()


def test_the_stage_command_exits_2_with_one_line_and_bad_params_name_the_key(tmp_path):
    data = write_jsonl(tmp_path / "t.jsonl", [{"Body Text": "x"}, {"body": "y"}])
    params_path, out = project(tmp_path, {"path": str(data), "text_field": "Body Text"})
    proc = subprocess.run([PYTHON, "-m", "stages.preprocess", "--dataset", "mine", "--params", str(params_path)],
                          cwd=ROOT, capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {data}: row 1 has no field")
    assert not out.exists()
    params_path, _ = project(tmp_path, {"path": str(data), "text_field": "Body Text", "prompt_field": "q"})
    with pytest.raises(ConfigError, match="preprocess.datasets.mine.text_field: set text_field, or prompt_field"):
        preprocess(params_path)
    params_path, _ = project(tmp_path, {"path": str(data), "text_field": "Body Text", "format": "xlsx"})
    with pytest.raises(ConfigError, match="preprocess.datasets.mine.format"):
        preprocess(params_path)


def test_the_readmes_params_block_for_your_own_text_is_valid_params():
    """The README's "Audit your own private text" YAML, merged into the project's params, passes the whole-file
    check (its runs name the declared dataset), so copying it is all a user does."""
    import re

    from stages.params import validate_params
    from stages.shared.core.params import deep_merge

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Audit your own private text", 1)[1].split("\n## ", 1)[0]
    block = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    raw = deep_merge(read_params(ROOT / "params.yaml"), block)
    params = validate_params(raw, "README.md")
    assert params.runs["tickets_dp"].dataset == "tickets" and params.runs["tickets_dp"].dp.enabled
    assert params.datasets["tickets"].user_field == "customer" and params.datasets["tickets"].user_level.min_rows == 4
    assert "user_inference" in params.attack.runs["tickets_nondp"]
