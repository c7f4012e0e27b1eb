"""finetune.sample_by: whole groups of rows (e.g. every row of a few TOFU authors) instead of random rows."""
import pytest

from stages.core.errors import DataError
from stages.finetune.schema import sample_groups


def _rows(authors=12, per=20):
    return [{"author": f"a{a:02d}", "question": f"q{a}-{i}"} for a in range(authors) for i in range(per)]


def test_whole_groups_up_to_the_row_budget_seeded():
    rows = _rows()
    got = sample_groups(rows, 100, seed=0, by="author", where="tofu train split")
    authors = {r["author"] for r in got}
    assert len(got) == 100 and len(authors) == 5  # 5 whole authors of 20 rows
    for a in authors:  # every row of each drawn author
        assert sum(r["author"] == a for r in got) == 20
    assert sample_groups(rows, 100, 0, "author", "x") == got  # seeded
    others = {frozenset(r["author"] for r in sample_groups(rows, 100, s, "author", "x")) for s in range(1, 6)}
    assert len(others | {frozenset(authors)}) > 1  # the seed decides which authors


def test_budget_never_exceeded_except_for_one_oversized_group():
    rows = _rows()
    assert len(sample_groups(rows, 59, 0, "author", "x")) == 40  # a third author would exceed 59
    assert len(sample_groups(rows, 5, 0, "author", "x")) == 20  # at least one group
    assert len(sample_groups(rows, 10_000, 0, "author", "x")) == len(rows)


def test_missing_field_names_the_param():
    with pytest.raises(DataError, match=r"tofu train split: rows have no field 'genre' \(finetune.sample_by\)"):
        sample_groups(_rows(2, 2), 10, 0, "genre", "tofu train split")
