"""Enron email, user level (user-inference-attacks.txt App. D.1 and section 4.1).

* user of a mailbox = among the sender addresses of its emails, those containing the last name
  inferred from the mailbox name (``<last name>-<first initial>``), the most frequent one; a mailbox
  with no such address is omitted (counted);
* a user's examples = every email (across all mailboxes) sent from that address, exact duplicates
  removed per user;
* users with fewer than ``min_samples`` examples are dropped (150 on the full corpus);
* ``heldout_fraction`` of each user's examples go to valid/test (half each); users are split 50/50
  into held-in (trained on) and held-out (never trained on); ``attacker_fraction`` of each user's
  remaining examples is the attacker's knowledge and is never trained on.

Outputs: train (held-in users' training examples), valid, test, attacker (attacker knowledge of
held-in and held-out users) and heldout (held-out users' other examples). Fine-tuning pairs and real
secrets are Enron's (the whole body; data/secrets/enron.parquet).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from ..core.gx import Expectation as E
from ..core.gx import Suite
from ..core.params import check
from ..core.seeds import stream
from . import enron
from .enron import body_key, read_messages, unique_ids
from .spec import DatasetSpec, Processed, register_dataset, require_path, row_count_suites, row_ranges
from .users import USER_SPLITS, user_level_splits


@dataclass(frozen=True)
class EnronUsersParams:
    path: str
    format: Literal["auto", "maildir", "csv"]
    #: users with fewer examples are dropped (150 on the full corpus, App. D.1)
    min_samples: int
    heldout_fraction: float
    attacker_fraction: float
    seed: int
    rows: dict[str, tuple[int, ...]]

    def problems(self):
        return (check(self.min_samples >= 2, "min_samples", "must be >= 2", self.min_samples)
                + check(0 <= self.heldout_fraction < 1, "heldout_fraction", "must be in [0, 1)", self.heldout_fraction)
                + check(0 <= self.attacker_fraction < 1, "attacker_fraction", "must be in [0, 1)",
                        self.attacker_fraction)
                + row_ranges(self.rows))


SCHEMA = pa.schema(list(enron.SCHEMA) + [
    pa.field("user", pa.string(), nullable=False),  # the sender address chosen for the mailbox
    pa.field("user_set", pa.string(), nullable=False),  # held_in | held_out
])


def last_name(mailbox: str) -> str:
    return mailbox.split("-")[0].strip().lower()


def mailbox_users(rows: list[dict]) -> dict[str, str]:
    """mailbox -> chosen sender address (the most frequent one containing the mailbox's last name)."""
    by_box: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        if r["mailbox"]:
            by_box[r["mailbox"]][r["sender"]] += 1
    users = {}
    for box, senders in sorted(by_box.items()):
        name = last_name(box)
        cands = [(c, a) for a, c in senders.items() if name and name in a.lower()]
        if cands:
            users[box] = max(cands, key=lambda ca: (ca[0], ca[1]))[1]
    return users


def build(params: EnronUsersParams) -> Processed:
    path = require_path(params.path, "Enron data (maildir or emails.csv)", "preprocess.datasets.enron_users.path")
    rows = unique_ids(read_messages(path, params.format))
    stats = [("messages (unique Message-IDs)", len(rows))]
    boxes = {r["mailbox"] for r in rows if r["mailbox"]}
    users = mailbox_users(rows)
    stats += [("mailboxes", len(boxes)), ("mailboxes with a last-name sender address", len(users))]
    address_to_user = {a: a for a in users.values()}
    per_user: dict[str, list[dict]] = defaultdict(list)
    seen: dict[str, set] = defaultdict(set)
    dup = 0
    for r in sorted(rows, key=lambda r: r["file"]):
        u = address_to_user.get(r["sender"])
        if u is None:
            continue
        k = body_key(r["body"])
        if k in seen[u]:
            dup += 1
            continue
        seen[u].add(k)
        per_user[u].append(r)
    stats += [("users (distinct addresses)", len(per_user)), ("exact duplicates removed per user", dup),
              ("examples of those users", sum(len(v) for v in per_user.values()))]
    kept = {u: v for u, v in per_user.items() if len(v) >= params.min_samples}
    stats.append((f"users with >= {params.min_samples} examples", len(kept)))
    out, counts = user_level_splits(kept, params.heldout_fraction, params.attacker_fraction,
                                    stream("datasets.enron_users.rows").numpy(params.seed),
                                    stream("datasets.enron_users.users").int_seed(params.seed))
    stats += counts
    stats += [(f"final {s}", len(v)) for s, v in out.items()]
    return Processed(SCHEMA, out, stats)


def contract(processed: Processed, params: EnronUsersParams) -> list[Suite]:
    rows, frame = enron.message_frame(processed)
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
    ] + row_count_suites("enron_users", processed.splits, params.rows)


SPEC = register_dataset(DatasetSpec(
    name="enron_users", params=EnronUsersParams, schema=SCHEMA, build=build, contract=contract, pairs=enron.pairs,
    splits=USER_SPLITS, secrets="enron", trained_secrets=enron.trained_secrets, users=True, texts=enron.texts))
