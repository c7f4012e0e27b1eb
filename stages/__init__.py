"""leakaudit: one package per DVC stage (``python -m stages.<stage>``) over shared code.

``core`` (params, CLI, errors, atomic I/O, registry, lineage, GX checks, artifact locations), ``lm``
(model loading, the canary LM wrapper, examples, batching, scoring, generation) and ``datasets`` (one
spec per dataset) are shared; ``base_model``, ``preprocess``, ``secrets``, ``canaries``, ``finetune``,
``attack``, ``audit``, ``variance`` and ``report`` are the stages. ``selfcheck`` (the DP engine's self-check),
``handoff`` (export for training elsewhere, release) and ``studies`` (the design study, sweep tables) are tools
that no stage imports, so editing them reruns no stage. Importing any module changes no process state.
"""

__version__ = "0.1.0"
