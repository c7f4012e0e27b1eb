"""Labelled synthetic data: a user-level processed dataset, a text dataset declared in params, and jsonl files."""
from __future__ import annotations

import json
from pathlib import Path

from testkit.project import ROOT

SPLITS = ("train", "valid", "test", "attacker", "heldout")


def users_dataset(tmp_path: Path, n_users: int = 12) -> Path:
    """A synthetic user-level processed dataset (enron_users schema) under tmp_path/enron_users: every user has
    valid, test and attacker rows; held-in users (odd) train rows, held-out users (even) heldout rows, as the
    preprocess writes them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stages.shared.datasets import get_dataset

    d = tmp_path / "enron_users"
    d.mkdir()
    rng = np.random.default_rng(0)
    for split in SPLITS:
        users = range(n_users) if split not in ("train", "heldout") else \
            [u for u in range(n_users) if (u % 2 == 1) == (split == "train")]
        rows = [{"message_id": f"<{split}{u}{i}>", "file": "f", "mailbox": "m", "sender": f"u{u}@x", "recipients": [],
                 "subject": "", "date": "", "body": " ".join(f"word{rng.integers(100)}" for _ in range(30)),
                 "user": f"u{u}@x", "user_set": "held_in" if u % 2 else "held_out"} for u in users for i in range(3)]
        pq.write_table(pa.Table.from_pylist(rows, schema=get_dataset("enron_users").schema), d / f"{split}.parquet")
    return d


#: labelled synthetic: made-up tickets with unusual field names, 12 customers with 5 tickets each
TICKETS = [{"Ticket No": 1000 + i, "customer-handle": f"cust{i % 12}", "Body Text": f"ticket {i}: my order {i * 7} "
            f"arrived late, call me at 713-555-01{i % 20:02d} about REF-{4000 + i % 15}"} for i in range(60)]


def text_project(tmp_path, entry: dict) -> tuple:
    """A params file with the text dataset ``mine`` (``entry`` over the defaults) writing under tmp_path."""
    import yaml

    from stages.shared.core.params import read_params

    p = read_params(ROOT / "params.yaml")  # with studies.yaml: the file written below stands alone
    p["preprocess"]["out_dir"] = str(tmp_path / "processed")
    p["preprocess"]["datasets"]["mine"] = {"kind": "text", "format": "jsonl", "text_field": None, "prompt_field": None,
                                           "completion_field": None, "id_field": None, "user_field": None,
                                           "rows_per_user": None, "user_level": None,
                                           "split_field": None, "split": {"valid": 0.2, "test": 0.2},
                                           "min_chars": 1, "max_chars": None, "dedupe": True, "seed": 0,
                                           "rows": {}, **entry}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path, tmp_path / "processed" / "mine"


def preprocess_text(params_path):
    from stages.preprocess.__main__ import main

    main(["--dataset", "mine", "--params", str(params_path)])


def text_spec(params_path, name: str = "mine"):
    """The spec of the text dataset ``name`` the params file declares (nothing resolves a name from memory)."""
    from stages.shared.core.params import read_params
    from stages.shared.datasets import get_dataset

    return get_dataset(name, read_params(params_path))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
