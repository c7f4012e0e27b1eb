"""The run's manifest: every candidate's membership and how many steps sampled it, read back by version."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.finetune.inputs import Inputs
from stages.finetune.manifest import manifest_of
from stages.finetune.schema import MANIFEST, MANIFEST_FILE, read_manifest, write_manifest
from stages.shared.core.errors import DataError
from stages.shared.lm.examples import make_example


def _inputs(scheduled: bool) -> Inputs:
    """2 text rows, 2 secret-sharer candidates (one inserted twice), 2 canaries of each of 2 kinds (one member each),
    3 users; every example distinct, so a count can be traced to the example it belongs to."""
    ex = lambda i: make_example([0], [i + 1], "nwp", "t")  # noqa: E731
    canaries = {k: [{"canary_id": f"{k}-{j}", "member": j == 0} for j in range(2)] for k in ("random", "unigram")}
    members = {k: [r for r in rows if r["member"]] for k, rows in canaries.items()}
    canary_ex = [ex(10), ex(11)]
    formatted_rows = [{"canary_id": "f-0", "format": "phone", "inserted": True, "repetitions": 2},
                      {"canary_id": "f-1", "format": "phone", "inserted": False, "repetitions": 2}]
    return Inputs(text=[ex(0), ex(1)], text_pairs=[("", "a"), ("", "b")], heldout_pairs=[("", "c"), ("", "d")],
                  evals=[], members=members, all_canaries=canaries, canaries=canary_ex,
                  canary_ids=["random-0", "unigram-0"], canary_kinds=["random", "unigram"],
                  formatted_rows=formatted_rows, formatted=[ex(20), ex(20)],
                  scheduled=canary_ex if scheduled else [], canary_users={"u2": {}}, candidates=4,
                  secret_control=None, users={"u1": True, "u2": False, "u3": True},
                  secret_arms=[({"secret_id": "s0", "kind": "phone"}, True),
                               ({"secret_id": "s1", "kind": "phone"}, False)])


@pytest.mark.parametrize("scheduled", [False, True])
def test_inclusions_follow_each_candidate_to_its_place_in_the_training_examples(scheduled):
    inputs = _inputs(scheduled)
    examples = inputs.pool + inputs.scheduled  # what loop.train counts, in its order
    counts = np.arange(100, 100 + len(examples))
    rows = {(r["source"], r["candidate_id"]): r for r in manifest_of(inputs, counts)}
    where = lambda e: [i for i, x in enumerate(examples) if x is e]  # noqa: E731
    for cid, e in zip(inputs.canary_ids, inputs.canaries):
        assert rows[("canary", cid)]["inclusions"] == counts[where(e)[0]] and rows[("canary", cid)]["member"]
    assert rows[("canary", "random-1")]["inclusions"] == 0 and not rows[("canary", "random-1")]["member"]
    assert rows[("text", "text-member-00001")]["inclusions"] == counts[where(inputs.text[1])[0]]
    assert rows[("text", "text-heldout-00000")]["inclusions"] == 0
    assert rows[("text", "text-heldout-00001")]["target"] == "d" and not rows[("text", "text-heldout-00001")]["member"]
    f0 = [i for i, x in enumerate(examples) if x is inputs.formatted[0] or x is inputs.formatted[1]]
    assert rows[("formatted", "f-0")]["inclusions"] == counts[f0].sum() and rows[("formatted", "f-0")]["member"]
    assert rows[("formatted", "f-1")]["inclusions"] == 0 and not rows[("formatted", "f-1")]["member"]
    assert [rows[("user", u)]["member"] for u in ("u1", "u2", "u3")] == [True, False, True]
    assert rows[("user", "u2")]["group"] == "canary_users" and rows[("user", "u1")]["group"] == "users"
    assert rows[("secret", "s0")]["member"] and not rows[("secret", "s1")]["member"]


def test_a_model_trained_elsewhere_has_no_counts(tmp_path):
    rows = manifest_of(_inputs(False), None)
    assert all(r["inclusions"] is None for r in rows)
    write_manifest(tmp_path, rows)
    back = read_manifest(tmp_path)
    assert sorted(map(str, back)) == sorted(map(str, rows))
    assert [r["candidate_id"] for r in read_manifest(tmp_path, "text")] == [
        "text-member-00000", "text-heldout-00000", "text-member-00001", "text-heldout-00001"]  # rank order


def test_another_manifest_version_or_a_repeated_candidate_is_refused(tmp_path):
    rows = manifest_of(_inputs(False), None)
    with pytest.raises(ValueError, match="appears twice"):
        write_manifest(tmp_path, rows + rows[:1])
    with pytest.raises(ValueError, match="unknown source 'model'"):
        write_manifest(tmp_path, [{**rows[0], "source": "model"}])
    old = MANIFEST.with_metadata({"manifest_version": "0"})
    pq.write_table(pa.Table.from_pylist(rows, schema=old), tmp_path / MANIFEST_FILE)
    with pytest.raises(DataError, match="manifest version '0', expected 1"):
        read_manifest(tmp_path)
