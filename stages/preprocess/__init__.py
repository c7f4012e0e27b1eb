"""Stage ``preprocess@<dataset>``: raw data -> data/processed/<dataset>/ (splits, per-step counts, extra
tables), checked against the dataset's Arrow schema and GX contract. The readers, filters and contracts
are the dataset specs in ``stages.shared.datasets``."""
