"""Provenance, damaged points, the run lock, dirty and mixed refusals, and the re-check rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from attnbook import cli, provenance
from attnbook import experiments as E
from attnbook.experiments import recheck, registry_index, store, verify

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    """This checkout's attnbook first, the rest of the path kept."""
    path = os.pathsep.join(
        filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
    )
    return {**os.environ, "PYTHONPATH": path}


CLEAN = {"commit": "a" * 40, "dirty": False, "diff_sha256": None}


@dataclass(frozen=True)
class _TinyConfig:
    x: int = 1
    device: str = "cpu"
    dtype: str = "float64"


def _tiny(cfg: _TinyConfig) -> dict:
    """Cheap, deterministic, through NumPy's BLAS (a matrix product) like the real sweeps."""
    rng = np.random.default_rng(cfg.x)
    a = rng.normal(size=(6, 6))
    return {
        "y": (a @ a.T)[0] * cfg.x,
        "n": np.arange(4) * cfg.x,
        "ens": rng.normal(size=(3, 8)) + cfg.x,
    }


TINY = "test-tiny"
if TINY not in E._REGISTRY:
    E.register(
        E.Experiment(
            name=TINY,
            part="-",
            description="a tiny sweep for the store and verify tests",
            function=_tiny,
            config=_TinyConfig,
            dims={"y": ("k",), "n": ("k4",), "ens": ("time", "model")},
            scales={"smoke": E.Scale(axes={"x": (1, 2, 3)})},
            recheck=recheck.Recheck(
                {
                    "y": recheck.tolerance(1e-12, reason="round-off of a 6×6 product"),
                    "n": recheck.exact(reason="integers fixed by the config"),
                    "ens": recheck.ensemble_mean(
                        "model", 3.0, reason="8 draws: the mean within 3 SE"
                    ),
                }
            ),
        )
    )


@pytest.fixture(scope="module")
def cluster():
    """Threads in this process: they share the registry (and monkeypatches) with the test."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as c:
        yield c.scheduler_address


@pytest.fixture
def clean(monkeypatch):
    """A clean tree at commit aaaa… whatever the checkout's state."""
    state = dict(CLEAN)
    monkeypatch.setattr(provenance, "git_state", lambda path=None: dict(state))
    return state


def _run(out, cluster, **kw):
    return E.run(TINY, "smoke", out, scheduler=cluster, progress=False, **kw)


def _rewrite_npz(directory: Path, h: str, arrays: dict, *, fix_sha: bool) -> None:
    npz = directory / "points" / f"{h}.npz"
    with open(npz, "wb") as f:
        np.savez(f, **arrays)
    if (
        fix_sha
    ):  # a consistent point with other numbers (not damage: what verify must catch)
        meta_path = directory / "points" / f"{h}.json"
        meta = json.loads(meta_path.read_text())
        meta["npz_sha256"] = store.file_sha256(npz)
        meta_path.write_text(json.dumps(meta))


# ---- provenance ------------------------------------------------------------------------------
def test_numeric_signature_and_its_key(monkeypatch):
    sig = provenance.numeric_signature()
    assert sig["cpu"]["model"] and sig["torch"]["cpu_capability"]
    assert sig["versions"]["numpy"] == np.__version__
    assert {"MKL_CBWR", "OPENBLAS_CORETYPE", "OMP_NUM_THREADS"} <= set(sig["env"])
    assert any(b["library"] == "numpy" for b in sig["blas"])
    assert sig["key"] == provenance.signature_key(sig) and len(sig["key"]) == 16
    json.dumps(sig)  # plain JSON
    # not keyed: the code's commit, a thread variable whose effect (the count) is keyed
    other = json.loads(json.dumps(sig))
    other |= {"git_commit": "b" * 40, "dirty": True}
    other["env"]["OMP_NUM_THREADS"] = "7"
    assert provenance.signature_key(other) == sig["key"]
    # keyed: a variable that chooses another kernel, the threads in use, the CPU
    for change in (
        lambda s: s["env"].__setitem__("MKL_CBWR", "COMPATIBLE"),
        lambda s: s["torch"].__setitem__("threads", s["torch"]["threads"] + 1),
        lambda s: s["cpu"].__setitem__("model", "Intel(R) Xeon(R)"),
        # another BLAS kernel than the one in use (OPENBLAS_CORETYPE may pin Haswell here)
        lambda s: s["blas"][0].__setitem__(
            "architecture", f"not-{s['blas'][0].get('architecture')}"
        ),
    ):
        s = json.loads(json.dumps(sig))
        change(s)
        assert provenance.signature_key(s) != sig["key"]
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    assert provenance.numeric_signature(git=False)["key"] != sig["key"]
    with pytest.raises(TypeError, match="sig"):
        provenance.signature_key("abc")


