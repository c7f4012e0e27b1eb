"""Canary users (user-inference Algorithm 1): each carries its substring in every document, inserted at the
same place by every stage."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.canaries.params import CanaryUsersParams
from stages.canaries.schema import apply_canary_users
from stages.canaries.users import build_canary_users
from stages.datasets import get_dataset
from support import params


def test_canary_users_carry_their_substring_in_every_document(tmp_path, tiny_tokenizer):
    d = tmp_path / "enron_users"
    d.mkdir()
    rng = np.random.default_rng(0)
    for split in ("train", "valid", "test", "attacker", "heldout"):
        rows = [{"message_id": f"<{split}{u}{i}>", "file": "f", "mailbox": "m", "sender": f"u{u}@x", "recipients": [],
                 "subject": "", "date": "", "body": " ".join(f"word{rng.integers(100)}" for _ in range(30)),
                 "user": f"u{u}@x", "user_set": "held_in" if u % 2 else "held_out"} for u in range(6) for i in range(3)]
        pq.write_table(pa.Table.from_pylist(rows, schema=get_dataset("enron_users").schema), d / f"{split}.parquet")
    cu = build_canary_users(params(CanaryUsersParams, "canaries.users", lengths=[1, 4], per_length=2), tmp_path, tiny_tokenizer, tmp_path)
    assert len({c["user"] for c in cu}) == 4
    assert sorted(c["user_set"] for c in cu) == ["held_in", "held_in", "held_out", "held_out"]
    mapping = {c["user"]: c["substring"] for c in cu}
    for split in ("train", "valid", "test", "attacker", "heldout"):
        rows = pq.read_table(d / f"{split}.parquet").to_pylist()
        for r in apply_canary_users(rows, mapping):
            if r["user"] in mapping:
                assert mapping[r["user"]] in r["body"]
    again = apply_canary_users(rows, mapping)
    assert again == apply_canary_users(rows, mapping)  # same insertion position every time
