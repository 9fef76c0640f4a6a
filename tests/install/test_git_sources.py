"""Git sources at exact commits with ordered patches, against real local repositories."""
from __future__ import annotations

import pytest

from envbuild.errors import EnvbuildError, InputFileError
from envbuild.install.git_sources import PatchDoesNotApply, fetch_source, mirror_source
from envbuild.profile.recipe import GitSource
from fixturegen.gitrepos import git, make_patched_repo


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    return make_patched_repo(tmp_path_factory.mktemp("git"))


def _src(up, commit=None, patches=None, url=None):
    return GitSource(name="lib", url=url or str(up.path), commit=commit or up.commits[0],
                     patches=list(up.good if patches is None else patches))


def test_checkout_at_commit_with_patches_in_order(upstream, tmp_path):
    dest = fetch_source(_src(upstream), tmp_path / "lib", upstream.patch_dir)
    assert git(dest, "rev-parse", "HEAD") == upstream.commits[0]
    assert (dest / "pkg" / "core.py").read_text() == "def answer():\n    return 42\n"
    assert (dest / "pkg" / "extra.py").read_text() == "EXTRA = 2\n"  # patch 2 edits what patch 1 added


def test_rerun_is_a_noop_and_resumes_between_patches(upstream, tmp_path):
    dest = fetch_source(_src(upstream), tmp_path / "lib", upstream.patch_dir)
    core = dest / "pkg" / "core.py"
    stamp = core.stat().st_mtime_ns
    fetch_source(_src(upstream), dest, upstream.patch_dir)
    assert core.stat().st_mtime_ns == stamp
    # as if a run was killed after the first patch: the rerun applies only the second
    git(dest, "checkout", "--quiet", "--", ".")
    (dest / "pkg" / "extra.py").unlink()
    git(dest, "apply", str(upstream.patch_dir / upstream.good[0]))
    fetch_source(_src(upstream), dest, upstream.patch_dir)
    assert (dest / "pkg" / "extra.py").read_text() == "EXTRA = 2\n"


def test_patch_that_does_not_apply_names_patch_and_file_and_touches_nothing(upstream, tmp_path):
    dest = fetch_source(_src(upstream), tmp_path / "lib", upstream.patch_dir)
    with pytest.raises(PatchDoesNotApply) as err:
        fetch_source(_src(upstream, patches=upstream.good + [upstream.bad]), dest, upstream.patch_dir)
    msg = str(err.value)
    assert upstream.bad in msg and "pkg/core.py" in msg and upstream.commits[0][:12] in msg
    assert (dest / "pkg" / "core.py").read_text().endswith("return 42\n")


def test_fresh_checkout_with_bad_patch_fails_before_checkout(upstream, tmp_path):
    with pytest.raises(PatchDoesNotApply):
        fetch_source(_src(upstream, patches=[upstream.bad]), tmp_path / "lib", upstream.patch_dir)
    assert not (tmp_path / "lib" / "pkg").exists()


def test_local_edits_are_never_overwritten(upstream, tmp_path):
    dest = fetch_source(_src(upstream), tmp_path / "lib", upstream.patch_dir)
    (dest / "pkg" / "core.py").write_text("my work\n")
    with pytest.raises(EnvbuildError) as err:
        fetch_source(_src(upstream), dest, upstream.patch_dir)
    assert "pkg/core.py" in str(err.value)
    assert (dest / "pkg" / "core.py").read_text() == "my work\n"


def test_moves_to_a_new_commit(upstream, tmp_path):
    dest = fetch_source(_src(upstream, commit=upstream.commits[1], patches=[]), tmp_path / "lib", upstream.patch_dir)
    assert (dest / "README").read_text() == "upstream, second commit\n"
    fetch_source(_src(upstream), dest, upstream.patch_dir)
    assert git(dest, "rev-parse", "HEAD") == upstream.commits[0]
    assert (dest / "README").read_text() == "upstream\n"


def test_missing_patch_file_is_named(upstream, tmp_path):
    with pytest.raises(InputFileError) as err:
        fetch_source(_src(upstream, patches=["patches/none.patch"]), tmp_path / "lib", upstream.patch_dir)
    assert "patches/none.patch" in str(err.value)


def test_mirror_serves_a_branchless_commit_without_the_upstream(upstream, tmp_path):
    src = _src(upstream, commit=upstream.orphan, patches=[])
    first = fetch_source(src, tmp_path / "first", upstream.patch_dir)
    mirror = mirror_source(src, tmp_path / "mirrors", checkout=first)
    assert mirror == tmp_path / "mirrors" / "lib.git"
    gone = _src(upstream, commit=upstream.orphan, patches=[], url=str(tmp_path / "no-such-upstream"))
    dest = fetch_source(gone, tmp_path / "second", upstream.patch_dir, mirror_root=tmp_path / "mirrors")
    assert git(dest, "rev-parse", "HEAD") == upstream.orphan
    assert (dest / "side.txt").is_file()


def test_relative_destination(upstream, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dest = fetch_source(_src(upstream, patches=[]), "rel/lib", upstream.patch_dir)
    assert dest == tmp_path / "rel" / "lib" and (dest / "pkg" / "core.py").is_file()
