"""Interactive explorers used in the chapters.

The ipywidgets explorers need a live kernel (Colab, a local Jupyter). For the published HTML,
:func:`frame_slider` draws an explorer's figure at every setting of its sliders when the
chapter is executed and shows the frames behind plain HTML range sliders with a few lines of
JavaScript: it moves on a static page, with no kernel.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import uuid

import matplotlib.pyplot as plt
import torch

from .attention import KINDS, attention_weights, example_tokens, row_entropy
from .plotting import KIND_LABELS, to_numpy

__all__ = ["attention_explorer", "attention_figure", "frame_slider", "FrameSlider"]


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
            attention_figure(x, kind=kind.value, beta=beta.value, causal=causal.value)
            plt.show()

    for w in (kind, beta, causal):
        w.observe(draw, names="value")
    draw()
    return W.VBox([W.HBox([kind, beta, causal]), out])


def attention_figure(tokens, *, kind: str = "softmax", beta: float = 1.0, causal=False):
    """The explorers' view of one setting: the token cloud and its attention map at inverse
    temperature ``beta`` (queries and keys are the tokens scaled by √β). Returns the figure."""
    x = torch.as_tensor(tokens, dtype=torch.float64)
    if x.dim() != 2 or x.shape[1] != 2:
        raise ValueError(f"tokens must have shape (n, 2), got {tuple(x.shape)}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    q = x * (float(beta) ** 0.5)
    P = attention_weights(q, q, kind=kind, causal=causal)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(7.5, 3.4))
    ax0.scatter(*to_numpy(x).T, c=range(len(x)), cmap="coolwarm")
    for i, (a, c) in enumerate(to_numpy(x)):
        ax0.annotate(str(i), (a, c), fontsize=7)
    ax0.set_title("tokens")
    im = ax1.imshow(to_numpy(P), cmap="viridis")
    fig.colorbar(im, ax=ax1, shrink=0.8)
    title = f"{KIND_LABELS[kind]}, β = {beta:.2g}"
    if kind not in ("linear", "sigmoid"):
        title += f", mean row entropy {float(row_entropy(P).mean()):.2f}"
    ax1.set_title(title)
    ax1.grid(False)
    return fig


#: the frames' player: the slider positions pick a frame (the first axis outermost)
_FRAMES_JS = """(() => {
  const root = document.getElementById(__ROOT__);
  const data = JSON.parse(root.querySelector("script[type='application/json']").textContent);
  const img = root.querySelector("img");
  const inputs = [...root.querySelectorAll("input[type=range]")];
  const show = () => {
    let i = 0;
    inputs.forEach((el, k) => {
      i = i * data.sizes[k] + Number(el.value);
      el.nextElementSibling.textContent = data.labels[k][Number(el.value)];
    });
    img.src = "data:image/png;base64," + data.frames[i];
    img.dataset.frame = i;
  };
  inputs.forEach((el) => el.addEventListener("input", show));
})();"""


class FrameSlider:
    """Pre-rendered frames of an explorer behind HTML range sliders (:func:`frame_slider`)."""

    def __init__(self, axes: dict, frames: list, title: str, start: list):
        self.axes, self.frames, self.title, self.start = axes, frames, title, start

    def _repr_html_(self) -> str:
        uid = "attnbook-frames-" + uuid.uuid4().hex[:10]
        names = list(self.axes)
        sliders = "".join(
            f'<label>{html.escape(name)} <input type="range" min="0" '
            f'max="{len(values) - 1}" step="1" value="{self.start[k]}" data-axis="{k}">'
            f" <output>{html.escape(values[self.start[k]])}</output></label>"
            for k, (name, values) in enumerate(self.axes.items())
        )
        index = 0
        for k, name in enumerate(names):
            index = index * len(self.axes[name]) + self.start[k]
        sizes = [len(v) for v in self.axes.values()]
        labels = [list(v) for v in self.axes.values()]
        data = json.dumps({"frames": self.frames, "sizes": sizes, "labels": labels})
        script = _FRAMES_JS.replace("__ROOT__", json.dumps(uid))
        return (
            f'<div class="attnbook-frames" id="{uid}">'
            f'<div class="attnbook-frames-controls">{sliders}</div>'
            f'<img alt="{html.escape(self.title)}" data-frame="{index}" '
            f'style="max-width:100%;height:auto" '
            f'src="data:image/png;base64,{self.frames[index]}">'
            f'<script type="application/json">{html.escape(data, quote=False)}</script>'
            f"<script>{script}</script></div>"
        )

    def __repr__(self) -> str:
        dims = " x ".join(f"{k} ({len(v)})" for k, v in self.axes.items())
        return f"FrameSlider({self.title!r}: {len(self.frames)} frames over {dims})"


def frame_slider(
    draw, axes: dict, *, start: dict | None = None, title: str = "", dpi=110
):
    """An explorer that moves without a kernel: ``draw(*setting)`` returns a Matplotlib figure
    for one setting (one value per axis, in the order of ``axes``); it is called for every
    combination of ``axes`` (a slider's label → its list of values, the first axis outermost)
    and each figure is kept as a PNG. The result
    shows the frames behind range sliders in any browser (a static HTML page included).

    ``start``: the setting shown first (name → one of its values; default the first values).
    ``dpi``: the frames' resolution (the page scales them to its width).
    """
    if not callable(draw):
        raise TypeError("draw must be a callable returning a Matplotlib figure")
    if not isinstance(axes, dict) or not axes:
        raise ValueError("axes must be a non-empty dict: slider name -> list of values")
    for name, values in axes.items():
        if (
            not isinstance(name, str)
            or not isinstance(values, (list, tuple))
            or not values
        ):
            raise ValueError(f"axes[{name!r}] must be a non-empty list of values")
    start = dict(start or {})
    unknown = sorted(set(start) - set(axes))
    if unknown:
        raise ValueError(f"start names axes that do not exist: {unknown}")
    first = []
    for name, values in axes.items():
        value = start.get(name, values[0])
        if value not in values:
            raise ValueError(
                f"start[{name!r}] = {value!r} is not one of {list(values)}"
            )
        first.append(list(values).index(value))
    frames = []
    for combo in itertools.product(*axes.values()):
        fig = draw(*combo)
        if not isinstance(fig, plt.Figure):
            raise TypeError(
                f"draw must return a Matplotlib figure, got {type(fig).__name__}"
            )
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        plt.close(fig)
        frames.append(base64.b64encode(buf.getvalue()).decode("ascii"))
    labels = {
        name: [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
        for name, values in axes.items()
    }
    return FrameSlider(labels, frames, title, first)
