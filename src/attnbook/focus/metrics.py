r"""What we measure along a trajectory: spectra, attention laws and entropies, alignments, PCA.

Everything takes arrays with arbitrary leading dimensions (time, models, ...) and returns NumPy
arrays of the same leading shape, so one call summarises a whole batched run.

* Attention of query :math:`q` in the long-context limit: :math:`w_q(k)\propto\pi_k e^{\Phi_{qk}}`
  (token types). Two entropies: the **type level** :math:`H(w_q)`, the entropy of the attention
  over distinct tokens, and the **position level** of a context of length :math:`s`,
  :math:`\approx \log s - \mathrm{KL}(w_q\,\|\,\pi)` (each type :math:`k` occupies
  :math:`\approx s\pi_k` positions sharing :math:`w_q(k)`; :func:`position_entropy`).
  :func:`trajectory_metrics` returns both (``entropy_*`` and ``kl_*``).
* Averages over queries: **uniform** :math:`H_u = \frac1d\sum_q H(w_q)` (rare queries count as
  much as the frequent one) and :math:`\pi`-**weighted** :math:`H_\pi = \sum_q \pi_q H(w_q)`;
  likewise ``kl_uniform`` and ``kl_pi``. On the reference run only the uniform type-level
  :math:`H_u` goes down, up, down; :math:`H_\pi` falls and the KL rises throughout.
* Alignment: cosines of :math:`W_0`'s top left singular vector with :math:`\pi`, and of
  :math:`W_1`'s top right singular vector with :math:`b = \pi - \frac1d\mathbf 1` and with
  :math:`\tilde\ell = \log\pi - \overline{\log\pi}` (absolute values: singular vectors have no sign).
"""

from __future__ import annotations

import numpy as np
import torch

from .. import attention, linalg
from ..markov import as_probability_vector
from ..validation import as_tensor

__all__ = [
    "first_time_below",
    "largest_rise",
    "attention_mass_by_type",
    "singular_values",
    "stable_rank",
    "attention_distributions",
    "attention_entropy",
    "attention_kl",
    "position_entropy",
    "trajectory_metrics",
    "analyse_flow",
    "key_weights",
    "focus_episode",
    "change_correlation",
    "time_index",
    "first_time",
    "embedding_pca",
    "stage_times",
    "growth_rate_fit",
    "rare_spread",
]


def _np(x, name):
    t = as_tensor(x, name)
    return t.detach().cpu().to(torch.float64).numpy()


def singular_values(A) -> np.ndarray:
    """Singular values (descending) of the last two dimensions, batched."""
    return np.linalg.svd(_np(A, "A"), compute_uv=False)


def stable_rank(A) -> np.ndarray:
    r"""Stable rank :math:`\|A\|_F^2/\|A\|_2^2` (1 for a rank-one matrix), batched."""
    s = singular_values(A)
    return (s**2).sum(-1) / np.maximum(s[..., 0] ** 2, 1e-300)


def attention_distributions(W0, WQ, WK, pi, masked_keys=None) -> np.ndarray:
    r"""Per-query long-context attention laws :math:`w_q(k)` (rows), shape (..., d, d)."""
    W0, WQ, WK = _np(W0, "W0"), _np(WQ, "WQ"), _np(WK, "WK")
    p = as_probability_vector(pi, "pi").numpy()
    Phi = W0 @ WQ @ np.swapaxes(WK, -1, -2) @ np.swapaxes(W0, -1, -2)
    with np.errstate(divide="ignore"):
        logits = np.log(p) + Phi
    visible = None if masked_keys is None else ~np.asarray(masked_keys, dtype=bool)
    return attention.masked_softmax(logits, visible)


def attention_entropy(w) -> np.ndarray:
    """Entropy (nats) of each row of ``w`` (each query's attention over token types)."""
    return linalg.entropy(_np(w, "w"))


def attention_kl(w, pi) -> np.ndarray:
    r""":math:`\mathrm{KL}(w_q\|\pi)` per query; position-level entropy ≈ :math:`\log s` minus this."""
    w = _np(w, "w")
    return linalg.kl_divergence(w, np.broadcast_to(_np(pi, "pi"), w.shape).copy())


