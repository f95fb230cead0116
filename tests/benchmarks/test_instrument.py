"""The instrument benchmark's checks on tables built by hand (the run itself is a benchmark)."""

import numpy as np
import pandas as pd

from benchmarks import instrument as B


def _table(floor_kl, vi_kl, lr_kl):
    rows = [{"candidate": name, "variable": "beta", "kl_forward": kl, "kl_reverse": kl,
             "kl_joint": kl, "w2_gauss": kl}
            for name, kl in (("gibbs (rerun)", floor_kl), ("vi", vi_kl), ("vi_lr", lr_kl),
                             ("vi_lr (mean-field)", vi_kl), ("ecm", 0.0))]
    table = pd.DataFrame(rows)
    table.attrs["floor"] = "gibbs (rerun)"
    return table


def test_floor_check_passes_only_when_the_floor_is_below_every_variational_row():
    good = B.floor_check(_table(0.1, 5.0, 1.0))
    assert good and all(good.values())
    # ECM (a pseudo-posterior, not VI) may score below the floor without failing the check
    assert B.floor_check(_table(0.1, 5.0, 1.0))["beta.kl_forward: floor < every VI"]
    bad = B.floor_check(_table(2.0, 5.0, 1.0))
    assert not bad["beta.kl_forward: floor < every VI"]
    swapped = B.floor_check(_table(0.1, 1.0, 5.0))
    assert not swapped["beta.kl_forward: mean-field > linear response"]


def test_latent_distance_is_the_median_in_yardstick_sds():
    class Fit:
        def __init__(self, mean, var):
            self.mean, self.var = np.asarray(mean, float), np.asarray(var, float)

        def predict_latent(self, X):
            return self.mean, self.var

    d = B.latent_distance(Fit([1.0, 2.0, 10.0], [1, 1, 1]), Fit([0.0, 0.0, 0.0], [1, 4, 1]),
                          None)
    assert d == 1.0


def test_the_data_sets_load():
    X, y = B.load("digits38")
    assert X.shape == (357, 64) and set(np.unique(y)) == {-1, 1}
    X, y = B.load("breast_cancer")
    assert X.shape == (569, 30)
