"""Interactive explorers (ipywidgets) used in the chapters.

Widgets need a live kernel; every chapter that shows one also draws a static figure of the
same thing, so the HTML book reads well without one.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from .attention import KINDS, attention_weights, example_tokens, row_entropy
from .plotting import KIND_LABELS, to_numpy

__all__ = ["attention_explorer"]


def attention_explorer(tokens=None, *, n: int = 12, seed=None):
    """Sliders for the attention map of a token cloud: kind, inverse temperature, causal mask.

    ``tokens`` is an ``(n, 2)`` cloud (default :func:`attnbook.attention.example_tokens`
    drawn with ``seed``: an int, a ``torch.Generator`` or ``None``, torch's global generator).
    Queries and keys are the tokens scaled by the inverse temperature β. Returns the widget.
    """
    import ipywidgets as W

    x = (
        example_tokens(n, 2, seed=seed)
        if tokens is None
        else torch.as_tensor(tokens, dtype=torch.float64)
    )
    if x.dim() != 2 or x.shape[1] != 2:
        raise ValueError(f"tokens must have shape (n, 2), got {tuple(x.shape)}")

    kind = W.Dropdown(
        options=[(KIND_LABELS[k], k) for k in KINDS],
        value="softmax",
        description="kind",
    )
    beta = W.FloatLogSlider(
        value=1.0, base=10, min=-1.5, max=1.3, step=0.05, description="β"
    )
    causal = W.Checkbox(value=False, description="causal mask")
    out = W.Output()

    def draw(*_):
        with out:
            out.clear_output(wait=True)
            if causal.value and kind.value == "sinkhorn":
                print(
                    "Sinkhorn has no causal version (the only doubly stochastic lower-triangular "
                    "matrix is the identity)."
                )
                return
            b = beta.value
            q = x * (b**0.5)
            P = attention_weights(q, q, kind=kind.value, causal=causal.value)
            fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(7.5, 3.4))
            ax0.scatter(*to_numpy(x).T, c=range(len(x)), cmap="coolwarm")
            for i, (a, c) in enumerate(to_numpy(x)):
                ax0.annotate(str(i), (a, c), fontsize=7)
            ax0.set_title("tokens")
            im = ax1.imshow(to_numpy(P), cmap="viridis")
            fig.colorbar(im, ax=ax1, shrink=0.8)
            title = f"{KIND_LABELS[kind.value]}, β = {b:.2g}"
            if kind.value not in ("linear", "sigmoid"):
                title += f", mean row entropy {float(row_entropy(P).mean()):.2f}"
            ax1.set_title(title)
            ax1.grid(False)
            plt.show()

    for w in (kind, beta, causal):
        w.observe(draw, names="value")
    draw()
    return W.VBox([W.HBox([kind, beta, causal]), out])
