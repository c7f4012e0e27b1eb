"""Shared: the records of the research studies' tables, which tools write (stages/tools/studies, the flows) and the
report reads: each instrument's measure on one pool (``rows``) and the positive control's table
(``positive_control``, reports/positive_control.json). It imports only ``stages.shared.core``."""
