"""Shared by every stage: params loading and validation, the stage CLI, errors, atomic I/O, the registry,
artifact locations, GX checks and lineage. Small and stable: a change here reruns every stage."""
