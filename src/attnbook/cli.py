"""The ``attnbook`` command: list, run (or resume) and inspect the named experiments.

::

    attnbook experiments [--json]
    attnbook experiments verify DIR [--all] [--env NAME=VALUE ...] [--json]
    attnbook run EXPERIMENT --scale {smoke,book,paper} --out DIR [--workers N]
                 [--scheduler ADDRESS] [--device cpu|cuda] [--dtype float32|float64]
                 [--allow-dirty] [--allow-mixed]
    attnbook status DIR [--json]

Exit status: 0 success, 1 when a point failed (the others are kept), a re-checked point
disagrees with its archive, or ``status`` finds damaged points; 2 bad usage (unknown experiment
or scale, unreadable DIR, a DIR of another configuration, an unreachable scheduler, a source
tree with uncommitted changes, a DIR of another commit, a DIR another run holds).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from . import experiments as E

__all__ = ["main", "build_parser"]

OK, FAILED, USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnbook",
        description="Run the book's experiments at scale (Dask), resumably.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ls = sub.add_parser(
        "experiments",
        help="list experiments, their axes and point counts; verify an archive",
    )
    ls.add_argument("--json", action="store_true", help="print JSON")
    act = ls.add_subparsers(dest="action", metavar="ACTION")
    vf = act.add_parser(
        "verify",
        help="re-run archived points: bitwise on the same numeric signature, within the "
        "experiment's stated tolerances elsewhere",
    )
    vf.add_argument("directory", metavar="DIR")
    vf.add_argument(
        "--all",
        action="store_true",
        help="every point (default: the quick point chosen by the git commit)",
    )
    vf.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="re-run in a fresh process with this variable set, e.g. "
        "MKL_CBWR=COMPATIBLE to emulate another CPU's MKL path (repeatable)",
    )
    vf.add_argument("--json", action="store_true", help="print JSON")
    run = sub.add_parser("run", help="run or resume a sweep")
    run.add_argument("experiment", metavar="EXPERIMENT")
    run.add_argument("--scale", required=True, help="smoke, book or paper")
    run.add_argument("--out", required=True, metavar="DIR", help="the run directory")
    run.add_argument(
        "--workers", type=int, default=None, help="local workers (default: cores)"
    )
    run.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="a running Dask scheduler, tcp://HOST:PORT",
    )
    run.add_argument("--device", default="cpu", choices=E.DEVICES)
    run.add_argument("--dtype", default="float64", choices=E.DTYPES)
    run.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds to wait for --scheduler (default 10)",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--only",
        action="append",
        metavar="AXIS=V1,V2",
        help="compute only the unfinished or stale points with these axis values "
        "(repeatable), e.g. --only chapter=focus/real-text",
    )
    run.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run from a source tree with uncommitted changes (recorded)",
    )
    run.add_argument(
        "--allow-mixed",
        action="store_true",
        help="resume a DIR whose finished points were made at another commit (recorded)",
    )
    st = sub.add_parser(
        "status", help="done / total points and failures of a run directory"
    )
    st.add_argument("directory", metavar="DIR")
    st.add_argument("--json", action="store_true", help="print JSON")
    return p


def _usage(msg: str) -> int:
    print(f"attnbook: error: {msg}", file=sys.stderr)
    return USAGE


def _list(as_json: bool) -> int:
    from .experiments import registry_index

    # the packaged index: listing needs none of the parts' imports (torch, SciPy, models)
    infos = registry_index.read()
    if infos is None:
        infos = [E.get(n).describe() for n in E.names()]
    if as_json:
        print(json.dumps(infos, indent=1))
        return OK
    for info in infos:
        print(f"{info['name']}  (Part {info['part']}): {info['description']}")
        for s, sc in info["scales"].items():
            axes = ", ".join(f"{a}={v}" for a, v in sc["axes"].items())
            print(f"  {s:<6} {sc['n_points']:>5} points  {axes}")
    return OK


def _bad_run_args(args) -> str | None:
    """The usage error that stops ``attnbook run`` with these arguments, or None."""
    if args.experiment not in E.names():
        return (
            f"unknown experiment {args.experiment!r}; run `attnbook experiments` to list "
            f"them ({', '.join(E.names())})"
        )
    exp = E.get(args.experiment)
    if args.scale not in exp.scales:
        return (
            f"unknown scale {args.scale!r} for {args.experiment}; use one of "
            f"{', '.join(exp.scales)}"
        )
    if args.workers is not None and args.workers < 1:
        return "--workers must be at least 1"
    return None


def _parse_only(items) -> tuple[dict | None, str | None]:
    """``(filters, error)``: the ``--only AXIS=V1,V2`` filters as ``{axis: [values]}``
    (None when there are none), or the usage error of the first malformed one."""
    only = None
    for item in items or []:
        axis, sep, values = item.partition("=")
        if not sep or not axis or not values:
            return None, f"--only takes AXIS=V1,V2, got {item!r}"
        only = (only or {}) | {axis: values.split(",")}
    return only, None


def _report_sweep(args, rep) -> int:
    """Print what a sweep did (recomputed, failed points) and return the exit status."""
    for d in rep.damaged:
        print(
            f"attnbook: warning: recomputed damaged point {d['axes']}: {d['reason']}",
            file=sys.stderr,
        )
    for d in rep.stale:
        print(f"recomputed stale point {d['axes']}: changed {', '.join(d['changed'])}")
    print(
        f"{args.experiment} [{args.scale}]: {rep.skipped + rep.computed}/{rep.total} points "
        f"done ({rep.skipped} already finished, {rep.computed} computed, "
        f"{len(rep.failed)} failed) in {rep.wall_s:.1f} s -> {rep.directory}"
        + (f"; {rep.left_out} left out by --only" if rep.left_out else "")
    )
    for idx, err in rep.failed:
        print(f"  point {idx} failed: {err}", file=sys.stderr)
    if rep.failed:
        print(
            f"  see `attnbook status {args.out}`; rerun the same command to retry",
            file=sys.stderr,
        )
        return FAILED
    return OK


def _run(args, argv) -> int:
    from .experiments.runner import SchedulerUnreachable, run_sweep

    bad = _bad_run_args(args)
    if bad is not None:
        return _usage(bad)
    only, bad = _parse_only(args.only)
    if bad is not None:
        return _usage(bad)
    command = "attnbook " + " ".join(shlex.quote(a) for a in argv)
    try:
        rep = run_sweep(
            args.experiment,
            args.scale,
            args.out,
            workers=args.workers,
            scheduler=args.scheduler,
            device=args.device,
            dtype=args.dtype,
            progress=not args.no_progress,
            connect_timeout=args.connect_timeout,
            command=command,
            allow_dirty=args.allow_dirty,
            allow_mixed=args.allow_mixed,
            only=only,
        )
    except (SchedulerUnreachable, E.RunLocked) as err:
        return _usage(str(err))
    except (E.ConfigMismatch, FileExistsError, FileNotFoundError, ValueError) as err:
        return _usage(str(err))
    except OSError as err:
        return _usage(f"cannot use --out {args.out}: {err}")
    return _report_sweep(args, rep)


def _status(args) -> int:
    try:
        st = E.status(args.directory)
    except (FileNotFoundError, ValueError, OSError, KeyError) as err:
        return _usage(f"cannot read {args.directory}: {err}")
    code = FAILED if st["damaged"] else OK
    if args.json:
        print(json.dumps(st, indent=1))
        return code
    print(
        f"{st['experiment']} [{st['scale']}, {st['device']}, {st['dtype']}]: "
        f"{st['done']}/{st['total']} points done, {len(st['failed'])} failed, "
        f"{len(st['damaged'])} damaged, {len(st['stale'])} stale, "
        f"{st['wall_s']:.1f} s of compute"
    )
    if st["command"]:
        print(f"  made by: {st['command']}")
    for f in st["failed"]:
        print(f"  failed {f['axes']}: {f['error']}")
    for d in st["damaged"]:
        print(f"  damaged {d['axes']} ({d['hash'][:12]}): {d['reason']}")
    for d in st["stale"]:
        print(f"  stale {d['axes']}: changed {', '.join(d['changed'])}")
    if st["damaged"]:
        print(
            "  restore the damaged files, or rerun the command above: it recomputes them",
            file=sys.stderr,
        )
    return code


def _verify(args) -> int:
    from .experiments import verify

    env = {}
    for item in args.env:
        name, eq, value = item.partition("=")
        if not eq or not name:
            return _usage(f"--env takes NAME=VALUE, got {item!r}")
        env[name] = value
    try:
        checks = verify.verify(args.directory, all_points=args.all, env=env or None)
    except (FileNotFoundError, ValueError, OSError, KeyError, RuntimeError) as err:
        return _usage(f"cannot verify {args.directory}: {err}")
    if args.json:
        print(json.dumps([c.to_json() for c in checks], indent=1))
    else:
        for c in checks:
            print("\n".join(c.lines()))
    return OK if all(c.ok for c in checks) else FAILED


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``attnbook`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.command == "experiments":
        if args.action == "verify":
            return _verify(args)
        return _list(args.json)
    if args.command == "run":
        return _run(args, argv)
    return _status(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
