"""Data contracts of the processed datasets, as Great Expectations suites.

Each dataset's contract is a list of suites, each a small pandas frame derived from the processed
splits (ids, lengths, hashes, flags: never raw text) and the expectations it must meet:
split disjointness (by dialogue, author, message or user), de-duplication, no empty text, no
held-out sample containing a train secret candidate, per-split row counts in configured ranges.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .gx import Expectation as E


@dataclass
class Suite:
    name: str
    frame: object  # pandas.DataFrame
    expectations: list


def _sha(text: str) -> str:
    return hashlib.sha1(text.strip().encode()).hexdigest()


def _row_counts(name: str, splits: dict, ranges: dict) -> list[Suite]:
    import pandas as pd

    out = []
    for split, (lo, hi) in ranges.items():
        frame = pd.DataFrame({"n": [1] * len(splits.get(split, []))})
        out.append(Suite(f"{name}_{split}_rows", frame, [E("ExpectTableRowCountToBeBetween",
                                                             {"min_value": lo, "max_value": hi})]))
    return out


def personachat(processed, params) -> list[Suite]:
    import pandas as pd

    rows = [(s, r) for s, rs in processed.splits.items() for r in rs]
    frame = pd.DataFrame({
        "dialogue_id": [r["dialogue_id"] for _, r in rows],
        "turns": [len(r["self"]) for _, r in rows],
        "shortest_reply": [min((len(t) for t in r["self"]), default=0) for _, r in rows],
        "aligned": [len(r["self"]) == len(r["partner"]) for _, r in rows],
    })
    return [Suite("personachat_dialogues", frame, [
        E("ExpectColumnValuesToBeUnique", {"column": "dialogue_id"}),  # a dialogue is in one split only
        E("ExpectColumnValuesToBeBetween", {"column": "turns", "min_value": 1}),
        E("ExpectColumnValuesToBeBetween", {"column": "shortest_reply", "min_value": 1}),  # no empty text
        E("ExpectColumnValuesToBeInSet", {"column": "aligned", "value_set": [True]}),
    ])] + _row_counts("personachat", processed.splits, params.rows)


def tofu(processed, params) -> list[Suite]:
    import pandas as pd

    rows = [(s, r) for s, rs in processed.splits.items() for r in rs]
    authors = pd.DataFrame(sorted({(r["author"], s) for s, r in rows}), columns=["author", "split"])
    per_author = pd.DataFrame([(r["author"], r["row"], len(r["answer"].strip()), len(r["question"].strip()))
                               for _, r in rows], columns=["author", "row", "answer_len", "question_len"])
    counts = per_author.groupby("author").size().reset_index(name="rows")
    k = params.rows_per_author
    return [
        Suite("tofu_author_split", authors, [E("ExpectColumnValuesToBeUnique", {"column": "author"})]),
        Suite("tofu_rows", per_author, [
            E("ExpectColumnValuesToBeUnique", {"column": "row"}),
            E("ExpectColumnValuesToBeBetween", {"column": "answer_len", "min_value": 1}),
            E("ExpectColumnValuesToBeBetween", {"column": "question_len", "min_value": 1}),
        ]),
        Suite("tofu_rows_per_author", counts, [
            E("ExpectColumnValuesToBeBetween", {"column": "rows", "min_value": k, "max_value": k})]),
    ] + _row_counts("tofu", processed.splits, params.rows)


def _message_frame(processed):
    import pandas as pd

    rows = [(s, r) for s, rs in processed.splits.items() for r in rs]
    return rows, pd.DataFrame({
        "message_id": [r["message_id"] for _, r in rows],
        "split": [s for s, _ in rows],
        "body_sha1": [_sha(r["body"]) for _, r in rows],
        "body_len": [len(r["body"].strip()) for _, r in rows],
    })


def enron(processed, params) -> list[Suite]:
    import pandas as pd

    from ..data.common import count_tokens

    rows, frame = _message_frame(processed)
    frame["tokens"] = [count_tokens(r["body"]) for _, r in rows]
    frame["tabs"] = [r["body"].count("\t") for _, r in rows]
    needles = [c["value"] for c in processed.extra.get("candidates", (None, []))[1]]
    held = [r["body"] for s, r in rows if s != "train"]
    if needles and held:
        rx = re.compile("|".join(re.escape(n) for n in sorted(set(needles), key=len, reverse=True)))
        hits = [bool(rx.search(b)) for b in held]
    else:
        hits = [False] * len(held)
    heldout = pd.DataFrame({"contains_train_secret": hits})
    return [
        Suite("enron_messages", frame, [
            E("ExpectColumnValuesToBeUnique", {"column": "message_id"}),  # splits disjoint by message
            E("ExpectColumnValuesToBeUnique", {"column": "body_sha1"}),  # content de-duplication holds
            E("ExpectColumnValuesToBeBetween", {"column": "body_len", "min_value": 1}),  # no empty text
            E("ExpectColumnValuesToBeBetween", {"column": "tokens", "min_value": params.min_tokens}),
            E("ExpectColumnValuesToBeBetween", {"column": "tabs", "max_value": params.max_tabs}),
        ]),
        Suite("enron_heldout_secrets", heldout, [
            E("ExpectColumnValuesToBeInSet", {"column": "contains_train_secret", "value_set": [False]})]),
    ] + _row_counts("enron", processed.splits, params.rows)


def enron_users(processed, params) -> list[Suite]:

    rows, frame = _message_frame(processed)
    frame["user"] = [r["user"] for _, r in rows]
    frame["user_set"] = [r["user_set"] for _, r in rows]
    users = frame[["user", "user_set"]].drop_duplicates()
    per_user = frame.groupby("user").size().reset_index(name="examples")
    dedupe = frame.assign(user_body=frame["user"] + ":" + frame["body_sha1"])
    trained = frame[frame["split"] == "train"][["user_set"]]
    heldout = frame[frame["split"] == "heldout"][["user_set"]]
    return [
        Suite("enron_users_sets", users, [E("ExpectColumnValuesToBeUnique", {"column": "user"})]),  # in or out
        Suite("enron_users_messages", dedupe, [
            E("ExpectColumnValuesToBeUnique", {"column": "message_id"}),  # attacker data never trained on
            E("ExpectColumnValuesToBeUnique", {"column": "user_body"}),  # per-user de-duplication
            E("ExpectColumnValuesToBeBetween", {"column": "body_len", "min_value": 1}),
        ]),
        Suite("enron_users_sizes", per_user, [
            E("ExpectColumnValuesToBeBetween", {"column": "examples", "min_value": params.min_samples})]),
        Suite("enron_users_train_is_held_in", trained, [
            E("ExpectColumnValuesToBeInSet", {"column": "user_set", "value_set": ["held_in"]})]),
        Suite("enron_users_heldout_is_held_out", heldout, [
            E("ExpectColumnValuesToBeInSet", {"column": "user_set", "value_set": ["held_out"]})]),
    ] + _row_counts("enron_users", processed.splits, params.rows)


CONTRACTS = {"personachat": personachat, "tofu": tofu, "enron": enron, "enron_users": enron_users}


def check_processed(dataset: str, processed, params, where: str) -> dict:
    """Run every suite of the dataset's contract; raise a one-line DataError on the first failing one."""
    from .gx import check

    return {s.name: check(s.name, s.frame, s.expectations, where) for s in CONTRACTS[dataset](processed, params)}
