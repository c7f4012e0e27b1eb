"""GX Data Docs from stored validation results: GX renders them, and the bytes do not depend on when."""
import json
import re

from stages.core.gx import Expectation, run_suite
from stages.report.data_docs import build_data_docs


def test_data_docs_are_rendered_by_gx_and_deterministic(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"id": [1, 2, 3], "n": [4, 5, 6]})
    rep = run_suite("rows", df, [Expectation("ExpectColumnValuesToBeUnique", {"column": "id"}),
                                 Expectation("ExpectColumnValuesToBeBetween", {"column": "n", "min_value": 5})])
    assert rep["success"] is False
    (tmp_path / "gx.json").write_text(json.dumps({"rows": rep}))
    pages = []
    for out in (tmp_path / "a", tmp_path / "b"):
        rows = build_data_docs({"toy": tmp_path / "gx.json"}, out)
        assert rows == [{"dataset": "toy", "suite": "rows", "success": False, "rows": 3, "page": "toy__rows.html"}]
        pages.append((out / "toy__rows.html").read_text())
        assert "FAILED" in (out / "index.html").read_text()
    assert pages[0] == pages[1]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", pages[0]))  # GX's own wording of each expectation
    assert "Status: Failed" in text and "values must be unique" in text and "1 unexpected values found" in text
    assert not re.search(r"\d{8}T\d{6}", pages[0]) and not re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-", pages[0])
