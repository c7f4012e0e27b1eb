"""The base_model stage's public surface for the flows: where ``model.name_or_path`` resolves to (``leakaudit
doctor`` checks it without converting anything)."""
from .convert import Source, resolve  # noqa: F401
