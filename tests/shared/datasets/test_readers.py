"""Dataset readers, filters and splits on small hand-made inputs whose right answer is stated."""
import json
from pathlib import Path

import pytest
from testkit.project import params, project_raw

from stages.shared.core.errors import ConfigError, DataError
from stages.shared.datasets import get_dataset
from stages.shared.datasets.enron import frequent_correspondents, machine_filters
from stages.shared.datasets.enron_users import mailbox_users
from stages.shared.datasets.personachat import read_parlai


def build(name: str, **overrides):
    """Dataset ``name`` built from the project's params with ``overrides``."""
    spec = get_dataset(name)
    return spec.build(params(spec.params, f"preprocess.datasets.{name}", **overrides))

PARLAI = """1 your persona: i like cats.
2 your persona: i am a chef.
3 hi , how are you ?\ti am fine , cooking dinner .
4 what do you cook ?\tpasta for my cats .
1 your persona: i run marathons.
2 hello\thi there , just back from a run .
"""

EMAIL = """Message-ID: <{i}.JavaMail.evans@thyme>
Date: Mon, 14 May 2001 16:39:00 -0700 (PDT)
From: {sender}
To: {to}
Subject: forecast {i}
X-Origin: {box}

{body}
"""

LONG = " ".join(f"word{i}" for i in range(40))  # 40 tokens: passes min_tokens=30


def write_mail(root: Path, box: str, i: int, body: str, sender="phillip.allen@enron.com",
               to="tim.belden@enron.com, john.doe@enron.com") -> None:
    p = root / box / "inbox" / f"{i}."
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(EMAIL.format(i=f"{box}{i}", body=body, sender=sender, to=to, box=box.title()))


# ----------------------------------------------------------------------------- PersonaChat
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
    dialogues = [{"personality": [f"p{i}"], "utterances": [
        {"history": ["__ SILENCE __"], "candidates": ["x", "first"]},
        {"history": ["__ SILENCE __", "first", "q"], "candidates": ["y", "second"]}]} for i in range(20)]
    f = tmp_path / "pc.json"
    f.write_text(json.dumps(dialogues))
    splits = build("personachat", path=str(f), split={"valid": 0.2, "test": 0.2}).splits
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [12, 4, 4]
    ids = [{r["dialogue_id"] for r in splits[s]} for s in ("train", "valid", "test")]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    row = splits["train"][0]
    assert row["partner"] == ["__ SILENCE __", "q"] and row["self"] == ["first", "second"]


# ----------------------------------------------------------------------------- TOFU
def _tofu_file(tmp_path, n=200):
    f = tmp_path / "tofu.json"
    f.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": f"a{i}"}) for i in range(n)))
    return f


def test_tofu_contiguous_author_split(tmp_path):
    p = build("tofu", path=str(_tofu_file(tmp_path)), rows_per_author=20, test_fraction=0.2)
    train, test = p.splits["train"], p.splits["test"]
    assert len(test) == 40 and len(train) == 160
    assert {r["author"] for r in test} == {8, 9}  # the last 20% of authors, as App. B.3 does with 10%
    assert [r["row"] for r in test] == list(range(160, 200))
    assert all(r["author"] == r["row"] // 20 for r in train + test)
    assert ("authors", 10) in p.stats


def test_tofu_random_author_split_is_disjoint(tmp_path):
    p = build("tofu", path=str(_tofu_file(tmp_path)), test_fraction=0.3, split="random")
    tr, te = {r["author"] for r in p.splits["train"]}, {r["author"] for r in p.splits["test"]}
    assert len(te) == 3 and not tr & te and len(tr | te) == 10


def test_tofu_hf_exports(tmp_path):
    from datasets import Dataset, DatasetDict

    rows = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(40)]
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "dict"))
    Dataset.from_list(rows).to_parquet(str(tmp_path / "full.parquet"))
    for path in ("saved", "dict", "full.parquet"):
        p = build("tofu", path=str(tmp_path / path), test_fraction=0.5)
        assert len(p.splits["train"]) == 20 and p.splits["train"][0]["question"] == "q0"


