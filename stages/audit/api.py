"""The audit stage's public surface for the flows: the pooled rule's development look with the replica scores it
reads (flows/design_look.py), and the seed ledger that flows/pooled_audit.py appends to. A flow or a downstream stage
imports a stage through this module, ``schema`` or ``params``, never an internal module; the bounds themselves are
shared code (``stages.shared.bounds``)."""
from .ledger import Ledger, LedgerEntry, design_key, design_of, read_ledger, write_ledger  # noqa: F401  (seed ledger)
from .pooled import design_look  # noqa: F401  (a development look at the pooled rule)
from .run import replica_primary  # noqa: F401
from .user_level import user_test_name  # noqa: F401  (the ledger's name of a run's user-level test)
