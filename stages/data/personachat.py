"""PersonaChat / ConvAI2: ParlAI text format or the json layout with personality/utterances.

One output row per dialogue: its persona sentences and the aligned (partner, self) turns. Splits are
by dialogue. The SFT rows (persona + partner turn -> self turn, loss on the reply) are built later
by the fine-tuning stage.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import DataError
from . import schemas
from .common import require_path, split_rows
from .registry import Processed, register_dataset
from .splits import split_groups

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


@register_dataset("personachat")
def build(params) -> Processed:
    path = require_path(params.path, "PersonaChat file", "preprocess.datasets.personachat.path")
    dialogues = read_dialogues(path, params.format)
    rows = [{"dialogue_id": i, **d} for i, d in enumerate(dialogues)]
    stats = [("dialogues", len(rows)), ("turn pairs", sum(len(r["self"]) for r in rows))]
    assign = split_groups([r["dialogue_id"] for r in rows], params.split.valid, params.split.test, params.seed)
    splits = split_rows(rows, "dialogue_id", assign)
    stats += [(f"final {s}", len(v)) for s, v in splits.items()]
    return Processed(schemas.PERSONACHAT, splits, stats)
