"""Dataset readers on small hand-made inputs, and their failure modes."""
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.config import EnronParams, PersonaChatParams, SplitParams, TofuParams
from stages.data import get_dataset
from stages.data.personachat import read_parlai
from stages.errors import ConfigError, DataError

PARLAI = """1 your persona: i like cats.
2 your persona: i am a chef.
3 hi , how are you ?\ti am fine , cooking dinner .
4 what do you cook ?\tpasta for my cats .
1 your persona: i run marathons.
2 hello\thi there , just back from a run .
"""

EMAIL = """Message-ID: <{i}.JavaMail.evans@thyme>
Date: Mon, 14 May 2001 16:39:00 -0700 (PDT)
From: phillip.allen@enron.com
To: tim.belden@enron.com, john.doe@enron.com
Subject: forecast {i}
X-Origin: Allen-P

{body}
"""


def test_parlai_dialogues(tmp_path):
    f = tmp_path / "pc.txt"
    f.write_text(PARLAI)
    d = read_parlai(f)
    assert len(d) == 2
    assert d[0]["persona"] == ["i like cats.", "i am a chef."]
    assert d[0]["partner"] == ["hi , how are you ?", "what do you cook ?"]
    assert d[0]["self"] == ["i am fine , cooking dinner .", "pasta for my cats ."]
    assert d[1]["self"] == ["hi there , just back from a run ."]


def test_parlai_malformed_line_names_file_and_line(tmp_path):
    f = tmp_path / "pc.txt"
    f.write_text("1 your persona: x\nnot a numbered line\n")
    with pytest.raises(DataError, match=r"pc.txt:2: not ParlAI text format"):
        read_parlai(f)


def test_personachat_json_layout_and_dialogue_split(tmp_path):
    import json

    dialogues = [{"personality": [f"p{i}"], "utterances": [
        {"history": ["__ SILENCE __"], "candidates": ["x", "first"]},
        {"history": ["__ SILENCE __", "first", "q"], "candidates": ["y", "second"]}]} for i in range(20)]
    f = tmp_path / "pc.json"
    f.write_text(json.dumps(dialogues))
    out = tmp_path / "out"
    out.mkdir()
    get_dataset("personachat").build(PersonaChatParams(path=str(f), split=SplitParams(0.2, 0.2)), out)
    splits = {s: pq.read_table(out / f"{s}.parquet").to_pylist() for s in ("train", "valid", "test")}
    assert [len(v) for v in splits.values()] == [12, 4, 4]
    ids = [set(r["dialogue_id"] for r in v) for v in splits.values()]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    row = splits["train"][0]
    assert row["partner"] == ["__ SILENCE __", "q"] and row["self"] == ["first", "second"]


def test_tofu_author_level_split(tmp_path):
    import json

    f = tmp_path / "tofu.json"
    f.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": f"a{i}"}) for i in range(200)))
    out = tmp_path / "out"
    out.mkdir()
    stats = get_dataset("tofu").build(TofuParams(path=str(f), rows_per_author=20, test_fraction=0.2), out)
    train = pq.read_table(out / "train.parquet").to_pylist()
    test = pq.read_table(out / "test.parquet").to_pylist()
    assert len(test) == 40 and len(train) == 160
    assert all(r["author"] == r["row"] // 20 for r in train + test)
    assert not {r["author"] for r in train} & {r["author"] for r in test}
    assert ("authors", 10) in stats


def test_tofu_truncated_json_line_names_the_line(tmp_path):
    f = tmp_path / "tofu.json"
    f.write_text('{"question": "q", "answer": "a"}\n{"question": "q2", "ans')
    with pytest.raises(DataError, match=r"tofu.json:2: not a JSON line"):
        get_dataset("tofu").build(TofuParams(path=str(f), rows_per_author=1), tmp_path)


def _maildir(root: Path, bodies: list[str]) -> Path:
    for i, body in enumerate(bodies):
        p = root / "allen-p" / "inbox" / f"{i + 1}."
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(EMAIL.format(i=i, body=body))
    return root


def test_enron_maildir_parse_and_exact_dedupe(tmp_path):
    root = _maildir(tmp_path / "maildir", [f"body number {i}" for i in range(8)] + ["body number 3", "body number 5"])
    out = tmp_path / "out"
    out.mkdir()
    stats = dict(get_dataset("enron").build(EnronParams(path=str(root), split=SplitParams(0.1, 0.1)), out))
    assert stats["raw messages"] == 10
    assert stats["after exact-duplicate bodies dropped"] == 8
    rows = [r for s in ("train", "valid", "test") for r in pq.read_table(out / f"{s}.parquet").to_pylist()]
    assert len(rows) == 8
    r = next(r for r in rows if r["subject"] == "forecast 0")
    assert r["sender"] == "phillip.allen@enron.com"
    assert r["recipients"] == ["tim.belden@enron.com", "john.doe@enron.com"]
    assert r["mailbox"] == "allen-p" and r["body"].strip() == "body number 0"


def test_enron_kaggle_csv(tmp_path):
    import csv

    f = tmp_path / "emails.csv"
    with open(f, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "message"])
        for i in range(5):
            w.writerow([f"allen-p/_sent_mail/{i}.", EMAIL.format(i=i, body=f"text {i}")])
    out = tmp_path / "out"
    out.mkdir()
    stats = dict(get_dataset("enron").build(EnronParams(path=str(f), split=SplitParams(0.0, 0.2)), out))
    assert stats["raw messages"] == 5


def test_enron_bad_inputs(tmp_path):
    root = _maildir(tmp_path / "maildir", ["ok"])
    (root / "allen-p" / "inbox" / "2.").write_text("this is not an email, just some words\n")
    with pytest.raises(DataError, match=r"inbox/2\.: not an email message"):
        get_dataset("enron").build(EnronParams(path=str(root)), tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.csv: empty csv"):
        get_dataset("enron").build(EnronParams(path=str(empty)), tmp_path)
    with pytest.raises(DataError, match="nope: Enron data .* not found"):
        get_dataset("enron").build(EnronParams(path=str(tmp_path / "nope")), tmp_path)


def test_unknown_dataset():
    with pytest.raises(ConfigError, match="unknown dataset 'imdb'"):
        get_dataset("imdb")
