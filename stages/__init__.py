"""leakaudit: one package per DVC stage (``python -m stages.<stage>``) over shared code.

``core`` (params, CLI, errors, atomic I/O, registry, lineage, GX checks, artifact locations), ``lm``
(model loading, the canary LM wrapper, examples, batching, scoring, generation) and ``datasets`` (one
spec per dataset) are shared; ``base_model``, ``preprocess``, ``secrets``, ``canaries``, ``finetune``,
``attack``, ``audit`` and ``report`` are the stages. Importing any of them changes no process state.
"""

__version__ = "0.1.0"
