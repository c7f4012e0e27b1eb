"""Empirical privacy variance: the sweep table's schema, the analysis stage and the selection procedure
(``stages.variance.select.select_configuration``, Alg. 1 of empirical-privacy-variance)."""
