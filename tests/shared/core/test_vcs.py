"""The one git/dvc subprocess helper (stages/shared/core/vcs.py): stdout back, one error naming the command and the
tail of
what it wrote, the commit checked out and whether paths differ from it."""
import subprocess

import pytest

from stages.shared.core.vcs import VcsError, dvc, git, git_dirty, head


def _repo(path):
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    (path / "a.txt").write_text("one\n")
    (path / "b.txt").write_text("one\n")
    git(path, "add", "a.txt", "b.txt")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return path


def test_git_returns_stdout_and_head_is_the_checked_out_commit(tmp_path):
    repo = _repo(tmp_path / "repo")
    assert head(repo) == git(repo, "rev-parse", "HEAD").strip() and len(head(repo)) == 40
    assert git(repo, "show", "HEAD:a.txt") == "one\n"
    ident = git(repo, "var", "GIT_AUTHOR_IDENT", env={"GIT_AUTHOR_NAME": "sweep", "GIT_AUTHOR_EMAIL": "s@x.invalid"})
    assert ident.startswith("sweep <s@x.invalid> ")  # env: set over this process's environment


def test_git_dirty_names_only_the_paths_asked_about(tmp_path):
    repo = _repo(tmp_path / "repo")
    assert not git_dirty(repo) and not git_dirty(repo, "a.txt")
    (repo / "b.txt").write_text("two\n")
    assert git_dirty(repo) and git_dirty(repo, "b.txt") and not git_dirty(repo, "a.txt")
    assert git_dirty(repo, "a.txt", "b.txt")


def test_a_failed_command_is_one_error_with_the_command_and_its_last_lines(tmp_path):
    repo = _repo(tmp_path / "repo")
    with pytest.raises(VcsError) as err:
        git(repo, "show", "HEAD:missing.txt")
    assert err.value.returncode != 0 and err.value.cmd == ["git", "show", "HEAD:missing.txt"]
    assert str(err.value).startswith("git show HEAD:missing.txt failed (exit ") and "missing.txt" in err.value.tail[-1]
    with pytest.raises(VcsError, match=r"^git diff --quiet HEAD -- a.txt failed"):
        git_dirty(tmp_path, "a.txt")  # not a git checkout: an error, not "dirty"
    with pytest.raises(VcsError, match=r"^dvc status failed \(exit \d+\): .+"):
        dvc(repo, "status")  # not a DVC repository


def test_a_long_command_is_shortened_in_the_message():
    err = VcsError(["dvc", "exp", "run", *[f"-S key{i}=value" for i in range(20)]], 1, "a\n\nb\nc\nd\n")
    assert str(err) == "dvc exp run ... failed (exit 1): b | c | d"
