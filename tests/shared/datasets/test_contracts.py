"""Every data-contract expectation has a case that makes it fail (and the clean data passes)."""
import copy

import pytest
from testkit.project import params

from stages.shared.core.errors import DataError
from stages.shared.core.gx import check_suites
from stages.shared.datasets import CANDIDATES, Processed, get_dataset


def check_processed(dataset: str, processed: Processed, ds_params, where: str) -> dict:
    return check_suites(get_dataset(dataset).contract(processed, ds_params), where)


def ds_params(name: str, **overrides):
    return params(get_dataset(name).params, f"preprocess.datasets.{name}", **overrides)

LONG = " ".join(f"w{i}" for i in range(40))


def personachat():
    rows = [{"dialogue_id": i, "persona": ["p"], "partner": ["hi"], "self": ["hello"]} for i in range(6)]
    return Processed(get_dataset("personachat").schema, {"train": rows[:4], "valid": rows[4:5], "test": rows[5:]}, [])


def tofu():
    rows = [{"row": i, "author": i // 2, "question": f"q{i}", "answer": f"a{i}"} for i in range(8)]
    return Processed(get_dataset("tofu").schema, {"train": rows[:6], "test": rows[6:]}, [])


def _msg(i, body, **kw):
    return {"message_id": f"<{i}>", "file": f"f{i}", "mailbox": "allen-p", "sender": "a@x.com", "recipients": [],
            "subject": "", "date": "", "body": body, **kw}


def enron():
    rows = [_msg(i, f"mail {i} {LONG}") for i in range(6)]
    cands = [{"value": "SECRET-STRING-1234", "kind": "sequence", "count": 2}]
    return Processed(get_dataset("enron").schema, {"train": rows[:4], "valid": rows[4:5], "test": rows[5:]}, [],
                     {"candidates": (CANDIDATES, cands)})


def enron_users():
    def u(i, user, user_set):
        return _msg(i, f"{user} mail {i}", user=user, user_set=user_set)

    s = {"train": [u(i, "a@x", "held_in") for i in range(3)], "valid": [u(3, "a@x", "held_in")],
         "test": [u(4, "b@x", "held_out")], "attacker": [u(5, "a@x", "held_in"), u(6, "b@x", "held_out")],
         "heldout": [u(i, "b@x", "held_out") for i in range(7, 10)]}
    return Processed(get_dataset("enron_users").schema, s, [])


P = {"personachat": (personachat, ds_params("personachat", rows={"train": [1, 10]})),
     "tofu": (tofu, ds_params("tofu", rows_per_author=2, rows={"train": [6, 6], "test": [2, 2]})),
     "enron": (enron, ds_params("enron", min_tokens=30, max_tabs=100, rows={"train": [1, 10]})),
     "enron_users": (enron_users, ds_params("enron_users", min_samples=5, rows={"train": [1, 10]}))}


def _set(split, i, **kw):
    def f(p):
        p.splits[split][i].update(kw)
    return f


CASES = [
    ("personachat", "personachat_dialogues", "expect_column_values_to_be_unique",
     lambda p: p.splits["valid"].append(copy.deepcopy(p.splits["train"][0]))),
    ("personachat", "personachat_dialogues", "expect_column_values_to_be_between(turns",
     _set("train", 0, partner=[], self=[])),
    ("personachat", "personachat_dialogues", "expect_column_values_to_be_between(shortest_reply",
     _set("train", 1, self=[""])),
    ("personachat", "personachat_dialogues", "expect_column_values_to_be_in_set(aligned",
     _set("train", 2, partner=["a", "b"])),
    ("personachat", "personachat_train_rows", "expect_table_row_count_to_be_between",
     lambda p: p.splits["train"].extend(dict(r, dialogue_id=100 + i) for i, r in enumerate(p.splits["train"] * 3))),
    ("tofu", "tofu_author_split", "expect_column_values_to_be_unique", _set("test", 0, author=0)),
    ("tofu", "tofu_rows", "expect_column_values_to_be_unique(row", _set("train", 1, row=0)),
    ("tofu", "tofu_rows", "expect_column_values_to_be_between(answer_len", _set("train", 2, answer="  ")),
    ("tofu", "tofu_rows", "expect_column_values_to_be_between(question_len", _set("train", 3, question="")),
    ("tofu", "tofu_rows_per_author", "expect_column_values_to_be_between(rows", lambda p: p.splits["train"].pop()),
    ("tofu", "tofu_test_rows", "expect_table_row_count_to_be_between", lambda p: p.splits["test"].clear()),
    ("enron", "enron_messages", "expect_column_values_to_be_unique(message_id", _set("valid", 0, message_id="<0>")),
    ("enron", "enron_messages", "expect_column_values_to_be_unique(body_sha1", _set("test", 0, body=f"mail 0 {LONG}")),
    ("enron", "enron_messages", "expect_column_values_to_be_between(body_len", _set("train", 1, body="   ")),
    ("enron", "enron_messages", "expect_column_values_to_be_between(tokens", _set("train", 2, body="short mail")),
    ("enron", "enron_messages", "expect_column_values_to_be_between(tabs", _set("train", 3, body="\t" * 101 + LONG)),
    ("enron", "enron_heldout_secrets", "expect_column_values_to_be_in_set",
     _set("test", 0, body=f"x SECRET-STRING-1234 {LONG}")),
    ("enron", "enron_train_rows", "expect_table_row_count_to_be_between", lambda p: p.splits["train"].clear()),
    ("enron_users", "enron_users_sets", "expect_column_values_to_be_unique", _set("attacker", 1, user_set="held_in")),
    ("enron_users", "enron_users_messages", "expect_column_values_to_be_unique(message_id",
     _set("attacker", 0, message_id="<0>")),
    ("enron_users", "enron_users_messages", "expect_column_values_to_be_unique(user_body",
     _set("train", 1, body="a@x mail 0")),
    ("enron_users", "enron_users_messages", "expect_column_values_to_be_between(body_len", _set("train", 2, body="")),
    ("enron_users", "enron_users_sizes", "expect_column_values_to_be_between(examples",
     lambda p: p.splits["heldout"].pop()),
    ("enron_users", "enron_users_train_is_held_in", "expect_column_values_to_be_in_set",
     lambda p: p.splits["train"].append(dict(p.splits["heldout"][0], message_id="<50>", body="b@x new"))),
    ("enron_users", "enron_users_heldout_is_held_out", "expect_column_values_to_be_in_set",
     lambda p: p.splits["heldout"].append(dict(p.splits["train"][0], message_id="<51>", body="a@x new"))),
    ("enron_users", "enron_users_train_rows", "expect_table_row_count_to_be_between",
     lambda p: p.splits["train"].extend(dict(p.splits["train"][0], message_id=f"<6{i}>", body=f"a@x extra {i}")
                                        for i in range(10))),
]


@pytest.mark.parametrize("dataset", sorted(P))
def test_clean_data_meets_its_contract(dataset):
    make, params = P[dataset]
    report = check_processed(dataset, make(), params, f"data/processed/{dataset}")
    assert all(rep["success"] for rep in report.values())


@pytest.mark.parametrize("dataset,suite,needle,mutate", CASES, ids=[f"{c[1]}:{c[2].split('(')[-1]}" for c in CASES])
def test_each_expectation_fails_on_violating_data(dataset, suite, needle, mutate):
    make, params = P[dataset]
    p = make()
    mutate(p)
    with pytest.raises(DataError) as exc:
        check_processed(dataset, p, params, f"data/processed/{dataset}")
    msg = str(exc.value)
    assert msg.startswith(f"data/processed/{dataset}: GX suite '{suite}' failed: ") and needle in msg, msg
