"""Stage ``report``: reports/report.md, a self-contained reports/index.html with plots, and
reports/lineage.json (every number -> the stage, input md5s, params and git commit that produced it).
One module per section in ``sections/``, listed in report order by ``build.py``; what they read in ``inputs.py``;
rendering in ``render.py``; plots in ``plots.py``."""
