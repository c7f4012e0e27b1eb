"""What the flows run on, not flows themselves: the Prefect API server they talk to (``api_server``), DVC stages as
Prefect tasks (``dvc_adapter``), DVC experiments and their git-tracked tables (``experiments``), and the stages' code
deps as dvc.yaml lists them (``deps``: ``python -m flows.runtime.deps --write`` / ``--lock``)."""