def test_git_state_of_a_temporary_repository(tmp_path):
    def git(*args):
        subprocess.run(
            ["git", "-C", str(tmp_path), *args], check=True, capture_output=True
        )

    assert provenance.git_state(tmp_path) == {
        "commit": None,
        "dirty": None,
        "diff_sha256": None,
    }
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    (tmp_path / "results" / "x").mkdir(parents=True)
    (tmp_path / "results" / "x" / "manifest.json").write_text("{}\n")
    git("add", "results")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    st = provenance.git_state(tmp_path)
    assert len(st["commit"]) == 40 and st["dirty"] is False
    # remaking an archive deletes its tracked files: results are outputs, not code
    (tmp_path / "results" / "x" / "manifest.json").unlink()
    assert provenance.git_state(tmp_path)["dirty"] is False
    (tmp_path / "new.py").write_text("untracked\n")  # untracked files are not imported
    assert provenance.git_state(tmp_path)["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    one = provenance.git_state(tmp_path)
    assert one["dirty"] is True and one["commit"] == st["commit"] and one["diff_sha256"]
    assert provenance.git_commit(tmp_path) == st["commit"] + "+dirty"
    (tmp_path / "a.py").write_text("x = 3\n")
    assert provenance.git_state(tmp_path)["diff_sha256"] != one["diff_sha256"]


def test_the_ledger_records_the_signature(tmp_path):
    from attnbook.claims import Ledger

    led = Ledger("foundations/attention-maps", title="AM", directory=tmp_path, seed=0)
    led.check("a.x", "x", 1.0, expected=1.0, kind="identity", source="derived")
    rec = json.loads((tmp_path / "foundations__attention-maps.json").read_text())
    sig = rec["numeric_signature"]
    assert sig["key"] == provenance.signature_key(sig) and "git_commit" in sig


# ---- damaged points --------------------------------------------------------------------------
def _made(tmp_path, cluster) -> tuple[Path, list[dict]]:
    out = tmp_path / "tiny"
    rep = _run(out, cluster, allow_dirty=True)
    assert rep.ok and rep.computed == 3
    return out, store.read_manifest(out)["points"]


def test_damaged_points_are_told_apart_from_pending_ones(tmp_path, cluster, capsys):
    out, pts = _made(tmp_path, cluster)
    npz0 = out / "points" / f"{pts[0]['hash']}.npz"
    npz0.write_bytes(npz0.read_bytes()[:100])  # truncated
    (out / "points" / f"{pts[1]['hash']}.json").write_text('{"config": ')  # corrupt
    (out / "points" / f"{pts[2]['hash']}.json").unlink()  # pending: its .npz alone
    st = E.status(out)
    assert (st["done"], st["pending"], len(st["damaged"])) == (0, 1, 2)
    reasons = {tuple(d["index"]): d["reason"] for d in st["damaged"]}
    assert "SHA-256" in reasons[(0,)] and "not readable JSON" in reasons[(1,)]

    assert cli.main(["status", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "2 damaged" in printed and "damaged {'x': 1}" in printed
    assert cli.main(["status", str(out), "--json"]) == 1
    assert len(json.loads(capsys.readouterr().out)["damaged"]) == 2

    with pytest.raises(E.DamagedPoints, match="2 finished point") as exc:
        E.load(out)
    assert {tuple(p["index"]) for p in exc.value.points} == {(0,), (1,)}
    with pytest.warns(UserWarning, match="damaged"):
        ds = E.load(out, damaged="warn")
    assert ds.attrs["n_done"] == 0 and ds.attrs["n_damaged"] == 2
    with pytest.raises(ValueError, match="damaged must be"):
        E.load(out, damaged="ignore")

    # a run recomputes them, and says so
    rep = _run(out, cluster, allow_dirty=True)
    assert rep.computed == 3 and {tuple(d["index"]) for d in rep.damaged} == {
        (0,),
        (1,),
    }
    assert E.status(out)["damaged"] == [] and E.load(out).attrs["n_done"] == 3


def test_a_missing_npz_is_damage_and_load_gives_integer_coordinates(tmp_path, cluster):
    out, pts = _made(tmp_path, cluster)
    ds = E.load(out)
    assert list(ds["model"].values) == list(range(8))
    assert list(ds["ens"].sel(x=2, model=3).dims) == ["time"]
    (out / "points" / f"{pts[2]['hash']}.npz").unlink()
    assert E.status(out)["damaged"][0]["reason"].endswith("is missing")


# ---- the lock ----------------------------------------------------------------------------------
def test_a_second_run_on_one_directory_fails_at_once_naming_the_holder(
    tmp_path, capsys
):
    out = tmp_path / "locked"
    out.mkdir()
    code = (
        "import sys, time; from attnbook.experiments.store import run_lock\n"
        "with run_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(out)],
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(E.RunLocked, match=f"pid {holder.pid}"):
            with store.run_lock(out):
                pass
        t0 = time.perf_counter()
        argv = ["run", TINY, "--scale", "smoke", "--out", str(out), "--allow-dirty"]
        assert cli.main(argv) == 2
        assert time.perf_counter() - t0 < 10  # at once: no waiting, no cluster
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "another run" in err
    finally:
        holder.kill()  # SIGKILL: the kernel releases the lock with the process
        holder.wait(timeout=30)
    with store.run_lock(out) as info:  # free again
        assert info["pid"] == os.getpid()
        assert json.loads((out / store.LOCK).read_text())["pid"] == os.getpid()
    assert not (out / store.LOCK).exists()


# ---- dirty and mixed refusals ---------------------------------------------------------------
def test_a_dirty_tree_is_refused_unless_allowed(tmp_path, cluster, clean, capsys):
    clean.update(dirty=True, diff_sha256="d" * 64)
    out = tmp_path / "dirty"
    with pytest.raises(E.DirtyTree, match="--allow-dirty"):
        _run(out, cluster)
    assert not out.exists()  # refused before anything was written
    assert cli.main(["run", TINY, "--scale", "smoke", "--out", str(out)]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    rep = _run(out, cluster, allow_dirty=True)
    assert rep.computed == 3
    man = store.read_manifest(out)
    assert man["allow_dirty"] is True and man["provenance"]["dirty"] is True
    assert man["provenance"]["git_commit"] == "a" * 40 + "+dirty"
    meta = store.read_point_meta(out, man["points"][0]["hash"])
    assert meta["allow_dirty"] is True and meta["diff_sha256"] == "d" * 64


def test_resuming_at_another_commit_is_refused_unless_allowed(
    tmp_path, cluster, clean, capsys
):
    out = tmp_path / "mixed"
    _run(out, cluster)
    pts = store.read_manifest(out)["points"]
    (out / "points" / f"{pts[2]['hash']}.json").unlink()  # one point left to do
    again = _run(out, cluster)  # the same commit: resumes
    assert again.computed == 1
    (out / "points" / f"{pts[2]['hash']}.json").unlink()
    clean["commit"] = "b" * 40
    with pytest.raises(E.MixedCommits, match="a{40}") as exc:
        _run(out, cluster)
    assert "--allow-mixed" in str(exc.value) and "b" * 40 in str(exc.value)
    assert cli.main(["run", TINY, "--scale", "smoke", "--out", str(out)]) == 2
    assert "mix the results" in capsys.readouterr().err
    rep = _run(out, cluster, allow_mixed=True)
    assert rep.computed == 1
    meta = store.read_point_meta(out, pts[2]["hash"])
    assert meta["allow_mixed"] is True and meta["mixed_with"] == ["a" * 40]
    assert meta["git_commit"] == "b" * 40
    # the same commit with other uncommitted changes is another source too
    clean.update(commit="a" * 40, dirty=True, diff_sha256="1" * 64)
    for p in pts:
        meta_path = out / "points" / f"{p['hash']}.json"
        meta = json.loads(meta_path.read_text())
        meta |= {"git_commit": "a" * 40 + "+dirty", "diff_sha256": "2" * 64}
        meta_path.write_text(json.dumps(meta))
    (out / "points" / f"{pts[0]['hash']}.json").unlink()
    with pytest.raises(E.MixedCommits, match=r"\+dirty:222222222222"):
        _run(out, cluster, allow_dirty=True)


# ---- re-check rules ---------------------------------------------------------------------------
def test_rules_compare_as_stated():
    rng = np.random.default_rng(0)
    want = rng.normal(size=(50, 8))
    tol = recheck.tolerance(1e-6, 1e-9, reason="a stated tolerance")
    assert recheck.compare(tol, want * (1 + 5e-7), want).ok
    c = recheck.compare(tol, want * (1 + 5e-6), want)
    assert not c.ok and 4 < c.worst < 6 and "outside the tolerance" in c.detail
    nan = want.copy()
    nan[0, 0] = np.nan
    assert not recheck.compare(tol, nan, want).ok  # NaN where the archive has a number
    assert recheck.compare(tol, nan, nan).ok
    inf = want.copy()
    inf[1, 1] = np.inf
    assert "NaN/inf" in recheck.compare(tol, want, inf).detail
    ex = recheck.exact(reason="integers fixed by the config")
    assert recheck.compare(ex, np.arange(4), np.arange(4)).ok
    assert not recheck.compare(ex, np.arange(4) + (np.arange(4) == 2), np.arange(4)).ok
    assert "shape" in recheck.compare(ex, np.arange(3), np.arange(4)).detail
    # the ensemble mean: a shift of a fraction of a standard error passes, 10 SE fails
    ens = recheck.ensemble_mean("model", 3.0, reason="8 models: mean within 3 SE")
    se = want.std(1, ddof=1) * np.sqrt(2 / 8)
    other = rng.permutation(want.T).T  # the same models in another order: same mean
    assert recheck.compare(ens, other, want, ("time", "model")).ok
    shifted = want + 0.5 * se[:, None]
    assert recheck.compare(ens, shifted, want, ("time", "model")).ok
    far = want + 10 * se[:, None]
    assert not recheck.compare(ens, far, want, ("time", "model")).ok
    assert not recheck.compare(ens, want, want, ("time", "seed")).ok  # no such dim
    # text (a sweep's claim ids) is equal or not, under any rule
    ids = np.array(["gauss.a", "gauss.b"])
    for rule in (ex, tol):
        assert recheck.compare(rule, ids.copy(), ids).ok
        other = recheck.compare(rule, np.array(["gauss.a", "gauss.c"]), ids)
        assert not other.ok and "1 of 2 entries differ" in other.detail
    bw = recheck.compare_bitwise(want + 0.0, want)
    assert bw.ok and not recheck.compare_bitwise(np.nextafter(want, 2), want).ok
    with pytest.raises(ValueError, match="reason"):
        recheck.tolerance(1e-9, reason="")
    with pytest.raises(ValueError, match="rtol"):
        recheck.tolerance(-1.0, reason="negative")
    spec = E.get(TINY).recheck
    assert recheck.Recheck.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_censored_event_times_compare_by_how_far_the_event_moved():
    rng = np.random.default_rng(5)
    t = np.linspace(0.0, 36.0, 401)  # the run's record times: it ends at 36
    want = rng.uniform(20.0, 30.0, size=(8, 3))  # (model, stage) event times
    want[[3, 5], 2] = np.nan  # models 3 and 5 end before their last stage
    late = want.copy()
    late[[3, 5], 2] = 35.2, 35.9  # elsewhere it comes just before the end
    early = want.copy()
    early[:, 2] = rng.uniform(1.0, 3.0, size=8)  # all far earlier: not round-off
    plain = recheck.ensemble_mean("model", 3.0, reason="8 models")
    cens = recheck.ensemble_mean("model", 3.0, censor="t", reason="8 models, censored")
    dims = ("model", "stage")
    assert "NaN/inf" in recheck.compare(plain, late, want, dims).detail
    kw = dict(times_got=t, times_want=t)
    assert recheck.compare(cens, late, want, dims, **kw).ok
    assert not recheck.compare(cens, early, want, dims, **kw).ok
    assert "censor" in recheck.compare(cens, late, want, dims).detail  # no times given
    assert "end of t" in cens.describe()
    assert recheck.Rule.from_json(cens.to_json()) == cens
    with pytest.raises(ValueError, match="censor"):
        recheck.Rule("tolerance", "why", censor="t")
    with pytest.raises(ValueError, match="censor"):
        recheck.Recheck({"x": cens})  # names an output the spec does not have


def test_verify_bitwise_on_the_same_signature_tolerances_elsewhere(
    tmp_path, cluster, capsys
):
    out, pts = _made(tmp_path, cluster)
    man = store.read_manifest(out)
    assert man["recheck"] == E.get(TINY).recheck.to_json()  # the spec travels with it
    h = pts[1]["hash"]
    check = verify.verify_point(out, h)
    assert check.mode == "bitwise" and check.ok, check.lines()
    assert [o.rule for o in check.outputs] == ["bitwise"] * 3
    assert cli.main(["experiments", "verify", str(out), "--all"]) == 0
    assert capsys.readouterr().out.count("bitwise equal") == 9

    # one ulp off: the same signature demands the same bits
    arrays = store.read_point(out, h)
    arrays["y"] = np.nextafter(arrays["y"], np.inf)
    _rewrite_npz(out, h, arrays, fix_sha=True)
    check = verify.verify_point(out, h)
    assert check.mode == "bitwise" and not check.ok
    assert [o.name for o in check.outputs if not o.ok] == ["y"]
    assert cli.main(["experiments", "verify", str(out), "--all"]) == 1
    assert "bits differ" in capsys.readouterr().out

    # another signature (another machine): the stated tolerance, which one ulp meets
    meta_path = out / "points" / f"{h}.json"
    meta = json.loads(meta_path.read_text())
    meta["signature_key"] = "0" * 16
    meta_path.write_text(json.dumps(meta))
    check = verify.verify_point(out, h)
    assert check.mode == "tolerance" and check.ok, check.lines()
    rules = {o.name: o.rule for o in check.outputs}
    assert rules == {
        "y": "rtol 1e-12",
        "n": "exact",
        "ens": "mean over model within 3 SE",
    }
    # ... and which a real change does not meet
    arrays["y"] = arrays["y"] * (1 + 1e-9)
    arrays["n"] = arrays["n"] + 1
    _rewrite_npz(out, h, arrays, fix_sha=True)
    check = verify.verify_point(out, h)
    assert {o.name for o in check.outputs if not o.ok} == {"y", "n"}
    assert any("DISAGREES" in line for line in check.lines())


@pytest.mark.slow
def test_an_emulated_path_takes_the_tolerance_path():
    """MKL_CBWR in a fresh process: another signature key, so the stated tolerances rule."""
    archive = ROOT / "results" / "pde-fates"
    softmax_negdef_d2 = [0, 1, 0]  # a point of a fraction of a second
    here = verify.verify_point(archive, softmax_negdef_d2)
    there = verify.verify_point(
        archive, softmax_negdef_d2, env={"MKL_CBWR": "COMPATIBLE"}
    )
    assert there.mode == "tolerance" and there.current_key != here.current_key
    assert there.ok, there.lines()


@pytest.mark.slow
def test_a_ledger_seeds_point_rechecks_on_another_numeric_path():
    """A ledger-seeds point (claim ids, cell positions: text and integers) re-checked where the
    signature differs from the archived one, as on a CPU of another make: the tolerance path
    compares its text outputs as text (it raised on them before)."""
    archive = ROOT / "results" / "ledger-seeds"
    point = verify.quick_points(archive)[0]
    there = verify.verify_point(archive, point["hash"], env={"MKL_CBWR": "COMPATIBLE"})
    assert there.mode == "tolerance", there.lines()
    assert there.ok, there.lines()
    assert {o.name: o.rule for o in there.outputs}["claim"] == "exact"


def test_without_a_spec_in_the_manifest_the_registry_rules(tmp_path, cluster):
    out, pts = _made(tmp_path, cluster)
    man = json.loads((out / store.MANIFEST).read_text())
    del man["recheck"]  # as the archives made before specs were recorded
    (out / store.MANIFEST).write_text(json.dumps(man))
    meta_path = out / "points" / f"{pts[0]['hash']}.json"
    meta = json.loads(meta_path.read_text())
    del meta["signature_key"]  # nor signatures
    meta_path.write_text(json.dumps(meta))
    check = verify.verify_point(out, [0])
    assert (check.mode, check.spec_source, check.ok) == ("tolerance", "registry", True)


def test_the_chosen_point_follows_the_commit(tmp_path, cluster):
    out, pts = _made(tmp_path, cluster)
    quick = verify.quick_points(out)
    assert quick  # the tiny points are all quick
    picks = {
        verify.choose_point(out, commit=f"{k:08x}" + "0" * 32)[0]["hash"]
        for k in range(len(quick))
    }
    assert picks == {p["hash"] for p in quick}  # successive commits cover every one
    p, k, n = verify.choose_point(out, commit="0000000a" + "0" * 32)
    assert (k, n) == (10 % n, len(quick)) and p == quick[k]


# ---- the list command -------------------------------------------------------------------------
def test_the_registry_index_is_current():
    """Stale when the registry changed: run `python -m attnbook.experiments.registry_index`."""
    assert registry_index.read() == registry_index.build(), (
        "the registry changed: run `python -m attnbook.experiments.registry_index`"
    )


def test_listing_imports_no_part():
    code = (
        "import sys; from attnbook import cli; code = cli.main(['experiments']); "
        "heavy = [m for m in ('torch', 'scipy', 'xarray', 'distributed', "
        "'attnbook.experiments.focus') if m in sys.modules]; "
        "print('HEAVY', heavy); sys.exit(code)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "HEAVY []" in res.stdout and "pde-fates  (Part III)" in res.stdout


@pytest.mark.slow
def test_a_fresh_process_verifies_bitwise(tmp_path, cluster):
    """The command in a new process (SciPy's BLAS not yet loaded) has the worker's signature."""
    out = tmp_path / "fates"
    E.run(
        "pde-fates", "smoke", out, scheduler=cluster, progress=False, allow_dirty=True
    )
    res = subprocess.run(
        [sys.executable, "-m", "attnbook", "experiments", "verify", str(out)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=240,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "bitwise path" in res.stdout and "agrees" in res.stdout
