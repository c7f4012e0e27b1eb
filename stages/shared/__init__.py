"""The shared libraries the stages import: ``core`` (params, I/O, errors, seeds, lineage), ``lm`` (loading and
scoring language models), ``datasets`` (the dataset readers and specs) and ``bounds`` (the one-run audit's bounds).
No DVC stage runs one on its own; each imports only ``core`` and itself (``core`` nothing)."""
