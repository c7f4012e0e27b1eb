"""Datasets, one spec per module (params, raw reader, splits, processed schema, GX contract, training pairs,
secrets source) behind the dataset registry. Shared by the stages that read processed data."""
from . import enron, enron_users, personachat, text, tofu  # noqa: F401  (each module registers its spec)
from .spec import (  # noqa: F401
    CANDIDATES,
    DATASETS,
    NO_SECRETS,
    STATS,
    DatasetSpec,
    Processed,
    dataset_names,
    get_dataset,
    read_split,
    sample,
    secrets_of,
    split_path,
)
