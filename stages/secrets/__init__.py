"""Stage ``secrets@<dataset>``: real secrets of a dataset's training split (recurring long strings and PII
in Enron, author -> genre in TOFU) -> data/secrets/<dataset>.parquet, each with whether the base model
already reproduces it. Values are never logged."""
