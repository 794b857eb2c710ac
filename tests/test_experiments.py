"""The experiment registry, the Dask runner, the results store, the CLI and the archives."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from attnbook import cli
from attnbook import experiments as E
from attnbook.experiments import store, verify
from attnbook.provenance import signature_key

ROOT = Path(__file__).resolve().parents[1]
PARTS = {
    "focus-zipf",
    "focus-delta",
    "copyhead-phase",
    "pde-meanfield-rate",
    "pde-fates",
}


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def _cli(*args, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnbook", *args],
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=240,
    )


# ---- registry ----------------------------------------------------------------------------------
def test_registry_has_every_part_at_every_scale():
    assert PARTS <= set(E.names())
    for name in PARTS:
        exp = E.get(name)
        assert set(exp.scales) == set(E.SCALES)
        pts = exp.points("smoke")
        assert len(pts) == exp.scale("smoke").n_points >= 2
        hashes = {E.config_hash(cfg) for _, cfg in pts}
        assert len(hashes) == len(pts)  # every point has its own identity
        assert exp.scale("paper").n_points >= exp.scale("book").n_points
    with pytest.raises(E.UnknownExperiment, match="attnbook experiments"):
        E.get("no-such-experiment")
    with pytest.raises(E.UnknownExperiment, match="smoke, book, paper"):
        E.get("pde-fates").points("huge")


def test_config_hash_is_stable_and_device_dtype_aware():
    exp = E.get("pde-meanfield-rate")
    (_, a), (_, b) = exp.points("smoke")[0], exp.points("smoke", dtype="float32")[0]
    assert E.config_hash(a) == E.config_hash(E.config_dict(a))
    assert E.config_hash(a) != E.config_hash(b)


def test_points_are_deterministic_on_cpu():
    (_, cfg), *_ = E.get("copyhead-phase").points("smoke")
    one, two = E.run_point("copyhead-phase", cfg), E.run_point("copyhead-phase", cfg)
    assert one.keys() == two.keys()
    for k in one:
        np.testing.assert_array_equal(one[k], two[k])


def test_copyhead_step_rule_keeps_book_hashes_and_paper_uses_curvature_rule():
    exp = E.get("copyhead-phase")
    man = store.read_manifest(ROOT / "results" / "copyhead-phase")
    assert [E.config_hash(c) for _, c in exp.points("book")] == [
        p["hash"] for p in man["points"]
    ]
    assert {c.step_size for _, c in exp.points("paper")} == {-0.25}
    (_, cfg), *_ = exp.points("smoke")
    cfg = dataclasses.replace(cfg, method="sgld", kind="linear", step_size=-0.25)
    new = E.run_point("copyhead-phase", cfg)
    old = E.run_point("copyhead-phase", dataclasses.replace(cfg, step_size=0.0))
    assert all(np.isfinite(v).all() for v in new.values())
    assert not np.array_equal(
        new["action"], old["action"]
    )  # another step, other chains


# ---- a 2-worker local cluster, resume, load --------------------------------------------------
@pytest.mark.slow
def test_local_cluster_runs_a_smoke_sweep_and_load_round_trips(tmp_path):
    out = tmp_path / "mf"
    kw = dict(workers=2, progress=False, allow_dirty=True)
    rep = E.run("pde-meanfield-rate", "smoke", out, **kw)
    n = E.get("pde-meanfield-rate").scale("smoke").n_points
    assert rep.ok and rep.computed == n and rep.skipped == 0
    again = E.run("pde-meanfield-rate", "smoke", out, **kw)
    assert again.computed == 0 and again.skipped == n  # nothing recomputed, no cluster
    st = E.status(out)
    assert (st["done"], st["total"], st["failed"]) == (n, n, [])

    ds = E.load(out)
    assert list(ds["w2_T"].dims) == ["kind", "n", "system"]
    assert ds.sizes["n"] == 3 and list(ds["kind"].values) == ["softmax", "l2"]
    # an output's own dimension gets integer coordinates
    assert list(ds["system"].values) == list(range(ds.sizes["system"]))
    assert ds.attrs["experiment"] == "pde-meanfield-rate" and ds.attrs["n_done"] == n
    assert "torch" in ds.attrs and "git_commit" in ds.attrs
    assert json.loads(ds.attrs["numeric_signature"])["torch"]["cpu_capability"]
    man = store.read_manifest(out)
    assert man["recheck"] == E.get("pde-meanfield-rate").recheck.to_json()
    assert man["allow_dirty"] is True and man["provenance"]["signature_key"]
    assert not (out / store.LOCK).exists()  # released and removed
    for p in man["points"]:
        arrays = store.read_point(out, p["hash"])
        sel = dict(zip(man["axes"], p["index"]))
        np.testing.assert_array_equal(ds["w2_T"].isel(sel).values, arrays["w2_T"])
        meta = store.read_point_meta(out, p["hash"])
        assert meta["config_hash"] == p["hash"] == E.config_hash(meta["config"])
        assert meta["wall_s"] > 0 and meta["numpy"] == np.__version__
        # the worker's signature: one torch and one BLAS thread, whatever this process has
        sig = meta["numeric_signature"]
        assert meta["signature_key"] == sig["key"] == signature_key(sig)
        assert sig["torch"]["threads"] == 1 and meta["allow_mixed"] is False

    # a partial run loads with NaN where points are missing
    first = man["points"][0]
    (out / "points" / f"{first['hash']}.json").unlink()
    part = E.load(out)
    assert part.attrs["n_done"] == n - 1
    assert np.isnan(part["w2_T"].isel(dict(zip(man["axes"], first["index"])))).all()


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_uninterrupted_arrays(tmp_path):
    out = tmp_path / "run"
    name = "copyhead-phase"
    args = [sys.executable, "-m", "attnbook", "run", name, "--scale", "smoke"]
    # two workers, as a sweep runs: a kill may land while both hold a point half-written
    args += ["--out", str(out), "--workers", "2", "--no-progress", "--allow-dirty"]
    proc = subprocess.Popen(
        args,
        env=_env(ATTNBOOK_TEST_POINT_DELAY="0.25"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pts_dir = out / "points"
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            if pts_dir.is_dir() and len(list(pts_dir.glob("*[0-9a-f].json"))) >= 2:
                break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its Dask workers, at once
    finally:
        proc.wait(timeout=30)
    finished = {
        p: (p.stat().st_mtime_ns, p.read_bytes())
        for p in pts_dir.glob("*[0-9a-f].json")
    }
    total = E.get(name).scale("smoke").n_points
    assert 2 <= len(finished) < total, "the run was not killed half-way"

    res = _cli(
        "run", name, "--scale", "smoke", "--out", str(out), "--workers", "2",
        "--allow-dirty",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"{total}/{total} points" in res.stdout
    assert f"{len(finished)} already finished" in res.stdout
    for p, (mtime, content) in finished.items():  # never recomputed nor rewritten
        assert p.stat().st_mtime_ns == mtime and p.read_bytes() == content
    assert not list(out.rglob("*.tmp"))
    man = store.read_manifest(out)
    for p in man["points"]:  # exactly the arrays of an uninterrupted computation
        want = E.run_point(name, p["config"])
        got = store.read_point(out, p["hash"])
        assert got.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


# ---- refusals and exit codes -------------------------------------------------------------------
def test_usage_errors_exit_2(tmp_path, capsys):
    assert (
        cli.main(["run", "nope", "--scale", "smoke", "--out", str(tmp_path / "a")]) == 2
    )
    assert "attnbook experiments" in capsys.readouterr().err
    assert (
        cli.main(["run", "pde-fates", "--scale", "huge", "--out", str(tmp_path / "a")])
        == 2
    )
    assert "smoke, book, paper" in capsys.readouterr().err
    assert cli.main(["status", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    assert cli.main(["status", str(tmp_path / "junk")]) == 2
    argv = ["run", "pde-fates", "--scale", "smoke", "--out", str(tmp_path / "junk")]
    assert cli.main([*argv, "--allow-dirty"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    out = str(tmp_path / "b")
    base = ["run", "pde-fates", "--scale", "smoke", "--out", out, "--allow-dirty"]
    assert cli.main([*base, "--only", "nothing"]) == 2
    assert "AXIS=V1,V2" in capsys.readouterr().err
    assert cli.main([*base, "--only", "no_such_axis=1"]) == 2
    assert "unknown axes" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(
            ["run", "pde-fates", "--scale", "smoke", "--out", "x", "--device", "tpu"]
        )
    assert exc.value.code == 2


def test_directory_of_another_configuration_is_refused(tmp_path, capsys):
    exp = E.get("pde-fates")
    d = tmp_path / "fates"
    store.open_store(
        d, exp, "smoke", exp.points("smoke"), device="cpu", dtype="float64"
    )
    argv = ["run", "pde-fates", "--scale", "smoke", "--out", str(d), "--allow-dirty"]
    assert cli.main([*argv, "--dtype", "float32"]) == 2
    err = capsys.readouterr().err
    assert "different configuration" in err and "dtype: 'float64'" in err
    argv = ["run", "pde-fates", "--scale", "book", "--out", str(d), "--allow-dirty"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "scale: 'smoke'" in err and "fixed.n_draws" in err
    with pytest.raises(E.ConfigMismatch, match="experiment: 'pde-fates'"):
        other = E.get("pde-meanfield-rate")
        store.open_store(
            d, other, "smoke", other.points("smoke"), device="cpu", dtype="float64"
        )


def test_unreachable_scheduler_exits_2_quickly(tmp_path, capsys):
    t0 = time.perf_counter()
    argv = ["run", "pde-fates", "--scale", "smoke", "--out", str(tmp_path / "s")]
    argv += ["--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "2"]
    argv += ["--allow-dirty"]
    assert cli.main(argv) == 2
    assert time.perf_counter() - t0 < 30
    assert "no Dask scheduler answered" in capsys.readouterr().err


@dataclass(frozen=True)
class _FailConfig:
    x: int = 0
    device: str = "cpu"
    dtype: str = "float64"


def _sometimes_fails(cfg: _FailConfig) -> dict:
    if cfg.x == 1:
        raise FloatingPointError("point 1 diverged")
    return {"y": np.arange(3) * cfg.x}


def test_failed_point_exits_1_and_keeps_the_others(tmp_path, capsys):
    from distributed import LocalCluster

    if "test-fail" not in E._REGISTRY:
        E.register(
            E.Experiment(
                name="test-fail",
                part="-",
                description="one point of three fails",
                function=_sometimes_fails,
                config=_FailConfig,
                scales={"smoke": E.Scale(axes={"x": (0, 1, 2)})},
            )
        )
    out = tmp_path / "f"
    # threads in this process share the registry with the test (a --scheduler run)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        argv = ["run", "test-fail", "--scale", "smoke", "--out", str(out)]
        argv += ["--scheduler", cluster.scheduler_address, "--no-progress"]
        argv += ["--allow-dirty"]
        assert cli.main(argv) == 1
        assert "point 1 diverged" in capsys.readouterr().err
        st = E.status(out)
        assert (st["done"], st["total"]) == (2, 3)
        assert st["failed"][0]["axes"] == {"x": 1}
        assert cli.main(["status", str(out)]) == 0
        assert "FloatingPointError: point 1 diverged" in capsys.readouterr().out
        ds = E.load(out)
        assert np.isnan(ds["y"].sel(x=1)).all() and ds["y"].sel(x=2).values[2] == 4


def test_cli_lists_experiments_as_json(capsys):
    assert cli.main(["experiments", "--json"]) == 0
    info = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert PARTS <= set(info)
    assert info["copyhead-phase"]["scales"]["smoke"]["n_points"] == 8
    assert cli.main(["experiments"]) == 0
    assert "pde-fates  (Part III)" in capsys.readouterr().out


# ---- archives ----------------------------------------------------------------------------------
ARCHIVES = sorted((ROOT / "results").glob("*/manifest.json"))


@pytest.mark.slow
def test_archives_are_compact_and_documented():
    parts = {E.get(store.read_manifest(p.parent)["experiment"]).part for p in ARCHIVES}
    # one archive per part at least (ledger-seeds, the sweep of the chapters, is "book")
    assert parts == {"I", "II", "III", "book"}
    sizes = {
        d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        for d in (ROOT / "results").iterdir()
        if d.is_dir()
    }
    records = ("ledger-seeds", "ledger-heldout")
    data = {k: v for k, v in sizes.items() if k not in records}
    # a notebook downloads each archive it reads on its own: a few seconds on Colab
    assert max(data.values()) < 2.5e6, data
    # and all of them together keep a clone of the book light
    assert sum(data.values()) < 1e7, data
    # the sweep of the chapters is a record, not data: ≈ 15 kB per chapter and seed (the
    # claims' values and the provenance with the sources' hashes), 400 points at 20 seeds
    assert sizes.get("ledger-seeds", 0) < 8e6
    # the held-out sweep is the same kind of record: 8 seeds per chapter, 160 points
    assert sizes.get("ledger-heldout", 0) < 4e6
    for man_path in ARCHIVES:
        st = E.status(man_path.parent)
        assert st["done"] == st["total"] and not st["failed"] and not st["damaged"]
        assert st["command"].startswith("attnbook run ")
        assert (man_path.parent / "README.md").is_file()


def test_every_archived_output_has_a_recheck_rule_with_a_reason():
    """The rule of every output an archive holds: its manifest's spec, else the registry's."""
    for man_path in ARCHIVES:
        man = store.read_manifest(man_path.parent)
        spec, _ = verify.recheck_spec(man)
        assert spec is not None, man["experiment"]
        first = man["points"][0]["hash"]
        outputs = store.read_point_meta(man_path.parent, first)["arrays"]
        assert set(outputs) <= set(spec.outputs), (man["experiment"], outputs)
        for name, rule in spec.outputs.items():
            assert len(rule.reason) > 20, (man["experiment"], name)
    for name in E.names():  # and every experiment of the package, archived or not
        if E.get(name).function.__module__.startswith("attnbook."):
            assert E.get(name).recheck is not None, name


@pytest.mark.slow
@pytest.mark.parametrize("manifest", ARCHIVES, ids=lambda p: p.parent.name)
def test_archive_point_reproduces(manifest):
    """Re-run one quick archived point, chosen by the git commit (verify.choose_point), and
    compare it with the archive: bitwise where the numeric signature is the archived one, else
    within the experiment's stated tolerances (attnbook.experiments.verify)."""
    check = verify.verify_point(manifest.parent)
    report = "\n".join(check.lines())
    print(report)  # which point, which path, and each output's difference
    assert check.ok, report


# ---- the GPU check, CPU mode --------------------------------------------------------------------
@pytest.mark.slow
def test_gpu_check_runs_on_cpu_at_tiny_sizes():
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=240,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "matmul" in out and "bandwidth" in out and "velocity" in out
    assert "SGLD" in out and "Adam" in out
    for name in PARTS:
        assert name in out


def test_rank_hist_point_keeps_every_draw():
    from attnbook.experiments.pde import RankHistConfig, rank_hist_point

    cfg = dict(d=3, n_draws=4, t_out=(1.0, 10.0), rtol=1e-6)
    out = {k: rank_hist_point(RankHistConfig(kind=k, **cfg)) for k in ("softmax", "l2")}
    for o in out.values():
        assert o["eigvals"].shape == (2, 4, 3) and o["rank"].shape == (2, 4)
        assert o["rank"].min() >= 1 and o["rank"].max() <= 3  # no draw dropped
        assert not o["exploded"].any()
    with pytest.raises(ValueError, match="kind"):
        rank_hist_point(RankHistConfig(kind="sinkhorn", **cfg))
