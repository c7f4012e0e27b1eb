"""Session fixtures: a tiny tokenizer, a tiny random Llama (and, on demand, GPT-2, Qwen2, GPT-NeoX) saved as a
model directory and converted by the real base_model code, and copies of the project whose params point at it:
a pristine template per session (and one reproduced once), a copy of either per test, so no test depends on
another or on their order. Everything is built in-process: no test downloads a model or data."""
from __future__ import annotations

from pathlib import Path

import pytest
from testkit.models import make_tiny_lm
from testkit.project import ROOT, Reproduced, clone_project, copy_project, run, tiny_params

from stages.shared.core.env import apply_offline_env

# what the stage CLIs set in their entry point (stages.shared.core.cli), for the library code the tests call directly
apply_offline_env()


def pytest_collection_modifyitems(config, items):
    """The fast tier by default: tests marked `slow` (the end-to-end tier) are deselected unless the command line
    gives -m (`-m slow`) or names a test (path::name), which then runs whatever its tier, files ordered by
    ``template_first``."""
    if config.option.markexpr or any("::" in arg for arg in config.args):
        template_first(items)
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def template_first(items) -> None:
    """Sort ``items`` (stably) by file: the first file that needs the reproduced tiny project (one marked ``longest``
    if any), then every file that does not, then the others. pytest-xdist's loadfile hands out files in this order, so
    one worker reproduces the project (minutes) and runs the longest test while the other runs what needs no project,
    instead of waiting on the build's lock or idling at the end while the longest test runs alone. Only with
    ``--no-loadscope-reorder`` (.ci/run, README): by default pytest-xdist reorders files by their number of tests."""
    def needs(item) -> bool:
        return bool({"reproduced_template", "reproduced_project"} & set(getattr(item, "fixturenames", ())))

    def file(item) -> str:
        return item.nodeid.split("::")[0]

    files = list(dict.fromkeys(file(item) for item in items))
    need = {file(item) for item in items if needs(item)}
    longest = {file(item) for item in items if item.get_closest_marker("longest")}
    dependent = sorted((f for f in files if f in need), key=lambda f: f not in longest)
    order = dependent[:1] + [f for f in files if f not in need] + dependent[1:]
    rank = {f: k for k, f in enumerate(order)}
    items.sort(key=lambda item: rank[file(item)])


def _corpus() -> list[str]:
    lines = (ROOT / "data/raw/personachat/valid_self_original_no_cands.txt").read_text().splitlines()[:400]
    tofu = (ROOT / "data/raw/tofu/full.json").read_text().splitlines()[:200]
    return lines + tofu


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(_corpus(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   bos_token="<|endoftext|>")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    """A tiny random Llama + tokenizer saved as a local HF model directory."""
    d = tmp_path_factory.mktemp("tiny_lm")
    make_tiny_lm(len(tiny_tokenizer)).save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory, tiny_model_dir) -> Path:
    """tiny_model_dir converted by the real base_model code path (data/models/base equivalent)."""
    from stages.base_model.convert import convert
    from stages.base_model.params import ModelParams

    out = tmp_path_factory.mktemp("base")
    convert(ModelParams(name_or_path=str(tiny_model_dir), revision=None, dtype="float32", out=str(out)), out)
    return out


@pytest.fixture(scope="session")
def tiny_template(tmp_path_factory, tiny_model_dir) -> Path:
    """A copy of the project whose params point at the tiny model, committed, not reproduced. Never changed:
    a test takes its own copy (``tiny_project``)."""
    import yaml

    dest = copy_project(tmp_path_factory.mktemp("tiny_template"))
    (dest / "params.yaml").write_text(yaml.safe_dump(tiny_params(tiny_model_dir), sort_keys=False))
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "tiny params"], dest)
    return dest


@pytest.fixture
def tiny_project(tiny_template, tmp_path) -> Path:
    """This test's own copy of ``tiny_template`` (tmp_path/project): not reproduced, free to change."""
    return clone_project(tiny_template, tmp_path / "project")


@pytest.fixture(scope="session")
def reproduced_template(tmp_path_factory, request) -> Reproduced:
    """``tiny_template`` after one whole `dvc repro`, once per pytest run (its stdout kept): with pytest-xdist
    workers (`-n 2`, CI's slow tier) the first worker to ask reproduces it under a file lock in the run's shared
    temporary folder and the others reuse it. Never changed afterwards: a test only reads it, or takes its own copy
    (``reproduced_project``)."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        template = request.getfixturevalue("tiny_template")
        dest = clone_project(template, tmp_path_factory.mktemp("reproduced") / "project")
        return Reproduced(dest, run(["dvc", "repro"], dest).stdout)
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent / "reproduced"
    with FileLock(f"{shared}.lock"):
        done = shared / "stdout.txt"
        if not done.is_file():
            dest = clone_project(request.getfixturevalue("tiny_template"), shared / "project")
            out = run(["dvc", "repro"], dest).stdout
            done.write_text(out)
        return Reproduced(shared / "project", done.read_text())


@pytest.fixture
def reproduced_project(reproduced_template, tmp_path) -> Path:
    """This test's own copy of the reproduced project (DVC cache and outputs included, so nothing reruns that
    the test does not change): tmp_path/project."""
    return clone_project(reproduced_template.path, tmp_path / "project")


@pytest.fixture(scope="session")
def tiny_model_dir_of(tmp_path_factory, tiny_tokenizer, tiny_model_dir):
    """arch -> a tiny random model of that architecture (testkit.models.make_tiny_lm) + the tiny tokenizer, saved once
    per session as a local HF model directory; "llama" is ``tiny_model_dir``."""
    made = {"llama": tiny_model_dir}

    def get(arch: str) -> Path:
        if arch not in made:
            d = tmp_path_factory.mktemp(f"tiny_lm_{arch}")
            make_tiny_lm(len(tiny_tokenizer), arch=arch).save_pretrained(d)
            tiny_tokenizer.save_pretrained(d)
            made[arch] = d
        return made[arch]
    return get


@pytest.fixture(scope="session")
def tiny_base_of(tmp_path_factory, tiny_model_dir_of, tiny_base):
    """arch -> ``tiny_model_dir_of(arch)`` converted by the real base_model code path, once per session;
    "llama" is ``tiny_base``."""
    from stages.base_model.convert import convert
    from stages.base_model.params import ModelParams

    made = {"llama": tiny_base}

    def get(arch: str) -> Path:
        if arch not in made:
            out = tmp_path_factory.mktemp(f"base_{arch}")
            convert(ModelParams(name_or_path=str(tiny_model_dir_of(arch)), revision=None, dtype="float32",
                                out=str(out)), out)
            made[arch] = out
        return made[arch]
    return get
