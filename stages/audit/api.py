"""The audit stage's public surface for the flows: the tables comparing the metrics of several experiments (the sweep
flow), the design study's rows (flows/audit_study.py), the pooled rule's development look (flows/design_look.py) and
the DP engine self-check's judge (flows/selfcheck.py), and the one-run bounds and their ideal for the variance
study's pooled tests and power (stages/variance/study.py).
A flow or a downstream stage imports a stage through this module, ``schema`` or ``params``, never an internal
module."""
from . import selfcheck  # noqa: F401  (the judge: verdict, format_row, HEADER, document)
from .ceiling import ideal_counts, trial_bounds  # noqa: F401  (the last-iterate ideal's one-run audits)
from .compare import canary_table, default_keys, primary_confidences, sweep_markdown, table  # noqa: F401
from .gdp import gdp_epsilon_lower_bound  # noqa: F401
from .one_run import epsilon_lower_bound  # noqa: F401
from .pooled import design_look  # noqa: F401  (a development look at the pooled rule)
from .run import replica_primary  # noqa: F401
from .schema import clip_guesses  # noqa: F401
from .study import FIELDS, POOLED_FIELDS, pooled_row, pooled_summary, study_rows, summarise  # noqa: F401
