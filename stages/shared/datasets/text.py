"""Your own private text, declared in params alone: ``preprocess.datasets.<name>`` with ``kind: text``.

    preprocess:
      datasets:
        tickets:                       # any name; runs.<run>.dataset: tickets
          kind: text
          path: data/raw/tickets.jsonl
          format: jsonl                # jsonl | csv | parquet | hf (a datasets save_to_disk directory)
          text_field: body             # the text trained on (or prompt_field + completion_field)
          id_field: ticket_id          # optional: a unique id per row (else the row number)
          user_field: customer         # optional: splits by user, so no user has rows on both sides
          rows_per_user: null          # optional, instead of user_field: each block of this many consecutive rows
                                       #   is one user (TOFU's layout: 20 questions per author)
          user_level: null             # optional (needs a user): the user-inference layout, half the users held in:
                                       #   {heldout_fraction: 0.2, attacker_fraction: 0.25, min_rows: 4,
                                       #   max_users: null}
          split_field: null            # optional: a column holding train | valid | test (else a seeded split)
          split: {valid: 0.1, test: 0.1}
          min_chars: 1                 # rows whose trained text is shorter (stripped) are dropped; max_chars likewise
          max_chars: null
          dedupe: true                 # exact duplicates of (prompt, text) are dropped, the first kept
          seed: 0
          rows: {train: [10, 10000000]}   # data contract: allowed rows per split

One processed row per kept row: ``id``, ``prompt`` (empty for ``text_field``), ``completion`` (the text trained on),
``user`` and ``user_set``. With ``user_level`` the splits are the user-inference layout every user-level dataset
shares (``users.user_level_splits``: held-in users' training rows, valid/test, the attacker's samples of every user,
held-out users' other rows), so runs on it get user inference (``user_inference``), over as many users as the file
has, and canary users (``canaries.users.dataset``). Fine-tuning pairs are (prompt, completion): SFT puts the loss
on the completion only, so a text dataset trains on its whole text and a prompt/completion dataset on the
completions. Its real secrets need no code either: ``secrets.datasets.<name>`` with the text extractors (recurring
sequences, phone, email, and any regex its ``patterns`` name), read from the completions; a secret counts as trained
when a trained completion contains it.
A bad file is a one-line error naming the file, the row and the field (missing, not text, no rows). The spec is
the same for every such dataset; ``resolve`` builds it for a name that params declare with ``kind: text``.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa

from ..core.errors import DataError
from ..core.gx import Expectation as E
from ..core.gx import Suite
from ..core.params import check
from ..core.seeds import stream
from .spec import (
    DATASETS,
    DECLARED,
    DatasetSpec,
    Processed,
    SplitParams,
    require_path,
    row_count_suites,
    row_ranges,
    split_groups,
)
from .users import USER_SPLITS, user_level_splits

KIND = "text"
SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class UserLevelParams:
    #: of each user's rows, this share goes to valid/test (half each)
    heldout_fraction: float
    #: of the rest, this share is the attacker's samples of the user (never trained on; user inference scores them)
    attacker_fraction: float
    #: users with fewer rows (after the filters) are dropped
    min_rows: int
    #: at most this many of the remaining users (a seeded draw, before the layout), or null: all (a smaller pool of
    #: users trains in less time; each kept user keeps all of its rows)
    max_users: int | None

    def problems(self):
        return (check(0 < self.heldout_fraction < 1, "heldout_fraction",
                      "must be in (0, 1) (utility is measured on the valid rows)", self.heldout_fraction)
                + check(0 < self.attacker_fraction < 1, "attacker_fraction", "must be in (0, 1)",
                        self.attacker_fraction)
                + check(self.min_rows >= 2, "min_rows", "must be >= 2 (a user needs an attacker row and a trained one)",
                        self.min_rows)
                + check(self.max_users is None or self.max_users >= 2, "max_users", "must be >= 2 or null",
                        self.max_users))


@dataclass(frozen=True)
class TextParams:
    kind: Literal["text"]
    path: str
    format: Literal["jsonl", "csv", "parquet", "hf"]
    text_field: str | None
    prompt_field: str | None
    completion_field: str | None
    id_field: str | None
    user_field: str | None
    rows_per_user: int | None
    user_level: UserLevelParams | None
    split_field: str | None
    split: SplitParams
    min_chars: int
    max_chars: int | None
    dedupe: bool
    seed: int
    rows: dict[str, tuple[int, ...]]

    def problems(self):
        pair = self.prompt_field is not None or self.completion_field is not None
        return (check((self.text_field is None) == pair and (not pair or (self.prompt_field and self.completion_field)),
                      "text_field", "set text_field, or prompt_field and completion_field (not both)",
                      self.text_field)
                + check(self.user_field is None or self.rows_per_user is None, "rows_per_user",
                        "set user_field or rows_per_user, not both", self.rows_per_user)
                + check(self.rows_per_user is None or self.rows_per_user >= 1, "rows_per_user", "must be >= 1",
                        self.rows_per_user)
                + check(self.user_level is None or self.has_users, "user_level",
                        "needs a user (user_field or rows_per_user)", self.user_level)
                + check(self.user_level is None or self.split_field is None, "user_level",
                        "splits by user itself: set split_field to null", self.split_field)
                + check(self.min_chars >= 0, "min_chars", "must be >= 0", self.min_chars)
                + check(self.max_chars is None or self.max_chars >= self.min_chars, "max_chars",
                        "must be null or >= min_chars", self.max_chars)
                + check(self.split_field is not None or self.user_level is not None or self.split.valid > 0, "split",
                        "valid must be > 0 (utility is measured on it) unless split_field is set", self.split.valid)
                + row_ranges(self.rows))

    @property
    def has_users(self) -> bool:
        return self.user_field is not None or self.rows_per_user is not None


SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("prompt", pa.string(), nullable=False),
    pa.field("completion", pa.string(), nullable=False),
    pa.field("user", pa.string(), nullable=True),  # null without user_field or rows_per_user
    pa.field("user_set", pa.string(), nullable=True),  # held_in | held_out with user_level, else null
])


def read_records(path: Path, fmt: str) -> list[dict]:
    """The file's rows as dicts (csv: every value a string)."""
    try:
        if fmt == "jsonl":
            rows = []
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{path}:{lineno}: not a JSON line ({exc.msg})") from None
            return rows
        if fmt == "csv":
            with path.open(newline="", encoding="utf-8") as f:
                return list(csv.DictReader(f))
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        from datasets import DatasetDict, load_from_disk

        ds = load_from_disk(str(path))
        if isinstance(ds, DatasetDict):
            ds = ds["train"] if "train" in ds else ds[next(iter(ds))]
        return ds.to_list()
    except DataError:
        raise
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except Exception as exc:  # pyarrow, csv and datasets raise several types for an unreadable file
        raise DataError(f"{path}: not a readable {fmt} file ({type(exc).__name__}: {one_line(exc)})") from None


