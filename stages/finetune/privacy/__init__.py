"""The DP engine of the fine-tune: everything between a chunk's per-example losses and the noisy clipped step.

* ``engine.py``: ``make_private`` (sigma from the accountant, the model wrapped by the clipping strategy, opacus'
  optimizer with the seeded or secure noise generator, the accountant's hook), ``dp_step`` (one logical step over
  its chunks, noise once) and the run's privacy record;
* ``strategies.py``: the clipping strategies (``finetune.dp.grad_sample_mode``: hooks, ghost, bk), a registry;
* ``ghost.py``: ghost clipping's norm pass and second pass; ``bookkeeping.py``: book-keeping's ledger, the
  clipped sum from the norm pass's records;
* ``layer.py`` and ``layers/``: what the engine knows of each layer type (its per-example gradient, its
  per-example gradient norm, its book-keeping clipped sum), one module per type, registered once.

Nothing here is imported by this file: import the module you need.
"""
