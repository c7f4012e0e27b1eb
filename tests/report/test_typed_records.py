"""The report reads the audit's metrics as typed records: no section looks a record's field up by name in a dict
(``.get("auroc")``), so a renamed or removed field fails where the record is read, not as a silently empty cell."""
import ast
import dataclasses
import inspect
from pathlib import Path

from testkit.project import ROOT

import stages.audit.schema as schema
import stages.shared.studies.rows as rows
from stages.finetune.schema import AuditorRecord, PrivacyRecord, RunRecord, Valid

REPORT = ROOT / "stages" / "report"
#: the report's inputs that are not metrics records yet (the studies' and tools' own JSON files), per module: the
#: file it reads and the keys it reads from it that a metrics record also has as a field
UNTYPED = {
    "sections/silent.py": ("the variance stage's analysis.json (its silent study's plan)", {"power"}),
    "sections/study.py": ("reports/audit_study/ (study rows)", {"streams", "ideal_percentile", "design", "optimizer"}),
    "sections/variance.py": ("the variance stage's analysis.json", {"control", "n", "ci95"}),
}


def _record_fields() -> set[str]:
    classes = [c for m in (schema, rows) for _, c in inspect.getmembers(m, inspect.isclass)
               if dataclasses.is_dataclass(c) and c.__module__ == m.__name__] + [PrivacyRecord, RunRecord,
                                                                            AuditorRecord, Valid]
    assert len(classes) > 20
    return {f.name for c in classes for f in dataclasses.fields(c) if f.name != "bounds"}


def _lookups(path: Path):
    """(line, name) of every ``.get("name"...)`` call in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.lineno, node.args[0].value


def test_no_report_module_looks_up_a_metrics_record_field_with_get():
    fields = _record_fields()
    found, untyped = [], set()
    for p in sorted(REPORT.rglob("*.py")):
        module = str(p.relative_to(REPORT))
        for line, name in _lookups(p):
            if name in UNTYPED.get(module, ("", set()))[1]:
                untyped.add((module, name))
            elif name in fields:
                found.append(f"{p.relative_to(ROOT)}:{line}: .get({name!r})")
    assert not found, "a metrics record's field read as a dict key:\n" + "\n".join(found)
    # each exemption is still needed: one that no longer matches is dropped from UNTYPED
    assert untyped == {(m, k) for m, (_, keys) in UNTYPED.items() for k in keys}


def test_the_report_reads_metrics_json_through_its_one_reader():
    sources = {p: p.read_text() for p in REPORT.rglob("*.py")}
    readers = [p.relative_to(ROOT) for p, s in sources.items() if "metrics_of(" in s or "read_metrics(" in s]
    assert [str(p) for p in readers] == ["stages/report/build.py"]


def test_sections_over_typed_tables_look_nothing_up_by_name():
    """A section whose inputs are all records (metrics.json, reports/positive_control.json) has no ``.get("...")``."""
    for module in ("sections/positive_control.py",):
        assert list(_lookups(REPORT / module)) == [], module
