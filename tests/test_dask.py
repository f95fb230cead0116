"""scikit-learn's searches and the Monte-Carlo bootstrap on a dask.distributed cluster.

joblib's ``dask`` backend sends each fold (or chunk of resamples) to a worker process; the
workers start by spawning (dask's default), so each imports JAX afresh instead of inheriting a
forked copy of the parent's JAX runtime, which is not fork-safe.
"""

import joblib
import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_val_score

from ppl_bsvm import BayesianSVC, bootstrap, kernels

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def test_cross_validation_grid_search_and_bootstrap_run_on_the_workers(client, heart):
    X, y = heart
    X, y = X[:120], y[:120]
    clf = BayesianSVC(model="linear", method="ecm")
    local = cross_val_score(clf, X, y, cv=3)
    with joblib.parallel_config(backend="dask"):
        remote = cross_val_score(clf, X, y, cv=3, n_jobs=2)
        grid = GridSearchCV(clf, {"options": [{"gamma": 0.5}, {"gamma": 2.0}]}, cv=2,
                            n_jobs=2).fit(X, y)
        mc = bootstrap.monte_carlo(X[:60], y[:60], kernels.RBF(lengthscale=3.0), 1.0,
                                   n_resamples=64, n_jobs=2)
    np.testing.assert_array_equal(remote, local)  # the same fits, elsewhere
    assert grid.best_params_["options"] in ({"gamma": 0.5}, {"gamma": 2.0})
    same = bootstrap.monte_carlo(X[:60], y[:60], kernels.RBF(lengthscale=3.0), 1.0,
                                 n_resamples=64, n_jobs=1)
    np.testing.assert_allclose(mc.error, same.error, rtol=1e-12)  # chunks carry their seeds
    # the work ran in the two worker processes, which imported JAX there
    assert all(client.run(lambda: __import__("sys").modules.get("jax") is not None).values())