def one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def field_of(path: Path, i: int, row, field: str, key: str, optional: bool = False) -> str | None:
    """Row ``i``'s value of ``field`` as a string: a missing field or a value that is not text is a one-line error
    naming the file, the row and the params key (ids and users may be integers: they are written as strings)."""
    if not isinstance(row, dict):
        raise DataError(f"{path}: row {i} is a {type(row).__name__}, not a record with fields")
    if field not in row:
        raise DataError(f"{path}: row {i} has no field {field!r} ({key}; fields: {', '.join(map(str, row))})")
    v = row[field]
    if v is None and optional:
        return None
    if key.endswith(("id_field", "user_field")) and isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if not isinstance(v, str):
        raise DataError(f"{path}: row {i} field {field!r} is {type(v).__name__}, not text ({key})")
    return v


def build_for(name: str):
    key = f"preprocess.datasets.{name}"

    def build(params: TextParams) -> Processed:
        path = require_path(params.path, f"{name} data", f"{key}.path")
        raw = read_records(path, params.format)
        if not raw:
            raise DataError(f"{path}: no rows ({key}.path)")
        rows, seen, ids = [], set(), set()
        dropped = {"duplicates": 0, "too short": 0, "too long": 0}
        for i, r in enumerate(raw):
            if params.text_field:
                prompt, text = "", field_of(path, i, r, params.text_field, f"{key}.text_field")
            else:
                prompt = field_of(path, i, r, params.prompt_field, f"{key}.prompt_field")
                text = field_of(path, i, r, params.completion_field, f"{key}.completion_field")
            rid = field_of(path, i, r, params.id_field, f"{key}.id_field") if params.id_field else f"row-{i}"
            if rid in ids:
                raise DataError(f"{path}: row {i} repeats id {rid!r} ({key}.id_field must be unique)")
            ids.add(rid)
            user = (field_of(path, i, r, params.user_field, f"{key}.user_field") if params.user_field
                    else f"user-{i // params.rows_per_user}" if params.rows_per_user else None)
            split = field_of(path, i, r, params.split_field, f"{key}.split_field") if params.split_field else None
            if split is not None and split not in SPLITS:
                raise DataError(f"{path}: row {i} field {params.split_field!r} is {split!r}, not one of "
                                f"{', '.join(SPLITS)} ({key}.split_field)")
            n = len(text.strip())
            if n < params.min_chars:
                dropped["too short"] += 1
                continue
            if params.max_chars is not None and n > params.max_chars:
                dropped["too long"] += 1
                continue
            if params.dedupe and (prompt, text) in seen:
                dropped["duplicates"] += 1
                continue
            seen.add((prompt, text))
            rows.append({"id": rid, "prompt": prompt, "completion": text, "user": user, "user_set": None,
                         "_split": split})
        if not rows:
            raise DataError(f"{path}: no rows left after the length filters and dedupe ({key})")
        stats = [("rows read", len(raw))] + [(f"dropped: {k}", v) for k, v in dropped.items()] \
            + ([("users", len({r["user"] for r in rows}))] if params.has_users else [])
        if params.user_level:
            splits, counts = user_splits(rows, params.user_level, params.seed, path, key)
            stats += counts
        else:
            splits = assign_splits(rows, params)
        return Processed(SCHEMA, splits, stats + [(f"final {s}", len(v)) for s, v in splits.items()])

    return build