def position_entropy(w, pi, s) -> np.ndarray:
    r"""Position-level attention entropy of a context of length ``s``,
    :math:`\log s - \mathrm{KL}(w_q\|\pi)`: each type :math:`k` fills :math:`s\pi_k` positions,
    which share its weight :math:`w_q(k)` equally (exact when the counts are exactly
    :math:`s\pi_k`)."""
    s = float(s)
    if not s > 0:
        raise ValueError(f"s must be positive, got {s!r}")
    return np.log(s) - attention_kl(w, pi)


def attention_mass_by_type(attention, context, d: int) -> np.ndarray:
    r"""Aggregate position-level attention into token types: entry ``k`` is the attention the
    query puts on all positions holding token ``k``.

    ``attention`` and ``context`` have shape (..., s) (the second: integer ids in ``[0, d)``);
    returns (..., d). Its entropy is the attention entropy over distinct tokens, and its
    average over windows shows which tokens attract attention.
    """
    a = as_tensor(attention, "attention").detach().cpu().to(torch.float64)
    c = torch.as_tensor(context).detach().cpu().long()
    if a.shape[-1] != c.shape[-1]:
        raise ValueError(
            f"attention and context must share their last dimension, got "
            f"{tuple(a.shape)} and {tuple(c.shape)}"
        )
    if c.numel() and (int(c.min()) < 0 or int(c.max()) >= d):
        raise ValueError(f"context ids must lie in [0, {d})")
    c = c.expand(a.shape)
    out = torch.zeros(*a.shape[:-1], d, dtype=torch.float64)
    return out.scatter_add_(-1, c, a).numpy()


def _cos(u, v):
    return np.abs((u * v).sum(-1)) / np.maximum(
        np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1), 1e-300
    )


def trajectory_metrics(
    W0, W1, WQ, WK, pi, *, masked_keys=None
) -> dict[str, np.ndarray]:
    """Every per-time summary used by the Part I chapters, for arrays with leading dims (T, ...).

    Keys: ``sv_W0``, ``sv_W1``, ``sv_M``, ``sv_Phi`` (singular values), ``stable_rank_W0``,
    ``phi_norm`` (Frobenius), ``attention`` (..., d, d), ``entropy_per_query`` (..., d),
    ``entropy_uniform``, ``entropy_pi``, ``kl_per_query``, ``cos_W0_pi``, ``cos_W1_b``,
    ``kl_uniform``, ``kl_pi`` (position level: entropy ≈ log s − KL), ``cos_W1_ell``,
    ``top_self_attention`` (:math:`w_0(0)`, token 0 = the most frequent when
    π is sorted), ``top_token_mass_rare`` (mean weight rare queries put on the most frequent
    token), ``cos_top_vs_rest`` (mean cosine between the most frequent token's embedding and
    the others').
    """
    W0n, W1n, WQn, WKn = (
        _np(x, n) for x, n in ((W0, "W0"), (W1, "W1"), (WQ, "WQ"), (WK, "WK"))
    )
    p = as_probability_vector(pi, "pi").numpy()
    d = p.shape[-1]
    M = W0n @ W1n
    Phi = W0n @ WQn @ np.swapaxes(WKn, -1, -2) @ np.swapaxes(W0n, -1, -2)
    w = attention_distributions(W0n, WQn, WKn, p, masked_keys)
    H = attention_entropy(w)
    kl = attention_kl(w, p)
    U0, s0, _ = np.linalg.svd(W0n, full_matrices=False)
    _, s1, V1 = np.linalg.svd(W1n, full_matrices=False)
    b = p - 1.0 / d
    lp = np.log(p)
    ell = lp - lp.mean()
    top = int(np.argmax(p))
    rest = [k for k in range(d) if k != top]
    emb = W0n
    e_top = emb[..., top, :]
    cos_rest = np.stack(
        [
            (e_top * emb[..., k, :]).sum(-1)
            / np.maximum(
                np.linalg.norm(e_top, axis=-1)
                * np.linalg.norm(emb[..., k, :], axis=-1),
                1e-300,
            )
            for k in rest
        ],
        -1,
    ).mean(-1)
    return {
        "sv_W0": s0,
        "sv_W1": s1,
        "sv_M": np.linalg.svd(M, compute_uv=False),
        "sv_Phi": np.linalg.svd(Phi, compute_uv=False),
        "stable_rank_W0": stable_rank(W0n),
        "phi_norm": np.linalg.norm(Phi, axis=(-2, -1)),
        "attention": w,
        "entropy_per_query": H,
        "entropy_uniform": H.mean(-1),
        "entropy_pi": (H * p).sum(-1),
        "kl_per_query": kl,
        "kl_uniform": kl.mean(-1),
        "kl_pi": (kl * p).sum(-1),
        "cos_W0_pi": _cos(U0[..., :, 0], p),
        "cos_W1_b": _cos(V1[..., 0, :], b),
        "cos_W1_ell": _cos(V1[..., 0, :], ell),
        "top_self_attention": w[..., top, top],
        "top_token_mass_rare": w[..., rest, top].mean(-1),
        "cos_top_vs_rest": cos_rest,
    }


