"""Report rendering: plots (matplotlib PNG + dvc-plots JSON), report.md and a self-contained index.html."""
