"""Dataset readers (PersonaChat, TOFU, Enron) behind a registry, and their Arrow schemas."""
from .registry import DATASETS, Processed, get_dataset  # noqa: F401
from . import enron, enron_users, personachat, tofu  # noqa: F401,E402  (register the readers)
