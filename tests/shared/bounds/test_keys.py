"""The bounds' keys (stages/shared/bounds/keys.py): every metrics key of a bound is built by ``BoundKeys`` (and nowhere
else), and a test's bounds round-trip through the flat metrics keys."""
import ast
from pathlib import Path

import pytest
from testkit.project import ROOT

from stages.shared.bounds.keys import BOUND_STATS, BoundKeys, Bounds, confidence_key, mc_interval_key, mcse_key


@pytest.mark.parametrize("bounds", [Bounds(0.95, 1.853, 1.31, 2.02), Bounds(0.99, 0.0, 0.0, None),
                                    Bounds(0.999, 0.4)])
def test_bounds_round_trip_through_the_metrics_keys(bounds):
    gdp = bounds.gdp_mu_lb is not None
    flat = bounds.to_metrics(gdp)
    assert Bounds.from_metrics(flat, bounds.confidence) == bounds
    assert set(flat) == ({"eps_lb_" + BoundKeys(bounds.confidence).tag} if not gdp else {
        BoundKeys(bounds.confidence).stat(s) for s in ("eps_lb", "gdp_mu_lb", "gdp_eps_lb")})


def test_the_keys_are_the_ones_metrics_json_has():
    k = BoundKeys(0.95)
    assert [k.stat(s) for s in BOUND_STATS] == ["eps_lb_95", "gdp_mu_lb_95", "gdp_eps_lb_95", "curve_eps_lb_95",
                                                "curve_sigma_lb_95", "max_provable_eps_lb_95"]
    assert k.ideal("gdp_eps_lb", "p10") == "ideal_gdp_eps_lb_95_p10" and mcse_key(k.ideal()) == \
        "ideal_eps_lb_95_median_mcse"
    assert mc_interval_key(k.ideal()) == "ideal_eps_lb_95_median_mc95"
    assert k.headline("audit_gdp") == "audit_gdp_eps_lb_95" and k.label == "ε̂95"
    assert confidence_key(0.999, "gdp_") == "gdp_eps_lb_999" == BoundKeys(0.999).gdp_eps_lb
    with pytest.raises(KeyError):
        k.stat("eps")


def _key_fstrings(path: Path) -> list[str]:
    """f-strings in ``path`` that format a metrics key (a literal part naming eps_lb, mu_lb, sigma_lb, ideal_,
    efficiency_, _mcse, minus_base or score_ next to a formatted value; a dotted lineage path such as
    ``runs.<run>.audit_primary.<key>`` joins keys, it does not build one)."""
    parts = ("eps_lb", "mu_lb", "sigma_lb", "ideal_", "efficiency_", "_mcse", "minus_base", "score_")
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) for v in node.values):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if any(p in text for p in parts) and " " not in text.strip() and "." not in text:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def test_no_fstring_builds_a_metric_key_outside_the_record_module():
    record = ROOT / "stages" / "shared" / "bounds" / "keys.py"
    files = [p for d in ("stages", "flows", "leakaudit") for p in (ROOT / d).rglob("*.py") if p != record]
    assert [hit for p in files for hit in _key_fstrings(p)] == []
    assert _key_fstrings(record)  # the check sees the record module's own key builders
