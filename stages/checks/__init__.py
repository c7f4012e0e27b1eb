"""Data contracts at stage boundaries: pyarrow schemas (stages.data.schemas, checked in stages.io)
and Great Expectations suites (here; GX is imported lazily because its import costs seconds)."""