def embedding_pca(W0_traj, n_components: int = 3) -> dict[str, np.ndarray]:
    r"""PCA of the embedding trajectories: the rows of :math:`W_0(t)` for all times and tokens
    as points in :math:`\mathbb R^m` (not centred: the origin is the initial point).

    ``W0_traj`` has shape (T, d, m). Returns ``coords`` (T, d, n_components), ``components``
    (n_components, m) and ``explained`` (fraction of the sum of squares per component).
    """
    X = _np(W0_traj, "W0_traj")
    if X.ndim != 3:
        raise ValueError(f"W0_traj must have shape (T, d, m), got {X.shape}")
    T, d, m = X.shape
    if not isinstance(n_components, int) or not 1 <= n_components <= m:
        raise ValueError(
            f"n_components must be an integer in [1, {m}], got {n_components!r}"
        )
    flat = X.reshape(T * d, m)
    _, s, Vt = np.linalg.svd(flat, full_matrices=False)
    comps = Vt[:n_components]
    return {
        "coords": (flat @ comps.T).reshape(T, d, n_components),
        "components": comps,
        "explained": (s[:n_components] ** 2) / max((s**2).sum(), 1e-300),
    }


def growth_rate_fit(
    t,
    y,
    *,
    t_min: float | None = None,
    t_max: float | None = None,
    lower: float | None = None,
    upper: float | None = None,
) -> tuple[float, tuple[float, float]]:
    r"""Least-squares slope of :math:`\log y` against ``t``: the measured exponential growth rate.

    The fit uses the first contiguous run of points with ``t_min <= t <= t_max`` and
    ``lower < y < upper`` (each bound optional). Returns ``(rate, (t_start, t_end))``; raises
    ``ValueError`` if fewer than 3 points qualify or ``y`` is not positive there.
    """
    t = np.asarray(t, float)
    y = np.asarray(y, float)
    if t.shape != y.shape or t.ndim != 1:
        raise ValueError("t and y must be 1-D arrays of the same length")
    inside = np.ones_like(t, dtype=bool)
    if t_min is not None:
        inside &= t >= t_min
    if t_max is not None:
        inside &= t <= t_max
    if lower is not None:
        inside &= y > lower
    if upper is not None:
        inside &= y < upper
    idx = np.flatnonzero(inside)
    if idx.size < 3:
        raise ValueError("fewer than 3 points in the growth window")
    run_end = idx[0]
    while run_end + 1 < len(y) and inside[run_end + 1]:
        run_end += 1
    sel = slice(idx[0], run_end + 1)
    if run_end - idx[0] + 1 < 3:
        raise ValueError(
            "the growth window has fewer than 3 contiguous points; record more densely"
        )
    if np.any(y[sel] <= 0):
        raise ValueError("y must be positive in the growth window")
    slope = np.polyfit(t[sel], np.log(y[sel]), 1)[0]
    return float(slope), (float(t[idx[0]]), float(t[run_end]))


