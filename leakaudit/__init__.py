"""The ``leakaudit`` command line (``leakaudit.cli:main``): subcommands that start the Prefect flows (``flows/``), run
DVC, or call the stages' tools; nothing here computes. The arrow goes one way: this package imports the flows and the
stages, the flows never import it.

Importing a module here changes no process state; an entry point applies the offline Prefect settings
(``stages.shared.core.prefect_env``) before Prefect is imported.
"""
