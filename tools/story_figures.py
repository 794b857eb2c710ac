"""The story figure of each part of the book, drawn when the book is built.

One function per part draws the figure that tells its paper's story, from the archived results
in ``results/`` (and, for Part III, the closed forms of the package, which take milliseconds):

* :func:`focus_story` — Part I: the loss and the attention entropy of the population flow
  through the four stages, at several asymmetries δ (archive ``focus-delta``);
* :func:`copyhead_story` — Part II: the copy order parameter against the number of sequences,
  continuous for linear attention (archive ``copyhead-phase``) and a jump for softmax attention
  (archive ``copyhead-softmax-map``), with the saddle-point theory drawn over both;
* :func:`pde_story` — Part III: a Gaussian cloud's covariance clustering or blowing up in
  finite time (draws of the archive ``pde-fates``, recomputed in closed form), and the fates
  of the archive's random draws per attention map.

:func:`story_figure` picks the part's function, :func:`save_story_svg` writes its SVG (the
book's ``story-figure`` directive, ``tools/attnbook_sphinxext.py``). The figures are sized for a
phone: :data:`FIGSIZE` inches, no text below :data:`MIN_FONT_PT` points.

:func:`reading_minutes` estimates a page's reading time from the prose of its Markdown source
(the landing page's reading paths).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
from numbers import Real
from pathlib import Path

import matplotlib

if "matplotlib.pyplot" not in sys.modules:  # the book build: no display, draw with Agg
    matplotlib.use("Agg")

import matplotlib as mpl  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as mticker  # noqa: E402
import numpy as np  # noqa: E402

__all__ = [
    "FIGSIZE",
    "MIN_FONT_PT",
    "PARTS",
    "focus_story",
    "copyhead_story",
    "pde_story",
    "story_figure",
    "save_story_svg",
    "archives_of",
    "prose_words",
    "reading_minutes",
]

#: Size (inches) of every story figure: it reads on a phone and in the text column.
FIGSIZE = (6.5, 3.0)

#: The smallest text (points) of a story figure.
MIN_FONT_PT = 9.0

#: Words of prose read per minute, for :func:`reading_minutes`.
WORDS_PER_MINUTE = 200

#: Part I's loss gap is drawn down to this level (the flow reaches h to round-off).
LOSS_FLOOR = 1e-4

#: The archives each part's figure reads.
_ARCHIVES = {
    "focus": ("focus-delta",),
    "copyhead": ("copyhead-phase", "copyhead-softmax-map"),
    "pde": ("pde-fates",),
}


@contextlib.contextmanager
def _book_style():
    """The book's Matplotlib style, restored to the caller's afterwards."""
    from attnbook import plotting

    with mpl.rc_context():
        plotting.use_style()
        yield


def _legible(fig) -> None:
    """Raise every visible text of ``fig`` to at least :data:`MIN_FONT_PT` points."""
    fig.canvas.draw()  # tick labels exist once drawn
    for text in fig.findobj(mpl.text.Text):
        if text.get_visible() and text.get_fontsize() < MIN_FONT_PT:
            text.set_fontsize(MIN_FONT_PT)


def _archive(name: str, given):
    from attnbook.experiments import load_archive

    if given is None:
        return load_archive(name, progress=False)
    if not hasattr(given, "data_vars"):
        raise TypeError(
            f"archive for {name!r} must be a loaded archive (xarray.Dataset), "
            f"not {type(given).__name__}"
        )
    return given


def _fixed(ds) -> dict:
    return json.loads(ds.attrs.get("fixed", "{}"))


def focus_story(deltas=(0.0, 0.02, 0.08), *, archive=None):
    r"""Part I: :math:`L(t) - h` and :math:`H_u(t)` of the population flow through the four
    stages, for the asymmetries ``deltas`` of the archive ``focus-delta`` (its first seed and
    model; the stages of the largest δ shaded). At δ = 0 the loss stalls on the rank-one
    plateau; a larger δ escapes sooner. ``archive``: the loaded archive (default: load it)."""
    from attnbook import markov
    from attnbook.experiments.focus import STAGES, FlowConfig
    from attnbook.focus import plots

    if isinstance(deltas, (str, bytes)) or not hasattr(deltas, "__iter__"):
        raise TypeError(
            f"deltas must be a sequence of numbers, not {type(deltas).__name__}"
        )
    deltas = tuple(deltas)
    if not 1 <= len(deltas) <= 4:
        raise ValueError(f"deltas must hold 1 to 4 values, got {len(deltas)}")
    if not all(isinstance(d, Real) and not isinstance(d, bool) for d in deltas):
        raise TypeError(f"deltas must be numbers, got {deltas!r}")
    ds = _archive("focus-delta", archive)
    grid = ds["delta"].values
    index = []
    for d in deltas:
        hit = np.flatnonzero(np.isclose(grid, d))
        if not hit.size:
            raise ValueError(
                f"deltas: {d} is not in the archive's δ grid {grid.tolist()}"
            )
        index.append(int(hit[0]))
    fixed = {k: v for k, v in _fixed(ds).items() if k != "delta"}
    curves_loss, curves_h = [], []
    styles = ["k--", "C3-", "C6-", "C4-"]
    for k, i in enumerate(index):
        cfg = FlowConfig(**fixed, delta=float(grid[i]))
        chain = markov.perturbed_chain(cfg.d, cfg.pi_top, cfg.delta, cfg.lam)
        h = float(markov.entropy_rate(chain))
        t = ds["t"].values[i, 0]
        label = rf"$\delta = {grid[i]:g}$"
        gap = np.maximum(ds["loss"].values[i, 0, :, 0] - h, LOSS_FLOOR)
        curves_loss.append(((t, gap), label, styles[k]))
        curves_h.append(((t, ds["entropy_uniform"].values[i, 0, :, 0]), "", styles[k]))
    shade = index[int(np.argmax(grid[index]))]
    stages = dict(zip(STAGES, ds["stage_times"].values[shade, 0, 0]))
    t_shade = ds["t"].values[shade, 0]
    with _book_style():
        fig = plots.curve_panels(
            t_shade,
            [
                ("(a) loss above the entropy rate", curves_loss),
                ("(b) attention entropy", curves_h),
            ],
            xscale="log",
            yscales={0: "log"},
            figsize=FIGSIZE,
        )
        a, b = fig.axes
        for ax, labels in ((a, True), (b, False)):
            plots.shade_stages(ax, stages, t_end=t_shade[-1], labels=labels)
            ax.set_xlabel(r"training time $t$")
            ax.title.set_fontsize(10)
        a.set_ylabel(r"$L(t) - h$")
        b.set_ylabel(r"$H_u(t)$")
        a.legend(fontsize=MIN_FONT_PT, loc="lower left")
        _legible(fig)
    return fig


def _theory_legend(ax, loc):
    """Keep one legend entry per series (its theory line), named by the series alone."""
    handles, labels = ax.get_legend_handles_labels()
    keep = [
        (h, lab.removesuffix(": theory"))
        for h, lab in zip(handles, labels)
        if lab.endswith(": theory")
    ]
    ax.legend(*zip(*keep), fontsize=MIN_FONT_PT, loc=loc)


def copyhead_story(
    *, vocab_size: int = 4, n_theory: int = 200, phase=None, softmax_map=None
):
    r"""Part II: the copy order parameter against the number of sequences :math:`P`.
    (a) Linear attention, :math:`c_G` of Adam's global minima (archive ``copyhead-phase``,
    vocabulary ``vocab_size``) against the saddle: a continuous rise. (b) Softmax attention
    above the critical length, :math:`a_G` against :math:`P/P^\star` (archive
    ``copyhead-softmax-map``) against the saddle: a jump at :math:`P^\star`. ``n_theory``
    points per theory line; ``phase``, ``softmax_map``: the loaded archives (default: load)."""
    from attnbook.copyhead import action as A
    from attnbook.copyhead import plots
    from attnbook.experiments.copyhead import (
        CopyConfig,
        SoftmaxMapConfig,
        global_copy_order,
    )

    for name, value in (("vocab_size", vocab_size), ("n_theory", n_theory)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if n_theory < 10:
        raise ValueError(f"n_theory must be at least 10, got {n_theory}")
    ph = _archive("copyhead-phase", phase)
    mp = _archive("copyhead-softmax-map", softmax_map)
    if vocab_size not in ph["V"].values:
        raise ValueError(
            f"vocab_size: {vocab_size} is not in the archive's V {ph['V'].values.tolist()}"
        )
    cfg = CopyConfig(**_fixed(ph))
    hyper = dict(kappa=cfg.kappa, sigma_w=cfg.sigma_w, sigma_g=cfg.sigma_g)
    P = ph["P"].values.astype(float)
    P_fine = np.geomspace(P[0], P[-1], n_theory)
    adam = global_copy_order(ph, kind="linear", method="adam").sel(V=vocab_size)
    linear = {
        rf"$L = {L}$": (
            P_fine,
            A.linear_saddle(P_fine, seq_len=int(L), vocab_size=vocab_size, **hyper).c_G,
            P,
            adam.sel(L=L).mean("chain").values,
        )
        for L in ph["L"].values
    }
    # the global minimum of each (L, seed, P, data set): the start with the lower action
    cold_deeper = (mp["action"].isel(start=0) <= mp["action"].isel(start=1)).values
    a_G = np.where(cold_deeper, mp["a_G"].isel(start=0), mp["a_G"].isel(start=1))
    ratio = (mp["P"] / mp["p_star"]).values  # (L, seed, p)
    V_map = SoftmaxMapConfig(**_fixed(mp)).V
    softmax = {}
    for i, L in enumerate(mp["L"].values):
        r = ratio[i].mean(0)
        r_fine = np.geomspace(r[0], r[-1], n_theory)
        p_star = float(mp["p_star"].values[i, 0])
        theory = A.softmax_saddle(r_fine * p_star, seq_len=int(L), vocab_size=V_map).a_G
        softmax[rf"$L = {L}$"] = (r_fine, theory, r, a_G[i].mean(axis=(0, 2)))
    with _book_style():
        fig, (a, b) = plt.subplots(1, 2, figsize=FIGSIZE)
        plots.matched_series(
            a, linear, ylabel=r"copying $c_G$", xlabel=r"sequences $P$"
        )
        plots.matched_series(
            b, softmax, ylabel=r"copying $a_G$", xlabel=r"$P\,/\,P^\star$"
        )
        a.set_title(
            f"(a) linear attention, $V = {vocab_size}$: continuous", fontsize=10
        )
        b.set_title(f"(b) softmax, $V = {V_map}$: a jump at $P^\\star$", fontsize=10)
        _theory_legend(a, "upper left")
        _theory_legend(b, "lower right")
        # the archive's sample sizes as ticks; the ratios P/P* on a linear axis
        a.set_xticks(P, [f"{p:g}" for p in P])
        a.xaxis.set_minor_formatter(mticker.NullFormatter())
        b.set_xscale("linear")
        _legible(fig)
    return fig


def _fate_draws(ds, d: int):
    """The blowing-up softmax draw (first generic one with a finite blow-up time) and the
    clustering one (first draw of A = −QᵀQ/√k) of the archive ``pde-fates`` in dimension d,
    regenerated from the archive's configuration: ``((A, Σ₀, T*), (A, Σ₀, rank))``."""
    from attnbook.experiments.pde import FatesConfig, draw_systems

    fixed = _fixed(ds)
    pick = {}
    for ens in ("generic", "negdef"):
        cfg = FatesConfig(kind="softmax", d=d, ensemble=ens, **fixed)
        A, S0 = draw_systems(cfg)
        pt = ds.sel(kind="softmax", ensemble=ens, d=d)
        if ens == "generic":
            finite = np.flatnonzero(np.isfinite(pt["blowup_time"].values))
            if not finite.size:
                raise ValueError(
                    f"d: no softmax draw blows up at d = {d} in the archive"
                )
            b = int(finite[0])
            pick[ens] = (A[b], S0[b], float(pt["blowup_time"].values[b]))
        else:
            pick[ens] = (A[0], S0[0], int(pt["rank"].values[0]))
    return pick["generic"], pick["negdef"]


