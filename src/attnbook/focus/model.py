r"""The one-layer transformer of Part I on finite contexts, and its (ensemble) training loop.

For a context :math:`x_1, \dots, x_s` (tokens in :math:`[d]`) the model predicts :math:`x_{s+1}`:

.. math::
   e_j = W_0[x_j] \in \mathbb R^m, \qquad
   a_j = \mathrm{softmax}_j\big(e_s^\top W_Q W_K^\top e_j\big), \qquad
   f = \Big(\sum_{j=1}^s a_j e_j\Big)^\top W_1 \in \mathbb R^d,

and the loss is the cross-entropy :math:`-\log\mathrm{softmax}(f)_{x_{s+1}}`. The query is the last
token, and it is also one of the keys. In token space this is :math:`f = \sum_j a_j M_{x_j,:}` with
:math:`a_j\propto e^{\Phi_{x_s x_j}}`, the same :math:`M = W_0W_1`, :math:`\Phi = W_0W_QW_K^\top W_0^\top`
as the population loss of :mod:`attnbook.focus.population`, which is this loss's
:math:`s\to\infty` limit.

An **ensemble** of ``n_models`` independent models (one per seed) lives in one module: every
weight has a leading model dimension and one batched step trains all of them (their losses
are summed, so their gradients do not mix; :func:`train` computes the gradient in closed form,
without autograd). Runs on the GPU when one is present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import attention
from ..device import as_generator, default_dtype, resolve_device
from ..errors import TrainingDiverged
from ..markov import as_stochastic_matrix, stationary
from ..results import load_fields, save_fields
from ..train import descend
from ..validation import check_choice, check_positive, check_positive_int
from .population import Params, check_params, init_params

__all__ = [
    "finite_forward",
    "finite_loss",
    "markov_context_loss",
    "OneLayerTransformer",
    "MarkovWindows",
    "TextWindows",
    "train",
    "TrainResult",
    "TrainingDiverged",
]


def _tokens(tokens, name="tokens", d=None):
    t = torch.as_tensor(tokens) if not isinstance(tokens, torch.Tensor) else tokens
    if t.is_floating_point() or t.dtype == torch.bool:
        raise TypeError(f"{name} must be integer token ids, got dtype {t.dtype}")
    t = t.long()
    if t.dim() < 2:
        raise ValueError(
            f"{name} must have shape (batch, length) or (n_models, batch, length), "
            f"got {tuple(t.shape)}"
        )
    if d is not None and t.numel() and (int(t.min()) < 0 or int(t.max()) >= d):
        raise ValueError(
            f"{name} must lie in [0, {d}), found [{int(t.min())}, {int(t.max())}]"
        )
    return t


def finite_forward(params: Params, context, *, masked_keys=None):
    r"""Logits for the token after each context, and the attention weights.

    ``params`` are the four matrices with an optional leading model dimension ``E``;
    ``context`` has shape ``(B, s)`` (shared by all models) or ``(E, B, s)``. Returns
    ``(logits, attention)`` of shapes ``(E, B, d)`` and ``(E, B, s)`` (``E`` dropped if the
    parameters had none). ``masked_keys`` (bool, (d,)) removes token types from the keys; a
    context whose keys are all masked gets zero attention output (uniform prediction).
    """
    p = check_params(*params)
    single = p.W0.dim() == 2
    if single:
        p = Params(*(x.unsqueeze(0) for x in p))
    if p.W0.dim() != 3:
        raise ValueError("params must have at most one leading (model) dimension")
    E, d, m = p.W0.shape
    x = _tokens(context, "context", d).to(p.W0.device)
    if x.dim() == 2:
        x = x.unsqueeze(0).expand(E, *x.shape)
    if x.dim() != 3 or x.shape[0] != E:
        raise ValueError(
            f"context must have shape (B, s) or ({E}, B, s), got {tuple(x.shape)}"
        )
    e_idx = torch.arange(E, device=x.device)[:, None, None]
    emb = p.W0[e_idx, x]  # (E, B, s, m)
    # softmax attention of the shared kernel, query W_K W_Q^T e_s against the keys e_j
    # (one m-vector per window instead of transforming every key by W_K)
    queries = torch.einsum("ebm,emn,ekn->ebk", emb[:, :, -1], p.WQ, p.WK)[:, :, None]
    if masked_keys is None:
        attn = attention.attention_weights(queries, emb, kind="softmax")[:, :, 0]
    else:
        mk = torch.as_tensor(masked_keys, device=x.device)
        if mk.dtype != torch.bool or mk.shape != (d,):
            raise ValueError(f"masked_keys must be a boolean vector of shape ({d},)")
        sc = attention.scores(queries, emb)[:, :, 0]  # e_s^T W_Q W_K^T e_j
        attn = attention.masked_softmax(sc, ~mk[x])  # all keys masked -> no output
    h = torch.einsum("ebs,ebsm->ebm", attn, emb)
    logits = torch.einsum("ebm,emd->ebd", h, p.W1)
    if single:
        return logits[0], attn[0]
    return logits, attn


def finite_loss(params: Params, windows, *, masked_keys=None) -> torch.Tensor:
    """Mean next-token cross-entropy over windows ``(…, B, s+1)`` (context = first s tokens,
    target = the last), one value per model."""
    w = _tokens(windows, "windows")
    if w.shape[-1] < 2:
        raise ValueError("windows must hold at least a context token and a target")
    logits, _ = finite_forward(params, w[..., :-1], masked_keys=masked_keys)
    target = w[..., -1].to(logits.device)
    if target.dim() < logits.dim() - 1:
        target = target.expand(logits.shape[:-1])
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).mean(-1)


def _losses_from_counts(W0, W1, WQ, WK, counts, q, y, masked_keys=None):
    r"""Per-model mean cross-entropy from key counts (E, B, d), queries and targets (E, B).

    The attention output depends on a context only through its query and the count
    :math:`n_k` of each token type among the keys: :math:`f = \sum_k n_k e^{\Phi_{qk}} M_k /
    \sum_k n_k e^{\Phi_{qk}}`. This is :func:`finite_loss` exactly, at :math:`O(d^2)` per
    window instead of :math:`O(sm)`, and differentiable by autograd; :func:`train` uses its
    hand-derived gradient, :func:`_loss_and_grads`.
    """
    if masked_keys is not None:
        counts = counts.masked_fill(masked_keys, 0.0)
    M = W0 @ W1  # (E, d, d)
    Phi = W0 @ WQ @ WK.transpose(-1, -2) @ W0.transpose(-1, -2)  # (E, d, d)
    # (E, B, d): row q of Phi, the scores of the query against every type
    phi_q = Phi.gather(1, q[..., None].expand(*q.shape, Phi.shape[-1]))
    # softmax over the key types weighted by their counts; no key at all: no output
    present = counts > 0
    log_n = torch.where(present, counts, 1.0).log()
    w = attention.masked_softmax(phi_q + log_n, present)
    logits = w @ M  # (E, B, d)
    lse = torch.logsumexp(logits, -1)
    return (lse - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)).mean(-1)


def _loss_and_grads(W0, W1, WQ, WK, log_counts, q, y, masked_keys=None):
    r"""Per-model loss and the exact gradient of their sum, without autograd (training step).

    ``log_counts`` are the logarithms of the key counts (``-inf`` for a type absent from a
    window) with the token axis in the middle, ``(E, d, B)`` (``B`` windows), ``q`` and ``y``
    the queries and targets ``(E, B)``. The loss is
    :func:`_losses_from_counts`'s: with :math:`a = \mathrm{softmax}_k(\Phi_{qk} + \log n_k)`,
    :math:`f = a^\top M`, :math:`L = \mathrm{mean}_b(\log\sum_j e^{f_j} - f_y)`. Its
    gradient, with :math:`g = (\mathrm{softmax}(f) - e_y)/B`:
    :math:`\partial M = \sum_b a g^\top`, :math:`\partial\Phi_{q,:} = \sum_{b: q_b = q}
    a\odot(Mg - a^\top M g)`, then the chain rule through :math:`M = W_0W_1` and
    :math:`\Phi = W_0 W_Q W_K^\top W_0^\top`. Returns ``(losses (E,), (dW0, dW1, dWQ, dWK))``;
    ``tests/test_focus_model.py`` checks it against autograd. The token axis in the middle
    keeps every reduction over the d types a vectorised one over the windows.
    """
    E, d, B = log_counts.shape
    W0T, WKT = W0.transpose(1, 2), WK.transpose(1, 2)
    A = WQ @ WKT  # (E, m, m)
    W0A = W0 @ A
    PhiT = W0 @ W0A.transpose(1, 2)  # PhiT[e, k, q] = Phi[e, q, k]
    M = W0 @ W1
    qx = q[:, None, :].expand(E, d, B)
    s = PhiT.gather(2, qx)  # (E, d, B): the query's scores against every type
    # the attention mass of each key type; all keys masked -> no output
    visible = None if masked_keys is None else ~masked_keys[:, None]
    a = attention.masked_softmax(s.add_(log_counts), visible, dim=1)
    f = M.transpose(1, 2) @ a  # logits (E, d, B)
    logp = torch.log_softmax(f, 1)
    yi = y[:, None, :]
    losses = logp.gather(1, yi).mean((1, 2)).neg_()
    g = logp.exp_().scatter_add_(1, yi, torch.full_like(yi, -1, dtype=f.dtype))
    GM = (a @ g.transpose(1, 2)).div_(B)  # dL/dM
    ds = torch.ops.aten._softmax_backward_data(M @ g, a, 1, a.dtype)  # dL/ds (times B)
    GPhiT = torch.zeros_like(PhiT).scatter_add_(2, qx, ds).div_(B)  # dL/dPhi^T
    GPW0 = GPhiT.transpose(1, 2) @ W0
    dW0 = GM @ W1.transpose(1, 2) + GPW0 @ A.transpose(1, 2) + GPhiT @ W0A
    dA = W0T @ GPW0
    return losses, (dW0, W0T @ GM, dA @ WK, dA.transpose(1, 2) @ WQ)


def markov_context_loss(
    params: Params, contexts, P, *, masked_keys=None
) -> torch.Tensor:
    r"""Finite-context loss on Markov data, with two exact averages to cut the sampling noise.

    For sampled contexts ``(…, N, s)`` the next token is averaged out exactly,
    :math:`c_n = -\sum_j P_{x^n_s j}\log\mathrm{softmax}(f^n)_j`, and the query types are
    re-weighted to their stationary law (stratification):
    :math:`\hat L = \sum_q \pi_q\,\mathrm{mean}\{c_n : x^n_s = q\}`. This has the same limit as
    :func:`finite_loss` on windows of the chain but a much smaller variance, so the finite-``s``
    bias is visible with few samples. Every token type must occur as a query (``ValueError``
    otherwise: sample more contexts).
    """
    x = _tokens(contexts, "contexts")
    logits, _ = finite_forward(params, x, masked_keys=masked_keys)
    Pt = as_stochastic_matrix(P, "P")
    d = logits.shape[-1]
    if Pt.shape[-1] != d:
        raise ValueError(f"P must be {d}x{d}, got {tuple(Pt.shape)}")
    pi = stationary(Pt).to(logits.device, logits.dtype)
    Pt = Pt.to(logits.device, logits.dtype)
    q = x[..., -1].to(logits.device)
    if q.dim() < logits.dim() - 1:
        q = q.expand(logits.shape[:-1])
    ce = -(Pt[q] * torch.log_softmax(logits, dim=-1)).sum(-1)  # (…, N)
    onehot = torch.nn.functional.one_hot(q, d).to(ce.dtype)  # (…, N, d)
    counts = onehot.sum(-2)
    if bool((counts == 0).any()):
        raise ValueError(
            "some token type never occurs as the last token of a context: "
            "sample more contexts"
        )
    per_query = (onehot * ce[..., None]).sum(-2) / counts  # (…, d)
    return (per_query * pi).sum(-1)


class OneLayerTransformer(torch.nn.Module):
    r"""An ensemble of ``n_models`` one-layer transformers (weights ``(n_models, …)``).

    Initialised :math:`\mathcal N(0,\varepsilon^2)` from ``seed`` (int, ``torch.Generator`` or
    ``None`` = torch's global generator); ``forward(context)`` returns
    logits ``(n_models, B, d)``. ``params()`` gives detached copies as :class:`Params`.
    ``dtype``: float64 unless asked (``torch.float32`` halves the cost on a GPU);
    ``device``: :func:`attnbook.device.default_device`.
    """

    def __init__(
        self,
        d: int,
        m: int,
        *,
        n_models: int = 1,
        eps: float = 1e-3,
        seed: int | torch.Generator | None = None,
        dtype=None,
        device=None,
        masked_keys=None,
    ):
        super().__init__()
        dev = resolve_device(device)
        dtype = default_dtype(dtype)
        p = init_params(
            d,
            m,
            eps=eps,
            n_models=n_models,
            seed=seed,
            dtype=torch.float64,
            device="cpu",
        )
        self.W0, self.W1, self.WQ, self.WK = (
            torch.nn.Parameter(x.to(dev, dtype)) for x in p
        )
        self.d, self.m, self.n_models = d, m, n_models
        mk = None
        if masked_keys is not None:
            mk = torch.as_tensor(masked_keys)
            if mk.dtype != torch.bool or mk.shape != (d,):
                raise ValueError(
                    f"masked_keys must be a boolean vector of shape ({d},)"
                )
            mk = mk.to(dev)
        self.masked_keys = mk

    def params(self) -> Params:
        return Params(
            *(x.detach().clone() for x in (self.W0, self.W1, self.WQ, self.WK))
        )

    def forward(self, context):
        return finite_forward(
            Params(self.W0, self.W1, self.WQ, self.WK),
            context,
            masked_keys=self.masked_keys,
        )

    def loss(self, windows) -> torch.Tensor:
        """Per-model mean cross-entropy on ``windows`` (…, B, s+1)."""
        return finite_loss(
            Params(self.W0, self.W1, self.WQ, self.WK),
            windows,
            masked_keys=self.masked_keys,
        )


class _Windows:
    """Shared set-up of the window samplers: ``source`` (a chain or a token stream) first, then
    the keyword-only options ``batch``, ``context``, ``n_models``, ``seed``, ``device``."""

    def __init__(
        self,
        source,
        *,
        batch: int,
        context: int,
        n_models: int = 1,
        seed: int | torch.Generator | None = None,
        device=None,
    ):
        self.batch = check_positive_int(batch, "batch")
        self.context = check_positive_int(context, "context")
        self.n_models = check_positive_int(n_models, "n_models")
        self.device = resolve_device(device)
        self._prepare(source)
        self.gen = as_generator(seed, self.device)

    def _prepare(self, source) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def _alias_tables(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker–Vose alias tables of each row of ``probs`` (rows sum to one): a draw is
    ``j = floor(K u)``, kept if the fractional part of ``K u`` is below ``accept[j]``,
    else ``alias[j]``."""
    n_rows, K = probs.shape
    accept = np.ones((n_rows, K))
    alias = np.tile(np.arange(K), (n_rows, 1))
    for r in range(n_rows):
        q = probs[r] * K
        small = [j for j in range(K) if q[j] < 1.0]
        large = [j for j in range(K) if q[j] >= 1.0]
        while small and large:
            j, g = small.pop(), large.pop()
            accept[r, j], alias[r, j] = q[j], g
            q[g] -= 1.0 - q[j]
            (small if q[g] < 1.0 else large).append(g)
    return accept, alias


_ALIAS_CACHE: dict = {}
_PATH_CACHE: dict = {}


def _path_tables(d: int, k: int, context: int, device) -> dict:
    """The per-path tables of :class:`MarkovWindows`, as its attributes (shared by every
    sampler with the same ``d``, block ``k``, context length and device)."""
    codes = torch.arange(d**k)
    digits = [(codes // d ** (k - 1 - i)) % d for i in range(k)]
    paths = torch.stack(digits, -1).to(device)  # code -> its k tokens
    last = digits[-1].to(device)  # code -> its last token
    # code -> the count of each token type among its first k-1 tokens (the last one of
    # the final block is the target, not a key)
    head = torch.nn.functional.one_hot(paths[:, :-1], d).sum(1).to(torch.float64)
    onehot = torch.eye(d, dtype=torch.float64, device=device)
    block = head + onehot[last]
    t = dict(
        _paths=paths,
        _last=last,
        _head_counts=head,
        _last_onehot=onehot,
        _block_counts=block,
        _prev=(paths[:, -2] if k > 1 else paths[:, -1]).contiguous(),
        _packed=None,
    )
    # a window's key counts as one int64: the count of type t in bits [t·b, (t+1)·b),
    # b bits holding any count up to the context length (exact integer sums)
    bits = context.bit_length()
    if d * bits <= 62:
        shifts = torch.arange(d, device=device) * bits
        t["_field_mask"] = (1 << bits) - 1
        t["_packed"] = (
            shifts,
            *((c.long() << shifts).sum(-1) for c in (onehot, head, block)),
        )
    return t


class MarkovWindows(_Windows):
    """Fresh Markov windows each step: ``(n_models, batch, context+1)``, each model its own
    stream, drawn from one generator (stationary start, so each window is stationary).

    ``MarkovWindows(P, *, batch, context, n_models=1, seed=None, device=None)``.

    All windows of all models come from one vectorised draw: the chain advances ``k`` tokens
    at a time, drawing one of the ``d**k`` paths of length ``k`` from the current token with
    Walker's alias method (O(1) per draw), so a window of ``s+1`` tokens costs
    ``ceil(s/k)`` small kernels and no Python work per window.
    """

    max_block_paths = 4096  # largest table d**k of k-token paths

    def _prepare(self, P) -> None:
        P = as_stochastic_matrix(P, "P")
        if P.dim() != 2:
            raise ValueError("P must be one d×d chain")
        self.P = P.to(self.device)
        d = P.shape[-1]
        k = 1
        for j in range(1, self.context + 1):  # the longest block that tiles the context
            if d**j > self.max_block_paths:
                break
            if self.context % j == 0:
                k = j
        self.block, self._n_paths = k, d**k
        key = (P.numpy().tobytes(), k)
        if key not in _ALIAS_CACHE:
            # T[x, path] = P[x, c1] P[c1, c2] ... P[c_{k-1}, c_k]; the path's last token is
            # its code mod d (lexicographic order, last token least significant)
            T = P.clone()
            for _ in range(k - 1):
                T = (T[:, :, None] * P[torch.arange(T.shape[1]) % d][None]).reshape(
                    d, -1
                )
            rows = np.concatenate([stationary(P).numpy()[None], np.zeros((1, 0))], 1)
            acc_pi, ali_pi = _alias_tables(rows)
            acc, ali = _alias_tables((T / T.sum(-1, keepdim=True)).numpy())
            _ALIAS_CACHE[key] = (acc, ali, acc_pi[0], ali_pi[0])
        acc, ali, acc_pi, ali_pi = _ALIAS_CACHE[key]
        self._accept = torch.as_tensor(acc.reshape(-1), device=self.device)
        self._alias = torch.as_tensor(ali.reshape(-1), device=self.device)
        self._accept_pi = torch.as_tensor(acc_pi, device=self.device)
        self._alias_pi = torch.as_tensor(ali_pi, device=self.device)
        key = (d, k, self.context.bit_length(), str(self.device))
        if key not in _PATH_CACHE:  # the tables of the paths: O(d**k) work, done once
            _PATH_CACHE[key] = _path_tables(d, k, self.context, self.device)
        for name, value in _PATH_CACHE[key].items():
            setattr(self, name, value)
        self._tables = {}
        self._buffers = None
        self._numpy = self.device.type == "cpu"  # else the same steps in torch

    def _codes(self):
        n = self.n_models * self.batch
        k, K = self.block, self._n_paths
        d = self._accept_pi.shape[0]
        n_blocks = self.context // k
        if self._buffers is None:
            # reused every call: arrays this size would be fresh pages from the allocator
            f64 = torch.empty(
                3, 1 + n_blocks, n, dtype=torch.float64, device=self.device
            )
            i64 = torch.empty(2, n_blocks, n, dtype=torch.long, device=self.device)
            u, uK, frac, jK, codes = f64[0], f64[1, 1:], f64[2, 1:], i64[0], i64[1]
            rows = list(zip(jK.unbind(0), frac.unbind(0), codes.unbind(0)))
            self._buffers = (u, uK, frac, jK, codes, rows)
            if self._numpy:  # NumPy views of the same memory
                self._np_rows = [tuple(t.numpy() for t in r) for r in rows]
                self._np_bufs = tuple(t.numpy() for t in (u, uK, frac, jK))
                self._np_tables = tuple(
                    t.numpy() for t in (self._accept, self._alias, self._last * K)
                )
                self._np_pi = (self._accept_pi.numpy(), self._alias_pi.numpy())
                # per-block scratch: the table index, threshold, test and row offset
                self._np_scratch = (
                    np.empty(n, dtype=np.intp),
                    np.empty(n),
                    np.empty(n, dtype=bool),
                    np.empty(n, dtype=np.intp),
                )
        u, uK, frac, jK, codes, rows = self._buffers
        torch.rand(u.shape, generator=self.gen, dtype=torch.float64, out=u)
        if self._numpy:  # the same steps in NumPy: far less per-call cost
            return self._codes_numpy(d, K), codes
        ud = u[0] * d
        j = ud.long()  # u < 1, so floor(d u) < d: no clamp needed
        x = torch.where(ud.sub_(j) < self._accept_pi.take(j), j, self._alias_pi.take(j))
        first = x
        torch.mul(u[1:], K, out=uK)
        jK.copy_(uK)  # floor(K u): uK >= 0, so truncation is the floor
        torch.frac(uK, out=frac)  # uK - floor(uK), the same rounding as the subtraction
        for jb, fb, out in rows:  # views of the buffers' rows, made once
            idx = jb.add(x, alpha=K)  # row x of the alias tables, column jb
            torch.where(fb < self._accept.take(idx), jb, self._alias.take(idx), out=out)
            x = self._last.take(out)
        return first, codes

    def _codes_numpy(self, d, K):
        """:meth:`_codes`'s steps after the uniforms, in NumPy on the CPU (the same values)."""
        u, uK, frac, jK = self._np_bufs
        acc_pi, ali_pi = self._np_pi
        ud = u[0] * d
        j = ud.astype(np.intp)  # u < 1, so floor(d u) < d
        # (indices are in range: mode="wrap" only skips numpy's bounds checks)
        x = np.where(
            ud - j < acc_pi.take(j, mode="wrap"), j, ali_pi.take(j, mode="wrap")
        )
        np.multiply(u[1:], K, out=uK)
        np.copyto(
            jK, uK, casting="unsafe"
        )  # floor(K u): uK >= 0, truncation is the floor
        np.subtract(uK, jK, out=frac)  # exact: uK - floor(uK)
        acc, ali, last_K = self._np_tables
        idx, thr, keep, row = self._np_scratch
        np.multiply(x, K, out=row)  # row x of the alias tables starts at x K
        for jb, fb, out in self._np_rows:
            np.add(jb, row, out=idx)  # row x, column jb
            ali.take(idx, out=out, mode="wrap")
            acc.take(idx, out=thr, mode="wrap")
            np.less(fb, thr, out=keep)
            np.copyto(out, jb, where=keep)
            last_K.take(
                out, out=row, mode="wrap"
            )  # the next row: the path's last token
        return torch.from_numpy(x)

    def __call__(self, step: int) -> torch.Tensor:
        first, codes = self._codes()
        n = first.shape[0]
        toks = self._paths[codes.t()].reshape(n, -1)  # (n, blocks·k)
        w = torch.cat([first[:, None], toks], dim=1)
        return w.reshape(self.n_models, self.batch, self.context + 1)

    def sample_counts(self, step: int, dtype=None):
        """A fresh batch as ``(counts, query, target)``: for each window, the count of each
        token type among its ``context`` keys ``(n_models, batch, d)``, its query (last
        context token) and its target, without building the windows. Same law (and the same
        draws) as ``self(step)``; :func:`train` uses it. ``dtype``: float64 unless asked."""
        counts, query, target = self._counts_by_type(default_dtype(dtype))
        return counts.transpose(1, 2), query, target

    def _log_table(self, dtype):
        """log n for n = 0, ..., context (float64's, rounded to ``dtype``)."""
        if ("log", dtype) not in self._tables:
            n = torch.arange(self.context + 1, dtype=torch.float64)
            self._tables["log", dtype] = n.log().to(self.device, dtype)
        return self._tables["log", dtype]

    def _counts_numpy(self, first, codes, dtype, log):
        """:meth:`_counts_by_type` from packed counts, in NumPy on the CPU (the same values)."""
        if "np" not in self._tables:
            self._tables["np"] = tuple(
                t.numpy() for t in (*self._packed, self._prev, self._last)
            )
        shifts, p_first, p_head, p_block, prev, last = self._tables["np"]
        w = "wrap"  # indices are in range: "wrap" only skips numpy's bounds checks
        packed = p_first.take(first, mode=w) + p_head.take(codes[-1], mode=w)
        if len(codes) > 1:  # every block but the last: all k tokens are keys
            packed += p_block.take(codes[:-1], mode=w).sum(0)
        E, B = self.n_models, self.batch
        c = (packed.reshape(E, 1, B) >> shifts[:, None]) & self._field_mask
        if log:
            counts = torch.from_numpy(self._log_table(dtype).numpy().take(c, mode=w))
        else:
            counts = torch.from_numpy(c).to(dtype)
        if self.block > 1:
            query = prev.take(codes[-1], mode=w)
        else:
            query = last.take(codes[-2], mode=w) if len(codes) > 1 else first
        target = last.take(codes[-1], mode=w)
        return (
            counts,
            torch.from_numpy(query).reshape(E, B),
            torch.from_numpy(target).reshape(E, B),
        )

    def _query_tokens(self, first, codes):
        """The last context token of every window (the query), from the block codes."""
        if self.block == 1 and len(codes) > 1:
            return self._last.take(codes[-2])
        if self.block == 1:
            return first
        return self._prev.take(codes[-1])

    def _counts_by_type(self, dtype, *, log=False):
        """:meth:`sample_counts` with the token axis in the middle: counts ``(E, d, B)``, or
        with ``log`` their logarithms (``-inf`` for an absent type, as float64's log rounded
        to ``dtype``, looked up in a table)."""
        first, codes = self._codes()
        if self._packed is not None and self._numpy:
            return self._counts_numpy(first.numpy(), codes.numpy(), dtype, log)
        tdt = torch.float64 if log else dtype
        if tdt not in self._tables:
            self._tables[tdt] = (
                self._head_counts.to(tdt),
                self._last_onehot.to(tdt),
                self._block_counts.to(tdt),
            )
        head, onehot, block = self._tables[tdt]
        d = onehot.shape[0]
        if self._packed is not None:  # integer counts packed in one int64 per window
            shifts, p_first, p_head, p_block = self._packed
            packed = p_first.take(first) + p_head.take(codes[-1])
            if len(codes) > 1:  # every block but the last: all k tokens are keys
                packed += p_block.take(codes[:-1]).sum(0)
            counts = packed.view(self.n_models, 1, self.batch) >> shifts[:, None]
            counts = counts.bitwise_and_(self._field_mask)
            if log:
                counts = self._log_table(dtype).take(counts)
        else:
            counts = onehot.index_select(0, first) + head.index_select(0, codes[-1])
            if len(codes) > 1:
                inner = codes[:-1].reshape(-1)
                counts = counts + block.index_select(0, inner).view(
                    -1, *counts.shape
                ).sum(0)
        query = self._query_tokens(first, codes)
        target = self._last.take(codes[-1])
        shape = (self.n_models, self.batch)
        if self._packed is None:
            counts = counts.view(*shape, d).transpose(1, 2)
            if log:
                counts = counts.log()
        return (
            counts.to(dtype, memory_format=torch.contiguous_format),
            query.reshape(shape),
            target.reshape(shape),
        )


class TextWindows(_Windows):
    """Random windows of ``context+1`` consecutive ids of a token stream,
    ``(n_models, batch, context+1)``.

    ``TextWindows(ids, *, batch, context, n_models=1, seed=None, device=None)``.
    """

    def _prepare(self, ids) -> None:
        t = _tokens(torch.as_tensor(ids).reshape(1, -1), "ids")[0]
        if t.numel() < self.context + 2:
            raise ValueError(
                f"ids must hold more than context+1 = {self.context + 1} tokens"
            )
        self.ids = t.to(self.device)
        self.offsets = torch.arange(self.context + 1, device=self.device)

    def __call__(self, step: int) -> torch.Tensor:
        n = self.ids.numel() - self.context - 1
        start = torch.randint(
            0, n, (self.n_models, self.batch, 1), generator=self.gen, device=self.device
        )
        return self.ids[start + self.offsets]


@dataclass
class TrainResult:
    """Recorded training: ``step`` (R,), ``loss`` (R, E) batch loss averaged since the previous
    record, and the weights (R, E, …) at each recorded step. Flow time is ``step * lr``."""

    step: np.ndarray
    loss: np.ndarray
    W0: np.ndarray
    W1: np.ndarray
    WQ: np.ndarray
    WK: np.ndarray
    lr: float
    wall_s: float = 0.0
    info: dict = field(default_factory=dict)

    @property
    def t(self) -> np.ndarray:
        return self.step * self.lr

    def save(self, path) -> Path:
        return save_fields(self, path)

    @classmethod
    def load(cls, path) -> TrainResult:
        kw, info = load_fields(cls, path)
        kw["lr"] = float(kw["lr"])
        kw["wall_s"] = float(kw.get("wall_s", 0.0))
        return cls(info=info, **kw)


def train(
    model: OneLayerTransformer,
    sampler,
    *,
    n_steps: int,
    lr: float,
    optimizer: str = "sgd",
    record_every: int = 10,
    record_steps=None,
    progress: bool = True,
) -> TrainResult:
    r"""Train every model of the ensemble at once on batches from ``sampler(step)``.

    ``optimizer`` is ``"sgd"`` (plain, the Euler scheme of the gradient flow, flow time
    :math:`t = \eta k`) or ``"adam"``: the package's one training loop,
    :func:`attnbook.train.descend`. The sum of the per-model losses is minimised, so each
    model gets exactly its own gradient, computed in closed form from the windows' key counts
    (no autograd graph; equal to autograd's to round-off). Weights are recorded every
    ``record_every`` steps (or at ``record_steps``), with the mean batch loss since the
    previous record. Raises :class:`TrainingDiverged` on a non-finite loss (checked at the
    recorded steps only: the one host synchronisation of a GPU run).
    """
    if not isinstance(model, OneLayerTransformer):
        raise TypeError("model must be a OneLayerTransformer")
    steps = check_positive_int(n_steps, "n_steps")
    lr = check_positive(lr, "lr")
    optimizer = check_choice(optimizer, "optimizer", ("sgd", "adam"))
    if record_steps is None:
        record_every = check_positive_int(record_every, "record_every")
        record_steps = sorted(set(range(0, steps + 1, record_every)) | {steps})
    batches = _key_counts(model, sampler)
    mk = model.masked_keys

    def loss_and_grads(k, weights):
        # the loss and its exact gradient in one pass (no autograd graph: _loss_and_grads)
        return _loss_and_grads(*weights, *batches(k), mk)

    def diverged(k, bad, run):
        return TrainingDiverged(
            f"training loss became non-finite by step {k} (lr = {lr})",
            time=k,
            partial=[[x.cpu().double().numpy() for x in r] for r in run.params],
            times=run.steps,
        )

    run = descend(
        loss_and_grads,
        [x.detach() for x in (model.W0, model.W1, model.WQ, model.WK)],
        n_steps=steps,
        optimizer=optimizer,
        lr=lr,
        record_steps=record_steps,
        average=True,
        check="recorded",
        diverged=diverged,
        keep_params=True,
        progress=progress,
        desc=f"training {model.n_models} model(s)",
    )
    W = [
        torch.stack([r[i] for r in run.params]).cpu().double().numpy() for i in range(4)
    ]
    info = {"optimizer": optimizer, "device": str(model.W0.device)}
    if model.masked_keys is not None:
        info["masked_keys"] = model.masked_keys.cpu().numpy()
    return TrainResult(
        step=run.steps,
        loss=run.loss.cpu().double().numpy(),
        W0=W[0],
        W1=W[1],
        WQ=W[2],
        WK=W[3],
        lr=lr,
        wall_s=run.wall_s,
        info=info,
    )


def _key_counts(model: OneLayerTransformer, sampler):
    """``k -> (log key counts (E, d, B), queries, targets)`` of the sampler's step-``k``
    batch: Markov windows straight to counts (no window is built), else windows counted."""
    if isinstance(sampler, MarkovWindows) and sampler.P.shape[-1] != model.d:
        raise ValueError(
            f"the sampler's chain has {sampler.P.shape[-1]} tokens, model d = {model.d}"
        )
    if isinstance(sampler, MarkovWindows) and sampler.n_models == model.n_models:
        return lambda k: sampler._counts_by_type(model.W0.dtype, log=True)

    def from_windows(k):
        batch = sampler(k)
        if k == 0:  # validate the sampler's output once; later steps trust it
            batch = _tokens(batch, "sampler output", model.d).to(model.W0.device)
        if batch.dim() == 2:
            batch = batch.unsqueeze(0).expand(model.n_models, *batch.shape)
        ctx = batch[..., :-1]
        counts = torch.zeros(*ctx.shape[:-1], model.d, dtype=model.W0.dtype)
        counts = counts.to(model.W0.device).scatter_add_(
            -1, ctx, torch.ones_like(ctx, dtype=counts.dtype)
        )
        return counts.transpose(1, 2).log(), ctx[..., -1], batch[..., -1]

    return from_windows
