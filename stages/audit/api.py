"""The audit stage's public surface for the flows and downstream stages: the one-run bounds and their ideal for the
variance study's pooled tests and power (stages/variance/study.py), and the pooled rule's development look with
the replica scores it reads (flows/design_look.py), and the seed ledger that flows/pooled_audit.py appends to.
A flow or a downstream stage imports a stage through this module, ``schema`` or ``params``, never an internal
module. The tools beside the pipeline (the sweep tables and the design study: stages/studies/; the DP engine
self-check's judge: stages/selfcheck/) import the audit's internals themselves, so no stage's deps hold them."""
from .ceiling import ideal_counts, trial_bounds  # noqa: F401  (the last-iterate ideal's one-run audits)
from .gdp import gdp_epsilon_lower_bound  # noqa: F401
from .ledger import Ledger, LedgerEntry, design_key, design_of, read_ledger, write_ledger  # noqa: F401  (seed ledger)
from .one_run import epsilon_lower_bound  # noqa: F401
from .pooled import design_look  # noqa: F401  (a development look at the pooled rule)
from .run import replica_primary  # noqa: F401
from .schema import clip_guesses  # noqa: F401
from .user_level import user_test_name  # noqa: F401  (the ledger's name of a run's user-level test)
