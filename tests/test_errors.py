"""attnbook.errors: one family for divergence and blow-up, carrying the partial result."""

import pytest

from attnbook import errors


@pytest.mark.parametrize(
    "cls",
    [
        errors.TrainingDiverged,
        errors.SamplerDiverged,
        errors.FlowDiverged,
        errors.BlowUpError,
        errors.NotConverged,
        errors.NotPositiveDefinite,
    ],
)
def test_every_divergence_is_a_divergence_error_and_a_floating_point_error(cls):
    assert issubclass(cls, errors.DivergenceError)
    assert issubclass(cls, FloatingPointError)
    with pytest.raises(errors.DivergenceError, match="left the finite numbers"):
        raise cls("loss left the finite numbers")


def test_blow_up_is_a_flow_divergence_but_not_the_others():
    assert issubclass(errors.BlowUpError, errors.FlowDiverged)
    assert not issubclass(errors.TrainingDiverged, errors.FlowDiverged)
    assert not issubclass(errors.SamplerDiverged, errors.TrainingDiverged)


def test_partial_time_and_times_are_carried():
    partial = {"x": [1.0, 2.0]}
    err = errors.BlowUpError(
        "blow-up at t = 0.5", time=0.5, partial=partial, times=[0, 0.25]
    )
    assert err.time == 0.5 and err.partial is partial and err.times == [0, 0.25]
    assert str(err) == "blow-up at t = 0.5"
    bare = errors.TrainingDiverged("nan loss")
    assert bare.time is None and bare.partial is None and bare.times is None
    try:
        raise err
    except FloatingPointError as caught:  # old guards keep working
        assert caught.partial is partial


def test_public_names():
    assert set(errors.__all__) == {
        "DivergenceError",
        "TrainingDiverged",
        "SamplerDiverged",
        "FlowDiverged",
        "BlowUpError",
        "NotConverged",
        "NotPositiveDefinite",
    }


def test_the_package_raises_no_exception_outside_the_family():
    """Sinkhorn's non-convergence joined the family and stays a RuntimeError; no module raises
    a bare FloatingPointError (grep over the package's sources)."""
    from pathlib import Path

    import attnbook
    from attnbook import attention

    assert issubclass(attention.SinkhornNotConverged, errors.NotConverged)
    assert issubclass(attention.SinkhornNotConverged, RuntimeError)
    root = Path(attnbook.__file__).parent
    bare = [
        f"{path.relative_to(root)}:{n}"
        for path in root.rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "raise FloatingPointError" in line
    ]
    assert not bare, bare
