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
weight has a leading model dimension and one batched forward/backward trains all of them
(their losses are summed, so their gradients do not mix). Runs on the GPU when one is present.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import attention
from ..device import as_generator, default_device
from ..errors import TrainingDiverged
from ..markov import as_stochastic_matrix, sample_sequences, stationary
from ..results import load_fields, save_fields
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
        attn = torch.softmax(sc.masked_fill(mk[x], float("-inf")), dim=-1)
        attn = torch.nan_to_num(attn, nan=0.0)  # all keys masked -> no output
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
    """

    def __init__(
        self,
        d: int,
        m: int,
        *,
        n_models: int = 1,
        eps: float = 1e-3,
        seed: int | torch.Generator | None = None,
        dtype=torch.float32,
        device=None,
        masked_keys=None,
    ):
        super().__init__()
        dev = default_device(device)
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
        self.device = default_device(device)
        self._prepare(source)
        self.gen = as_generator(seed, self.device)

    def _prepare(self, source) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class MarkovWindows(_Windows):
    """Fresh Markov windows each step: ``(n_models, batch, context+1)``, each model its own
    stream, drawn from one generator (stationary start, so each window is stationary).

    ``MarkovWindows(P, *, batch, context, n_models=1, seed=None, device=None)``.
    """

    def _prepare(self, P) -> None:
        self.P = as_stochastic_matrix(P, "P").to(self.device)

    def __call__(self, step: int) -> torch.Tensor:
        x = sample_sequences(
            self.P, self.n_models * self.batch, self.context + 1, seed=self.gen
        )
        return x.reshape(self.n_models, self.batch, self.context + 1)


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
    :math:`t = \eta k`) or ``"adam"``. The sum of the per-model losses is minimised, so each
    model gets exactly its own gradient. Weights are recorded every ``record_every`` steps (or
    at ``record_steps``). Raises :class:`TrainingDiverged` on a non-finite loss.
    """
    if not isinstance(model, OneLayerTransformer):
        raise TypeError("model must be a OneLayerTransformer")
    steps = check_positive_int(n_steps, "n_steps")
    lr = check_positive(lr, "lr")
    optimizer = check_choice(optimizer, "optimizer", ("sgd", "adam"))
    if record_steps is None:
        record_every = check_positive_int(record_every, "record_every")
        record = set(range(0, steps + 1, record_every)) | {steps}
    else:
        record = {int(s) for s in np.asarray(record_steps).ravel()}
        if min(record) < 0 or max(record) > steps:
            raise ValueError(f"record_steps must lie in [0, {steps}]")
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(
        model.parameters(), lr=lr
    )
    rec_step, rec_loss, rec_w = [], [], []
    running = torch.zeros(model.n_models, dtype=torch.float64, device=model.W0.device)
    n_run = 0
    it = range(steps + 1)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"training {model.n_models} model(s)", leave=False)
    t0 = time.perf_counter()
    for k in it:
        batch = sampler(k)
        losses = model.loss(batch)
        running += losses.detach().double()
        n_run += 1
        if k in record:
            if not bool(torch.isfinite(running).all()):
                raise TrainingDiverged(
                    f"training loss became non-finite by step {k} (lr = {lr})",
                    time=k,
                    partial=rec_w,
                    times=np.array(rec_step),
                )
            rec_step.append(k)
            rec_loss.append((running / n_run).cpu().numpy())
            rec_w.append(
                [x.detach().cpu().double().numpy().copy() for x in model.params()]
            )
            running.zero_()
            n_run = 0
        if k < steps:
            opt.zero_grad(set_to_none=True)
            losses.sum().backward()
            opt.step()
    wall = time.perf_counter() - t0
    W = [np.stack([r[i] for r in rec_w]) for i in range(4)]
    info = {"optimizer": optimizer, "device": str(model.W0.device)}
    if model.masked_keys is not None:
        info["masked_keys"] = model.masked_keys.cpu().numpy()
    return TrainResult(
        step=np.array(rec_step),
        loss=np.stack(rec_loss),
        W0=W[0],
        W1=W[1],
        WQ=W[2],
        WK=W[3],
        lr=lr,
        wall_s=wall,
        info=info,
    )