def stage_times(
    t,
    loss,
    metrics: dict,
    pi,
    *,
    phi_threshold: float = 0.05,
    sv2_threshold: float = 0.1,
) -> dict[str, float]:
    r"""Boundaries of the four stages of one run (criteria of the Part I brief).

    * I: the loss covers 5% → 99% of its drop from :math:`L_0` to the unigram entropy :math:`H(\pi)`.
    * II: :math:`\|\Phi\|_F` first exceeds ``phi_threshold`` → the minimum of :math:`H_u` after it.
    * III: → the maximum of :math:`H_u` after the stage-II minimum (dilution ends) and before
      the escape of IV.
    * IV (escape): after stage III the second singular value of :math:`W_0` first exceeds
      ``sv2_threshold`` (an absolute level, so the escape time depends on the initial scale
      ε as the theory predicts; ``nan`` if it never does: the run stalls at rank one).

    Returns a dict of times (``nan`` when a boundary is not reached).
    """
    t = np.asarray(t, float)
    loss = np.asarray(loss, float)
    p = _np(pi, "pi")
    Hpi = float(linalg.entropy(p))
    out = dict.fromkeys(
        ["I_start", "I_end", "II_start", "II_end", "III_end", "IV_escape"], float("nan")
    )
    drop = loss[0] - Hpi
    frac = (loss[0] - loss) / drop if drop > 0 else np.zeros_like(loss)
    for key, lvl in (("I_start", 0.05), ("I_end", 0.99)):
        hit = np.flatnonzero(frac >= lvl)
        if hit.size:
            out[key] = float(t[hit[0]])
    phi = metrics["phi_norm"]
    Hu = metrics["entropy_uniform"]
    sv2 = metrics["sv_W0"][..., 1]
    hit = np.flatnonzero(phi > phi_threshold)
    if hit.size:
        i2 = hit[0]
        out["II_start"] = float(t[i2])
        # stage II ends at the first local minimum of H_u after the attention starts to grow
        j = i2
        while j + 1 < len(Hu) and Hu[j + 1] <= Hu[j]:
            j += 1
        out["II_end"] = float(t[j])
        k = j
        while k + 1 < len(Hu) and Hu[k + 1] >= Hu[k]:
            k += 1
        out["III_end"] = float(t[k])
        esc = np.flatnonzero((sv2 > sv2_threshold) & (t > t[k]))
        if esc.size:
            out["IV_escape"] = float(t[esc[0]])
    return out


def rare_spread(W0) -> np.ndarray:
    r"""How far the rare tokens' embeddings are apart **along** the rank-one direction.

    With :math:`\alpha` the top right singular vector of :math:`W_0` and
    :math:`\gamma = W_0\alpha` the tokens' coordinates on it, returns
    :math:`\lVert\gamma_{1:} - \bar\gamma_{1:}\mathbf 1\rVert` (tokens ``1 … d−1``, token 0 the
    frequent one): zero while the rare tokens are exchangeable on the rank-one manifold.
    ``W0`` has shape ``(..., d, m)`` with ``d >= 3``; the result has shape ``(...)``.
    """
    return np.linalg.norm(rare_offsets(W0), axis=-1)


def rare_offsets(W0) -> np.ndarray:
    r"""The rare tokens' centred coordinates on the rank-one direction,
    :math:`\gamma_{1:} - \bar\gamma_{1:}\mathbf 1` with :math:`\gamma = W_0\alpha`, the sign
    of :math:`\alpha` fixed by :math:`\gamma_0 > 0` (so that a trajectory's offsets can be
    compared across times). ``W0`` has shape ``(..., d, m)`` with ``d >= 3``; the result
    has shape ``(..., d - 1)``; :func:`rare_spread` is its norm.
    """
    W0 = _np(W0, "W0")
    if W0.ndim < 2 or W0.shape[-2] < 3:
        raise ValueError(f"W0 must have shape (..., d, m) with d >= 3, got {W0.shape}")
    alpha = np.linalg.svd(W0)[2][..., 0, :]
    gamma = (W0 @ alpha[..., None])[..., 0]
    gamma = gamma * np.where(gamma[..., :1] < 0, -1.0, 1.0)
    rare = gamma[..., 1:]
    return rare - rare.mean(-1, keepdims=True)


def time_index(t, time) -> int:
    """Index of the first recorded time ``>= time`` (clipped to the last record)."""
    t = np.asarray(t, float)
    return int(min(np.searchsorted(t, float(time)), len(t) - 1))


