"""What the tests and the benchmarks share (installed with the project: ``pyproject.toml`` finds it under tests/):
``project`` (the project's params, copies of it, running commands in it), ``models`` (tiny random LMs and one DP
step), ``data`` (labelled synthetic datasets), ``studies`` (a synthetic variance-study table), ``mutants`` (broken
DP engines, never the product) and ``sharding_trials`` (the sharded engine's trials, run by torchrun)."""
