"""Base-model loading/conversion and the CanaryLM wrapper (extra trainable token rows)."""
