"""The audit stage's public surface for the flows: the tables comparing the metrics of several experiments (the sweep
flow), the design study's rows (flows/audit_study.py), the pooled rule's development look (flows/design_look.py) and
the DP engine self-check's judge (flows/selfcheck.py).
A flow imports a stage through this module, ``schema`` or ``params``, never an internal module."""
from . import selfcheck  # noqa: F401  (the judge: verdict, format_row, HEADER, document)
from .compare import canary_table, default_keys, primary_confidences, sweep_markdown, table  # noqa: F401
from .pooled import design_look  # noqa: F401  (a development look at the pooled rule)
from .run import replica_primary  # noqa: F401
from .study import FIELDS, POOLED_FIELDS, pooled_row, pooled_summary, study_rows, summarise  # noqa: F401
