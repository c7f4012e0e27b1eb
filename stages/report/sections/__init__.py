"""The report's sections, one module each; stages/report/build.py lists them in report order."""