def test_tofu_truncated_json_line_names_the_line(tmp_path):
    f = tmp_path / "tofu.json"
    f.write_text('{"question": "q", "answer": "a"}\n{"question": "q2", "ans')
    with pytest.raises(DataError, match=r"tofu.json:2: not a JSON line"):
        build("tofu", path=str(f), rows_per_author=1)


# ----------------------------------------------------------------------------- Enron, example level
def _enron(root, **kw):
    over = dict(path=str(root), top_n=0, min_tokens=30, split={"valid": 0.0, "test": 0.0},
                heldout_filter={"pii": []})
    over.update(kw)
    return build("enron", **over)


def test_enron_maildir_parse_ids_and_content_dedupe(tmp_path):
    for i in range(8):
        write_mail(tmp_path / "md", "allen-p", i, f"body number {i} {LONG}")
    write_mail(tmp_path / "md", "allen-p", 8, f"body number 3 {LONG}")  # same content as 3
    (tmp_path / "md" / "copy").mkdir()
    (tmp_path / "md" / "copy" / "1.").write_text((tmp_path / "md/allen-p/inbox/1.").read_text())  # same Message-ID
    p = _enron(tmp_path / "md")
    stats = dict(p.stats)
    assert stats["raw messages"] == 10 and stats["unique Message-IDs"] == 9
    assert stats["step 1: content de-duplicated"] == 8
    r = next(r for r in p.splits["train"] if r["subject"] == "forecast allen-p0")
    assert r["sender"] == "phillip.allen@enron.com"
    assert r["recipients"] == ["tim.belden@enron.com", "john.doe@enron.com"]
    assert r["mailbox"] == "allen-p" and r["body"].startswith("body number 0")


def test_enron_top_senders_and_receivers():
    def m(sender, to):
        return {"sender": sender, "recipients": to}

    rows = [m("a", ["b"]), m("a", ["b"]), m("a", ["c"]), m("b", ["a"]), m("c", ["x"]), m("c", ["x"]), m("c", ["x"])]
    # senders: c 3, a 3, b 1; receivers: x 3, b 2, a 1, c 1 -> top-2 senders {a, c}, top-2 receivers {x, b}
    assert frequent_correspondents(rows, 2) == []
    # top-3 senders {a, c, b}; top-3 receivers {x, b, a} (ties by address) -> a and b qualify
    assert frequent_correspondents(rows, 3) == rows[:4]


def test_enron_machine_generated_tabs_and_length_filters():
    rows = [
        {"body": "HourAhead   schedule download failed.\nManual intervention   required " + LONG},
        {"body": "No ancillary schedules awarded. No variances detected.\n\nLOG MESSAGES:\n\nPARSING FILE -->> O: x"},
        {"body": "\t" * 101 + LONG},
        {"body": "too short"},
        {"body": "\t" * 100 + LONG},
    ]
    patterns = project_raw()["preprocess"]["datasets"]["enron"]["drop_patterns"]
    kept, dropped = machine_filters(rows, patterns, 100, 30)
    assert kept == [rows[4]]
    assert dropped == {"machine-generated pattern": 2, "more than 100 tabs": 1, "fewer than 30 tokens": 1}


def test_enron_heldout_samples_with_a_train_secret_are_dropped(tmp_path):
    for i in range(30):
        body = f"mail {i} {LONG}" + (" call 713-853-1234 now" if i % 3 == 0 else "")
        write_mail(tmp_path / "md", "allen-p", i, body)
    p = _enron(tmp_path / "md", split={"valid": 0.2, "test": 0.2}, heldout_filter={"pii": ["phone"]})
    assert any("713-853-1234" in r["body"] for r in p.splits["train"])
    assert not any("713-853-1234" in r["body"] for s in ("valid", "test") for r in p.splits[s])
    cands = p.extra["candidates"][1]
    assert {"value": "713-853-1234", "kind": "phone",
            "count": sum("713-853-1234" in r["body"] for r in p.splits["train"])} in cands
    dropped = sum(n for s, n in p.stats if s.startswith("step 4"))
    assert dropped == 10 - sum("713-853-1234" in r["body"] for r in p.splits["train"])