def first_time(t, condition, *, after: float = -np.inf) -> float:
    """First time ``t[i] > after`` at which the boolean array ``condition`` holds (nan if never)."""
    t = np.asarray(t, float)
    hit = np.flatnonzero(np.asarray(condition, bool) & (t > after))
    return float(t[hit[0]]) if hit.size else float("nan")


def analyse_flow(run, model: int | None = None, **stage_options):
    """:func:`trajectory_metrics` and :func:`stage_times` of a recorded run in one call.

    ``run`` is a :class:`~attnbook.focus.population.FlowResult` (or anything with ``t``,
    ``loss``, ``W0`` … ``WK`` and ``pi``); for a batched run ``model`` picks one member (its
    chain too when the run has one chain per model). Returns ``(metrics, stages)``.
    """
    sel = (slice(None),) if model is None else (slice(None), model)
    pi = np.asarray(run.pi)
    if model is not None and pi.ndim > 1:
        pi = pi[model]
    W = [np.asarray(getattr(run, k))[sel] for k in ("W0", "W1", "WQ", "WK")]
    mk = getattr(run, "info", {}).get("masked_keys")
    m = trajectory_metrics(*W, pi, masked_keys=mk)
    return m, stage_times(run.t, np.asarray(run.loss)[sel], m, pi, **stage_options)


def key_weights(W0, WQ, WK, pi, *, masked_keys=None) -> tuple[np.ndarray, np.ndarray]:
    r"""Long-context attention averaged uniformly over query types: the weight on each key
    type, shape (..., d), and the type-level entropy :math:`H_u`, shape (...)."""
    w = attention_distributions(W0, WQ, WK, pi, masked_keys)
    return w.mean(-2), attention_entropy(w).mean(-1)


def focus_episode(weight, H_u) -> dict:
    """Summarise a focus–dilution episode from :func:`key_weights` along time (T, d), (T,).

    Returns ``peak`` (index of the minimum of ``H_u``), ``token`` (the key type whose weight
    gained most from the start to that minimum), ``gain`` (its weight at the minimum / at the
    start), ``kept`` (its weight at the end / at the minimum), and ``H_start``, ``H_min``,
    ``H_end``.
    """
    weight = np.asarray(weight, float)
    H_u = np.asarray(H_u, float)
    if weight.ndim != 2 or H_u.shape != weight.shape[:1]:
        raise ValueError("weight must be (T, d) and H_u (T,)")
    peak = int(np.argmin(H_u))
    token = int(np.argmax(weight[peak] - weight[0]))
    return {
        "peak": peak,
        "token": token,
        "gain": float(weight[peak, token] / weight[0, token]),
        "kept": float(weight[-1, token] / weight[peak, token]),
        "H_start": float(H_u[0]),
        "H_min": float(H_u[peak]),
        "H_end": float(H_u[-1]),
    }


def change_correlation(w_a, w_b) -> np.ndarray:
    """Correlation, time by time, of the changes since the first record of two trajectories of
    attention matrices (T, d, d) (nan at the first record)."""
    a = np.asarray(w_a, float)
    b = np.asarray(w_b, float)
    if a.shape != b.shape or a.ndim < 2:
        raise ValueError("w_a and w_b must be trajectories of the same shape (T, ...)")
    da = (a - a[0]).reshape(len(a), -1)
    db = (b - b[0]).reshape(len(b), -1)
    out = np.full(len(a), np.nan)
    for i in range(1, len(a)):
        out[i] = np.corrcoef(da[i], db[i])[0, 1]
    return out


def window_attention_entropy(params, contexts, *, masked_keys=None) -> np.ndarray:
    r"""Measured position-level attention entropy on actual contexts.

    For each model of ``params`` (weights with a leading model dimension ``E``, or one set) and
    each context of ``contexts`` (``(B, s)`` shared, or ``(E, B, s)``), the entropy
    :math:`-\sum_j a_j\log a_j` of the attention over the ``s`` positions
    (:func:`attnbook.focus.finite_forward`; masked positions take no weight), averaged over the
    contexts that have at least one unmasked key. Returns ``(E,)`` (a float for one set).
    This is the finite-context quantity that :func:`position_entropy` approximates.
    """
    from .model import finite_forward

    with torch.no_grad():
        _, attn = finite_forward(params, contexts, masked_keys=masked_keys)
    attn = attn.double()
    H = linalg.entropy(attn, dim=-1)  # (…, B)
    live = attn.sum(-1) > 0.5  # a context with every key masked has no attention
    out = (H * live).sum(-1) / live.sum(-1).clamp_min(1)
    return out.cpu().numpy() if out.dim() else float(out)