def user_splits(rows: list[dict], params: UserLevelParams, seed: int, path: Path,
                key: str) -> tuple[dict[str, list[dict]], list]:
    """The user-inference layout (``users.user_level_splits``) of the users with at least ``min_rows`` rows."""
    per_user: dict[str, list[dict]] = {}
    for r in rows:
        per_user.setdefault(r["user"], []).append({k: v for k, v in r.items() if k not in ("_split", "user_set")})
    kept = {u: v for u, v in per_user.items() if len(v) >= params.min_rows}
    if len(kept) < 2:
        raise DataError(f"{path}: {len(kept)} users with >= {params.min_rows} rows; user_level needs at least 2 "
                        f"({key}.user_level.min_rows)")
    counts = [(f"users with >= {params.min_rows} rows", len(kept))]
    if params.max_users is not None and len(kept) > params.max_users:
        names = sorted(kept)
        chosen = stream("datasets.text.max_users").numpy(seed).choice(len(names), params.max_users, replace=False)
        kept = {names[i]: kept[names[i]] for i in sorted(chosen)}
        counts.append((f"users drawn (max_users {params.max_users})", len(kept)))
    splits, more = user_level_splits(kept, params.heldout_fraction, params.attacker_fraction,
                                     stream("datasets.text.user_rows").numpy(seed),
                                     stream("datasets.text.users").int_seed(seed))
    return splits, counts + more


def assign_splits(rows: list[dict], params: TextParams) -> dict[str, list[dict]]:
    """The split column's values, else a seeded split of the users (user_field: no user on two sides) or rows."""
    if params.split_field:
        where = {id(r): r["_split"] for r in rows}
    else:
        group = "user" if params.has_users else "id"
        assign = split_groups([r[group] for r in rows], params.split.valid, params.split.test,
                stream("datasets.split").int_seed(params.seed))
        at = {g: s for s, gs in assign.items() for g in gs}
        where = {id(r): at[r[group]] for r in rows}
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for r in rows:
        out[where[id(r)]].append({k: v for k, v in r.items() if k != "_split"})
    return out


