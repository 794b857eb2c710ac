"""Part III — deep Transformers as a mean-field PDE (Castin, Ablin, Carrillo & Peyré, 2025).

* :mod:`~attnbook.pde.particles` — the velocity field of every attention variant and particle
  simulation (:func:`velocity`, :func:`simulate`).
* :mod:`~attnbook.pde.symbolic` — SymPy derivations of the Gaussian moment equations.
* :mod:`~attnbook.pde.gaussian` — those equations integrated (:func:`gaussian_flow`).
* :mod:`~attnbook.pde.closed_forms` — hand-written closed forms used as references.
* :mod:`~attnbook.pde.wasserstein` — W₂ between particle clouds and between Gaussians.
* :mod:`~attnbook.pde.meanfield` — the mean-field limit measured: exact 1-D W₂ to a Gaussian,
  rates, particle Jacobians and stability constants.
* :mod:`~attnbook.pde.gradient_flow` — energy, the Z-weighted metric, Sinkhorn as a
  Bures–Wasserstein gradient flow, W₂ geodesics.
"""

# The package exports what the chapters, tools/, bench/ and the API page use through it;
# the rest is imported from its module (attnbook.pde.particles.sink_weights).
from . import closed_forms, plots  # noqa: F401  (pde.closed_forms stays an attribute)
from .clouds import (
    eigenvalue_ratio,
    empirical_cov,
    numerical_rank,
    trace_one_circle,
)
from .gaussian import (
    covariance_flow,
    gaussian_flow,
)
from .gradient_flow import (
    bures_wasserstein_rhs,
    displacement_interpolation,
    energy_balance,
    energy_rate,
    gaussian_energy,
    metric_norm_sq,
    metric_tensor,
    partition_gradient,
    radial_geodesic_energy,
    relative_asymmetry,
    sinkhorn_self_cost,
    sinkhorn_self_cost_minimised,
    sinkhorn_self_cost_particles,
    symmetric_gradient_fd,
    translation_energies,
    twisted_velocity,
    weighted_field_jacobian_fd,
)
from .meanfield import (
    coupling_distance,
    fit_rate,
    jackknife_slopes,
    one_sided_lipschitz,
    optimal_matching,
    particle_jacobian,
    sample_disk,
    tangent_distance,
    two_sample_rates,
    w2_particles_batch,
    w2_to_gaussian_1d,
)
from .particles import (
    KINDS,
    attention_matrix,
    interaction_energy,
    particle_masses,
    sample_gaussian,
    simulate,
    velocity,
)
from .quadrature import affine_residual, velocity_on_gaussian_1d
from .symbolic import closed_form_gaps, derive_moment_equations, moment_rhs
from .wasserstein import conditional_w2, w2_particles

__all__ = [
    "plots",
    "affine_residual",
    "velocity_on_gaussian_1d",
    "closed_form_gaps",
    "eigenvalue_ratio",
    "empirical_cov",
    "numerical_rank",
    "trace_one_circle",
    "KINDS",
    "attention_matrix",
    "interaction_energy",
    "particle_masses",
    "sample_gaussian",
    "simulate",
    "velocity",
    "covariance_flow",
    "gaussian_flow",
    "derive_moment_equations",
    "moment_rhs",
    "conditional_w2",
    "w2_particles",
    "coupling_distance",
    "fit_rate",
    "jackknife_slopes",
    "one_sided_lipschitz",
    "optimal_matching",
    "particle_jacobian",
    "sample_disk",
    "tangent_distance",
    "two_sample_rates",
    "w2_particles_batch",
    "w2_to_gaussian_1d",
    "bures_wasserstein_rhs",
    "displacement_interpolation",
    "energy_balance",
    "energy_rate",
    "gaussian_energy",
    "metric_norm_sq",
    "metric_tensor",
    "partition_gradient",
    "radial_geodesic_energy",
    "relative_asymmetry",
    "sinkhorn_self_cost_minimised",
    "translation_energies",
    "weighted_field_jacobian_fd",
    "sinkhorn_self_cost",
    "sinkhorn_self_cost_particles",
    "symmetric_gradient_fd",
    "twisted_velocity",
]
