"""The tools beside the pipeline, which no DVC stage runs: ``selfcheck`` (the DP engine audits itself,
``leakaudit selfcheck``), ``handoff`` (a run's export and release) and ``studies`` (the research studies' designs and
rows over several experiments). A tool may import any stage module; no stage nor shared library imports a tool."""
