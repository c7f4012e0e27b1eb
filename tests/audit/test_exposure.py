"""The exposure summary: exposure rate and mean exposure by repetitions, on planted log-perplexities."""
import numpy as np
import pyarrow as pa
import pytest

from stages.attack.exposure import exposures
from stages.attack.schema import EXPOSURE
from stages.audit.exposure import summarize


def test_exposure_rate_counts_inserted_fills_below_every_other():
    px = np.array([30.0, 12.0, 40.0, 35.0, 33.0, 31.0, 50.0, 45.0])
    rank, exp = exposures(px)
    t = pa.Table.from_pylist([{"canary_id": f"c{i}", "format": "name", "inserted": i in (1, 2), "repetitions": i,
                               "log_perplexity": float(p), "rank": int(rk), "exposure": float(e)}
                              for i, (p, rk, e) in enumerate(zip(px, rank, exp))], schema=EXPOSURE)
    s = summarize(t)["name"]
    assert s["exposure_rate"] == 0.5  # c1 beats every non-inserted fill, c2 does not
    assert s["mean_exposure_by_repetitions"][1] == pytest.approx(3.0)
    assert summarize(t)["all"]["exposure_rate"] == 0.5
