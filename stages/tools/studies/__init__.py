"""The flows' studies over several experiments, beside the pipeline: the audit design study's rows
(``study.py``: flows/audit_study.py, flows/pooled_audit.py) and the tables comparing the metrics of several
experiments (``compare.py``: the sweep flow). Not a DVC stage (no ``__main__``): no stage's deps hold it, so
editing it invalidates nothing. It may import any stage module (the audit's bounds); no stage imports it."""
