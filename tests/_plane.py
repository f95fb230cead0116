"""A two-coefficient linear Bayesian SVM whose posterior moments come from grid quadrature:
the exact reference of the samplers' and Pathfinder's tests."""

import numpy as np


def plane_posterior():
    """``(X, y, mean, sd)``: 30 points in 2-d (no intercept, prior N(0, I), gamma 1) and the
    posterior mean and sd of ``beta`` on a 1601 x 1601 grid over [-6, 6]^2."""
    r = np.random.default_rng(3)
    X = r.normal(size=(30, 2))
    y = np.where(X @ np.array([1.0, -0.7]) + 0.8 * r.normal(size=30) > 0, 1, -1)
    g = np.linspace(-6, 6, 1601)
    B0, B1 = np.meshgrid(g, g, indexing="ij")
    hinge = np.zeros_like(B0)
    for (x0, x1), label in zip(X, y, strict=True):  # a point at a time: no 30 x 1601^2 array
        hinge += np.maximum(0.0, 1.0 - label * (x0 * B0 + x1 * B1))
    logp = -0.5 * (B0**2 + B1**2) - 2 * hinge
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = np.array([(w * B0).sum(), (w * B1).sum()])
    sd = np.sqrt(np.array([(w * (B0 - mean[0]) ** 2).sum(), (w * (B1 - mean[1]) ** 2).sum()]))
    assert w[[0, -1]].sum() + w[:, [0, -1]].sum() < 1e-15  # the grid holds the posterior
    return X, y, mean, sd
