"""Dataset readers (PersonaChat, TOFU, Enron) behind a registry, and their Arrow schemas."""
from .registry import DATASETS, get_dataset  # noqa: F401
from . import personachat, tofu, enron  # noqa: F401,E402  (register the readers)