def contract_for(name: str):
    def contract(processed: Processed, params: TextParams) -> list[Suite]:
        import pandas as pd

        rows = [(s, r) for s, rs in processed.splits.items() for r in rs]
        frame = pd.DataFrame([(r["id"], len(r["completion"].strip())) for _, r in rows], columns=["id", "chars"])
        suites = [Suite(f"{name}_rows", frame, [
            E("ExpectColumnValuesToBeUnique", {"column": "id"}),
            E("ExpectColumnValuesToBeBetween", {"column": "chars", "min_value": max(params.min_chars, 1),
                                                **({"max_value": params.max_chars} if params.max_chars else {})})])]
        if params.user_level:  # half the users held in: each user in one set, trained rows only of held-in users
            users = pd.DataFrame(sorted({(r["user"], r["user_set"]) for _, r in rows}), columns=["user", "user_set"])
            sides = pd.DataFrame([(s, r["user_set"]) for s, r in rows if s in ("train", "heldout")],
                                 columns=["split", "user_set"])
            suites += [Suite(f"{name}_user_sets", users, [E("ExpectColumnValuesToBeUnique", {"column": "user"})]),
                       Suite(f"{name}_train_is_held_in", sides[sides["split"] == "train"], [
                           E("ExpectColumnValuesToBeInSet", {"column": "user_set", "value_set": ["held_in"]})]),
                       Suite(f"{name}_heldout_is_held_out", sides[sides["split"] == "heldout"], [
                           E("ExpectColumnValuesToBeInSet", {"column": "user_set", "value_set": ["held_out"]})])]
        elif params.has_users and not params.split_field:  # a user-level split: every user on one side only
            users = pd.DataFrame(sorted({(r["user"], s) for s, r in rows}), columns=["user", "split"])
            suites.append(Suite(f"{name}_user_split", users, [E("ExpectColumnValuesToBeUnique", {"column": "user"})]))
        return suites + row_count_suites(name, processed.splits, params.rows)

    return contract


def pairs(rows: list[dict]) -> list[tuple[str, str]]:
    """(prompt, completion): SFT puts the loss on the completion (the whole text of a text_field dataset)."""
    return [(r["prompt"], r["completion"]) for r in rows]


def texts(rows: list[dict]) -> list[tuple[str, str]]:
    """(id, completion): what the secret extractors read (the text trained on)."""
    return [(r["id"], r["completion"]) for r in rows]


def trained_secrets(trained_rows: list[dict], secrets: list[dict]) -> list[bool]:
    """A secret counts as trained when one of the run's trained texts contains its value."""
    text = "\n\x00".join(r["completion"] for r in trained_rows)
    return [s["value"] in text for s in secrets]


def spec_for(name: str, with_secrets: bool, users: bool = False) -> DatasetSpec:
    """The text dataset ``name``; ``with_secrets``: params declare ``secrets.datasets.<name>`` (VMR, the control);
    ``users``: its entry sets ``user_level`` (user inference, canary users)."""
    return DatasetSpec(name=name, params=TextParams, schema=SCHEMA, build=build_for(name),
                       contract=contract_for(name), pairs=pairs, texts=texts,
                       secrets=name if with_secrets else None, trained_secrets=trained_secrets,
                       splits=USER_SPLITS if users else SPLITS, users=users, user_columns=("id", "completion"))


def declared(raw: dict) -> list[str]:
    """The names ``raw`` (params) declares as text datasets (``preprocess.datasets.<name>`` with ``kind: text``)."""
    entries = ((raw.get("preprocess") or {}).get("datasets") or {})
    return [n for n, e in entries.items() if isinstance(e, dict) and e.get("kind") == KIND and n not in DATASETS]


def resolve(name: str, raw: dict) -> DatasetSpec | None:
    if name not in declared(raw):
        return None
    entry = raw["preprocess"]["datasets"][name]
    return spec_for(name, name in ((raw.get("secrets") or {}).get("datasets") or {}), bool(entry.get("user_level")))


DECLARED.append((declared, resolve))
