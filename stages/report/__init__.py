"""Stage ``report``: reports/report.md, a self-contained reports/index.html with plots, and
reports/lineage.json (every number -> the stage, input md5s, params and git commit that produced it).
One function per section in ``build.py``; rendering in ``render.py``; plots in ``plots.py``."""
