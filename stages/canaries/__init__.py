"""Stage ``canaries``: m canaries per kind (each a member with probability 1/2, seeded), secret-sharer
formatted canaries and canary users -> data/canaries/ (schema in ``schema.py``, GX-checked)."""
