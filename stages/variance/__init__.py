"""Empirical privacy variance: the sweep's grid and its table rows (``grid.py``, ``table.py``; the flow reaches them
through ``api.py``), the sweep table's schema, the analysis stage and the selection procedure
(``stages.variance.select.select_configuration``, Alg. 1 of empirical-privacy-variance)."""