def test_enron_kaggle_csv(tmp_path):
    import csv

    f = tmp_path / "emails.csv"
    with open(f, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "message"])
        for i in range(5):
            w.writerow([f"allen-p/_sent_mail/{i}.", EMAIL.format(i=i, body=f"text {i} {LONG}", sender="a@x.com",
                                                                 to="b@x.com", box="Allen-P")])
    p = _enron(f, top_n=0)
    assert dict(p.stats)["raw messages"] == 5 and len(p.splits["train"]) == 5


def test_enron_bad_inputs(tmp_path):
    write_mail(tmp_path / "md", "allen-p", 1, LONG)
    (tmp_path / "md" / "allen-p" / "inbox" / "2.").write_text("this is not an email, just some words\n")
    with pytest.raises(DataError, match=r"inbox/2\.: not an email message"):
        _enron(tmp_path / "md")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.csv: empty csv"):
        _enron(empty)
    with pytest.raises(DataError, match="nope: Enron data .* not found"):
        _enron(tmp_path / "nope")


# ----------------------------------------------------------------------------- Enron, user level
def test_mailbox_user_is_the_most_frequent_last_name_address():
    rows = [{"mailbox": "smith-j", "sender": "john.smith@enron.com"}] * 3 + \
           [{"mailbox": "smith-j", "sender": "assistant@enron.com"}] * 5 + \
           [{"mailbox": "smith-j", "sender": "j.smith@aol.com"}] * 2 + \
           [{"mailbox": "doe-a", "sender": "someone@enron.com"}] * 9
    assert mailbox_users(rows) == {"smith-j": "john.smith@enron.com"}  # doe-a has no last-name address


def test_enron_user_level_split(tmp_path):
    md = tmp_path / "md"
    for box, sender, n in [("smith-j", "john.smith@enron.com", 40), ("jones-t", "tana.jones@enron.com", 30),
                           ("lay-k", "kenneth.lay@enron.com", 25), ("doe-a", "x@enron.com", 50),
                           ("kean-s", "steven.kean@enron.com", 5)]:
        for i in range(n):
            write_mail(md, box, i, f"{box} mail {i}", sender=sender)
    write_mail(md, "smith-j", 99, "smith-j mail 0", sender="john.smith@enron.com")  # exact duplicate
    p = build("enron_users", path=str(md), min_samples=20, heldout_fraction=0.1, attacker_fraction=0.1, seed=1)
    stats = dict(p.stats)
    assert stats["mailboxes"] == 5 and stats["mailboxes with a last-name sender address"] == 4
    assert stats["exact duplicates removed per user"] == 1
    assert stats["users with >= 20 examples"] == 3  # kean-s has only 5
    s = p.splits
    held_in = {r["user"] for r in s["train"]}
    held_out = {r["user"] for r in s["heldout"]}
    assert not held_in & held_out and len(held_in | held_out) == 3
    ids = [r["message_id"] for split in s.values() for r in split]
    assert len(ids) == len(set(ids)) == 40 + 30 + 25
    for u, n in [("john.smith@enron.com", 40), ("tana.jones@enron.com", 30), ("kenneth.lay@enron.com", 25)]:
        held = sum(r["user"] == u for r in s["valid"] + s["test"])
        attack = sum(r["user"] == u for r in s["attacker"])
        assert held == round(n * 0.1) and attack == round((n - held) * 0.1)
    assert (all(r["user_set"] == "held_in" for r in s["train"])
            and all(r["user_set"] == "held_out" for r in s["heldout"]))


def test_unknown_dataset():
    with pytest.raises(ConfigError, match="unknown dataset 'imdb'"):
        get_dataset("imdb")
