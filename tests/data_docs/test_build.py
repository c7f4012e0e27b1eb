"""GX Data Docs from stored validation results: GX renders them, and the bytes do not depend on when."""
import json
import re

from stages.data_docs.build import build_data_docs
from stages.shared.core.gx import Expectation, run_suite


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


def test_the_stage_renders_every_processed_dataset_with_results(tmp_path):
    """`python -m stages.data_docs`: one page per suite of each processed folder holding gx_results.json (a folder
    without one is not a dataset with contracts), and the index, under report.out_dir/data_docs."""
    import yaml
    from testkit.project import ROOT

    from stages.data_docs.__main__ import main

    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["preprocess"]["out_dir"], p["report"]["out_dir"] = str(tmp_path / "processed"), str(tmp_path / "reports")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    rep = {"rows": {"success": True, "rows": 2, "results": [
        {"expectation": "expect_column_values_to_be_unique", "kwargs": {"column": "id"}, "success": True,
         "unexpected_count": 0, "element_count": 2}]}}
    for name in ("b", "a"):
        (tmp_path / "processed" / name).mkdir(parents=True)
        (tmp_path / "processed" / name / "gx_results.json").write_text(json.dumps(rep))
    (tmp_path / "processed" / "no_contracts").mkdir()
    main(["--params", str(tmp_path / "params.yaml")])
    out = tmp_path / "reports" / "data_docs"
    assert sorted(f.name for f in out.iterdir()) == ["a__rows.html", "b__rows.html", "index.html"]
    index = (out / "index.html").read_text()
    assert index.index(">a<") < index.index(">b<") and "no_contracts" not in index