def pde_story(d: int = 2, *, n_times: int = 300, archive=None):
    r"""Part III: (a) the eigenvalues of a Gaussian cloud's covariance :math:`\Sigma(t)` under
    softmax attention with :math:`V = I`, in closed form, for two draws of the archive
    ``pde-fates`` in dimension ``d``: one blows up at a finite :math:`T^\star`, one (with
    :math:`A + A^\top \preceq 0`) clusters onto a lower rank; (b) the fates of the archive's
    generic random draws per attention map: blow-up, unbounded growth, or bounded.
    ``n_times`` points per curve; ``archive``: the loaded archive (default: load it)."""
    from attnbook.experiments.pde import FatesConfig
    from attnbook.pde import closed_forms as cf
    from attnbook.plotting import KIND_COLORS, KIND_LABELS

    for name, value in (("d", d), ("n_times", n_times)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if n_times < 10:
        raise ValueError(f"n_times must be at least 10, got {n_times}")
    ds = _archive("pde-fates", archive)
    if d not in ds["d"].values:
        raise ValueError(
            f"d: {d} is not in the archive's dimensions {ds['d'].values.tolist()}"
        )
    (A_b, S_b, _), (A_c, S_c, _) = _fate_draws(ds, d)
    T_star = cf.identity_value_blowup_time(S_b, A_b)
    t_end = FatesConfig(**_fixed(ds)).t_end
    t0 = T_star / 100
    t_blow = T_star - np.geomspace(T_star - t0, T_star * 1e-6, n_times)
    t_clu = np.geomspace(t0, t_end, n_times)
    ev_blow = np.linalg.eigvalsh(cf.identity_value_covariance(t_blow, S_b, A_b))
    ev_clu = np.linalg.eigvalsh(cf.identity_value_covariance(t_clu, S_c, A_c))
    kinds = [str(k) for k in ds["kind"].values]
    gen = ds.sel(ensemble="generic")
    blowups = np.array(
        [np.isfinite(gen["blowup_time"].sel(kind=k).values).sum() for k in kinds]
    )
    grows = np.array(
        [np.isfinite(gen["growth_rate"].sel(kind=k).values).sum() for k in kinds]
    )
    total = np.array([gen["rank"].sel(kind=k).size for k in kinds])
    bounded = total - blowups - grows
    fates = (
        (blowups, "blows up", KIND_COLORS["causal"]),
        (grows, "grows without bound", "0.6"),
        (bounded, "stays bounded", KIND_COLORS["softmax"]),
    )
    blow_c, clu_c = fates[0][2], fates[2][2]
    with _book_style():
        fig, (a, b) = plt.subplots(1, 2, figsize=FIGSIZE, width_ratios=(1.25, 1))
        for j in range(d):
            a.loglog(t_blow, ev_blow[:, j], color=blow_c)
            a.loglog(t_clu, ev_clu[:, j], color=clu_c)
        a.axvline(T_star, color=blow_c, ls=":", lw=1)
        a.text(
            T_star,
            0.97,
            r" $T^\star$",
            color=blow_c,
            transform=a.get_xaxis_transform(),
            va="top",
        )
        a.set(xlabel=r"depth $t$", ylabel=r"eigenvalues of $\Sigma(t)$")
        a.set_title(f"(a) softmax, $V = I$, $d = {d}$", fontsize=10)
        y = np.arange(len(kinds))
        left = np.zeros(len(kinds))
        for count, label, color in fates:
            b.barh(y, count, left=left, color=color, label=label)
            left = left + count
        b.set_yticks(y, [KIND_LABELS.get(k, k) for k in kinds])
        b.invert_yaxis()
        b.set_xlabel(f"random draws of $A$ (of {int(total[0])})")
        b.set_ylabel("attention map")
        b.set_title("(b) fates of random draws", fontsize=10)
        b.grid(False)
        fig.legend(fontsize=MIN_FONT_PT, loc="outside lower center", ncol=3)
        _legible(fig)
    return fig


_STORIES = {"focus": focus_story, "copyhead": copyhead_story, "pde": pde_story}

#: The parts that have a story figure (folders of ``book/``).
PARTS = tuple(_STORIES)


def _check_part(part) -> str:
    if not isinstance(part, str):
        raise TypeError(f"part must be a string, not {type(part).__name__}")
    if part not in _STORIES:
        raise ValueError(f"part must be one of {PARTS}, not {part!r}")
    return part


def story_figure(part: str):
    """The story figure of ``part`` (one of :data:`PARTS`), as a Matplotlib figure."""
    return _STORIES[_check_part(part)]()


def archives_of(part: str) -> tuple[str, ...]:
    """The names of the archives that the story figure of ``part`` reads."""
    return _ARCHIVES[_check_part(part)]


def save_story_svg(part: str, path: str | os.PathLike) -> Path:
    """Draw the story figure of ``part`` and write it to ``path`` as SVG (no date inside, so an
    unchanged figure writes the same bytes); returns the path."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, not {type(path).__name__}")
    path = Path(path)
    if path.suffix != ".svg":
        raise ValueError(f"path must end in .svg, not {path.name!r}")
    fig = story_figure(part)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with mpl.rc_context({"svg.hashsalt": part}):
            fig.savefig(
                path, format="svg", metadata={"Date": None}, bbox_inches="tight"
            )
    finally:
        plt.close(fig)
    return path


# fenced blocks whose content is not prose: code cells, code, math, raw output; any other
# directive (a proof, an admonition, a figure's caption) holds prose
_FENCE_OPEN = re.compile(r"^(`{3,}|:{3,})\s*(?:\{([\w:-]+)\})?")
_NOT_PROSE = {"code-cell", "code", "code-block", "math", "raw", "glue", "eval-rst"}
_OPTION = re.compile(r"^:[\w-]+:")
_ROLE = re.compile(r"\{[\w:-]+\}`([^`]*)`")
_MATH = re.compile(r"\$\$.*?\$\$", re.S)
_INLINE_MATH = re.compile(r"\$[^$\n]+\$")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_WORD = re.compile(r"[^\W\d_][\w'’-]*")


def _prose_lines(lines):
    """The lines of a MyST page that are prose: outside front matter, code and math blocks
    and directive options (fences are matched by their character and length)."""
    if lines and lines[0].strip() == "---":
        end = next((i for i, x in enumerate(lines[1:], 1) if x.strip() == "---"), 0)
        lines = lines[end + 1 :]
    stack = []  # open fences: (fence, prose inside?)
    header = False  # inside a directive's "---" option block
    for line in lines:
        bare = line.strip()
        if (
            stack
            and bare
            and set(bare) == {stack[-1][0][0]}
            and len(bare) >= len(stack[-1][0])
        ):
            stack.pop()
            continue
        m = _FENCE_OPEN.match(bare)
        if m and (not stack or stack[-1][1]):
            name = m.group(2)
            stack.append((m.group(1), name is not None and name not in _NOT_PROSE))
            header = False
            continue
        if stack and not stack[-1][1]:
            continue
        if stack and bare == "---":
            header = not header
            continue
        if header or _OPTION.match(bare):
            continue
        yield line


def prose_words(text: str) -> int:
    """The number of words of prose in a MyST Markdown page: code cells, code, math and raw
    blocks, front matter, directive options and HTML comments do not count; a role counts
    as its text, inline math as one word."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, not {type(text).__name__}")
    text = "\n".join(_prose_lines(_COMMENT.sub(" ", text).splitlines()))
    text = _MATH.sub(" ", text)
    text = _ROLE.sub(lambda m: m.group(1), text)
    text = _INLINE_MATH.sub(" x ", text)
    return len(_WORD.findall(text))


def reading_minutes(
    path: str | os.PathLike, *, words_per_minute: int = WORDS_PER_MINUTE
) -> int:
    """Minutes to read the prose of the Markdown page at ``path`` at ``words_per_minute``
    (rounded up, at least 1)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, not {type(path).__name__}")
    if not isinstance(words_per_minute, int) or isinstance(words_per_minute, bool):
        raise TypeError(
            f"words_per_minute must be an int, not {type(words_per_minute).__name__}"
        )
    if words_per_minute <= 0:
        raise ValueError(f"words_per_minute must be positive, got {words_per_minute}")
    path = Path(path)
    if path.suffix != ".md" or not path.is_file():
        raise ValueError(f"path: {path} is not a Markdown page")
    words = prose_words(path.read_text(encoding="utf-8"))
    return max(1, math.ceil(words / words_per_minute))