def first_time_below(curves, times, level) -> np.ndarray:
    """First time at which each curve falls below ``level``, or the last time if it never does.

    ``curves`` is ``(time, ...)`` (one column per model or seed), ``times`` the matching 1-D
    grid. Returns an array of the trailing shape. A curve that never gets below ``level`` is
    reported at ``times[-1]``, so statistics over models are lower bounds on the true times.
    """
    y = np.asarray(
        curves.detach().cpu() if hasattr(curves, "detach") else curves, float
    )
    t = np.asarray(times.detach().cpu() if hasattr(times, "detach") else times, float)
    if t.ndim != 1:
        raise ValueError(f"times must be 1-D, got shape {t.shape}")
    if y.ndim < 1 or y.shape[0] != t.shape[0]:
        raise ValueError(
            f"curves must have {t.shape[0]} rows (one per time), got shape {y.shape}"
        )
    if not np.isfinite(float(level)):
        raise ValueError(f"level must be finite, got {level!r}")
    below = y < level
    return np.where(below.any(0), t[below.argmax(0)], t[-1])


def largest_rise(
    curves, times, *, after=-np.inf, until=np.inf
) -> dict[str, np.ndarray]:
    r"""The largest rise of each curve above its own running minimum, between ``after`` and
    ``until``.

    A dilution shows as a rise of the attention entropy after a fall; this finds the largest
    such rise, :math:`\max_{a \le b}\,[y(t_b) - y(t_a)]` over records with
    ``after`` :math:`\le t_a, t_b \le` ``until``. ``curves`` is ``(time, ...)`` (one column
    per model), ``times`` the 1-D grid, ``after`` and ``until`` numbers or arrays of the
    trailing shape (e.g. each model's escape times, so that one dilution is told from the
    next; ``nan`` means the event never came, and gives a ``nan`` result).
    Returns ``rise``, ``t_low`` (where the rise starts) and ``t_high`` (where it peaks), each
    of the trailing shape. A curve that only falls has rise 0.
    """
    y = np.asarray(curves, float)
    t = np.asarray(times, float)
    if t.ndim != 1 or y.ndim < 1 or y.shape[0] != t.shape[0]:
        raise ValueError(
            f"curves must be (time, ...) with {t.shape[0] if t.ndim == 1 else '?'} rows and "
            f"times 1-D; got shapes {y.shape} and {t.shape}"
        )
    if not np.all(np.isfinite(y)):
        raise ValueError(
            "curves must be finite (a diverged run has no entropy to compare)"
        )
    start = np.broadcast_to(np.asarray(after, float), y.shape[1:])
    stop = np.broadcast_to(np.asarray(until, float), y.shape[1:])
    t_col = t.reshape((-1,) + (1,) * (y.ndim - 1))
    before = (t_col < start) | (t_col > stop)  # records not counted
    y_low = np.where(before, np.inf, y)
    running_min = np.minimum.accumulate(y_low, axis=0)
    gain = np.where(before, -np.inf, y - running_min)
    high = np.argmax(gain, axis=0)
    rise = np.take_along_axis(gain, high[None], 0)[0]
    low = np.argmax(
        np.where(
            np.arange(len(t)).reshape(before.shape[:1] + (1,) * (y.ndim - 1)) <= high,
            -y_low,
            -np.inf,
        ),
        axis=0,
    )
    never = np.isnan(start) | np.isnan(stop) | ~np.isfinite(rise)
    return {
        "rise": np.where(never, np.nan, np.maximum(rise, 0.0)),
        "t_low": np.where(never, np.nan, t[low]),
        "t_high": np.where(never, np.nan, t[high]),
    }
