"""Number formatting the report prints (stages/shared/core/formatting.py)."""
from stages.shared.core.formatting import ci


def test_no_interval_is_printed_where_every_resample_is_identical():
    assert "[" not in ci(1.0, [1.0, 1.0]) and "no interval" in ci(1.0, [1.0, 1.0])
    assert ci(0.5, [0.25, 0.75]).endswith("]")
    assert "too few per side" in ci(0.5, None)
