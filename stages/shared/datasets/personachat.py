"""PersonaChat / ConvAI2: ParlAI text format or the json layout with personality/utterances.

One processed row per dialogue: its persona sentences and the aligned (partner, self) turns. Splits
are by dialogue. Fine-tuning pairs: persona + partner turn -> the persona owner's reply (SFT puts the
loss on the reply, so the persona is not learned), as in the seed's PersonaChat setting.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa

from ..core.errors import DataError
from ..core.gx import Expectation as E
from ..core.gx import Suite
from ..core.seeds import stream
from .spec import (
    DatasetSpec,
    Processed,
    SplitParams,
    register_dataset,
    require_path,
    row_count_suites,
    row_ranges,
    split_groups,
    split_rows,
)


@dataclass(frozen=True)
class PersonaChatParams:
    path: str
    format: Literal["auto", "parlai", "json"]
    split: SplitParams
    seed: int
    #: data contract: allowed row count per split, e.g. {train: [500, 20000]}
    rows: dict[str, tuple[int, ...]]

    def problems(self):
        return row_ranges(self.rows)


SCHEMA = pa.schema([
    pa.field("dialogue_id", pa.int32(), nullable=False),
    pa.field("persona", pa.list_(pa.string()), nullable=False),
    pa.field("partner", pa.list_(pa.string()), nullable=False),
    pa.field("self", pa.list_(pa.string()), nullable=False),
])

_LINE = re.compile(r"^(\d+) (.*)$")
_PERSONA = "your persona:"


def read_parlai(path: Path) -> list[dict]:
    dialogues: list[dict] = []
    cur: dict | None = None
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            m = _LINE.match(line)
            if not m:
                raise DataError(f"{path}:{lineno}: not ParlAI text format (expected '<n> <text>')")
            n, text = int(m.group(1)), m.group(2)
            if n == 1 or cur is None:
                cur = {"persona": [], "partner": [], "self": []}
                dialogues.append(cur)
            if text.startswith(_PERSONA):
                cur["persona"].append(text[len(_PERSONA):].strip())
                continue
            fields = text.split("\t")
            if len(fields) < 2:
                raise DataError(f"{path}:{lineno}: dialogue turn without a TAB between partner and self text")
            cur["partner"].append(fields[0].strip())
            cur["self"].append(fields[1].strip())
    return dialogues


def read_json(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict):  # {"train": [...], "valid": [...]}
        data = [d for part in data.values() if isinstance(part, list) for d in part]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a list of dialogues with 'personality' and 'utterances'")
    dialogues = []
    for i, d in enumerate(data):
        if not isinstance(d, dict) or "personality" not in d or "utterances" not in d or not d["utterances"]:
            raise DataError(f"{path}: dialogue {i} lacks 'personality' or 'utterances'")
        last = d["utterances"][-1]
        turns = list(last.get("history", []))
        if last.get("candidates"):
            turns.append(last["candidates"][-1])  # the gold reply is the last candidate
        dialogues.append({
            "persona": [str(p).strip() for p in d["personality"]],
            # history alternates partner, self, ... ("__ SILENCE __" when the persona owner speaks first)
            "partner": [str(t).strip() for t in turns[0::2]][: len(turns) // 2],
            "self": [str(t).strip() for t in turns[1::2]],
        })
    return dialogues


def read_dialogues(path: Path, fmt: str) -> list[dict]:
    if fmt == "auto":
        fmt = "json" if path.suffix.lower() == ".json" else "parlai"
    dialogues = read_json(path) if fmt == "json" else read_parlai(path)
    dialogues = [d for d in dialogues if d["self"]]
    if not dialogues:
        raise DataError(f"{path}: no dialogues found")
    return dialogues


def build(params: PersonaChatParams) -> Processed:
    path = require_path(params.path, "PersonaChat file", "preprocess.datasets.personachat.path")
    dialogues = read_dialogues(path, params.format)
    rows = [{"dialogue_id": i, **d} for i, d in enumerate(dialogues)]
    stats = [("dialogues", len(rows)), ("turn pairs", sum(len(r["self"]) for r in rows))]
    assign = split_groups([r["dialogue_id"] for r in rows], params.split.valid, params.split.test,
            stream("datasets.split").int_seed(params.seed))
    splits = split_rows(rows, "dialogue_id", assign)
    stats += [(f"final {s}", len(v)) for s, v in splits.items()]
    return Processed(SCHEMA, splits, stats)


def contract(processed: Processed, params: PersonaChatParams) -> list[Suite]:
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
    ])] + row_count_suites("personachat", processed.splits, params.rows)


def pairs(dialogues: list[dict]) -> list[tuple[str, str]]:
    """(prompt, reply) per turn: persona and partner utterance -> the persona owner's reply."""
    out = []
    for d in dialogues:
        persona = " ".join(d["persona"])
        for partner, reply in zip(d["partner"], d["self"]):
            out.append((f"your persona: {persona}\npartner: {partner}\nyou:", f" {reply}"))
    return out


SPEC = register_dataset(DatasetSpec(
    name="personachat", params=PersonaChatParams, schema=SCHEMA, build=build, contract=contract, pairs=pairs))
