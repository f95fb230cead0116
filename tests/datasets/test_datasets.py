import numpy as np
import pytest

from ppl_bsvm import datasets


@pytest.mark.parametrize("name", datasets.list_datasets())
def test_every_dataset_loads_with_documented_shape(name):
    X, y, names = datasets.load(name, return_names=True)
    info = datasets.describe(name)
    assert X.shape == (info["n"], info["d"])
    assert len(names) == info["d"]
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert np.all(np.isfinite(X))
    assert set(np.unique(y).tolist()) == {-1.0, 1.0}
    for key in ("source", "citation", "positive", "description"):
        assert info[key]


def test_positive_class_is_the_documented_one():
    frame = datasets.load_frame("pima")
    _, y = datasets.load("pima")
    np.testing.assert_array_equal(y > 0, frame["label"].to_numpy() == "tested_positive")
    _, y = datasets.load("splice")
    labels = datasets.load_frame("splice")["label"].to_numpy()
    np.testing.assert_array_equal(y > 0, np.isin(labels, ["EI", "IE"]))


def test_one_hot_columns_are_indicators():
    X, _, names = datasets.load("german", return_names=True)
    onehot = [j for j, n in enumerate(names) if n.startswith("x1=")]
    assert len(onehot) == 4
    np.testing.assert_array_equal(X[:, onehot].sum(axis=1), 1.0)


def test_standardize():
    X, _ = datasets.load("sonar", standardize=True)
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X.std(axis=0), 1.0, atol=1e-12)


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError, match="valid names"):
        datasets.load("mnist")
    with pytest.raises(ValueError, match="valid names"):
        datasets.describe("mnist")
    with pytest.raises(ValueError, match="generated data sets only"):
        datasets.load("heart", n=10)


@pytest.mark.parametrize("name", datasets.list_generators())
def test_generators_reproduce_with_a_seed(name):
    X1, y1 = datasets.load(name, n=500, seed=3)
    X2, y2 = datasets.load(name, n=500, seed=3)
    X3, _ = datasets.load(name, n=500, seed=4)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(X1, X3)
    assert X1.shape == (500, datasets.describe(name)["d"])
    assert set(np.unique(y1).tolist()) == {-1.0, 1.0}


@pytest.mark.parametrize("name", datasets.list_generators())
def test_generator_rows_do_not_depend_on_n(name):
    from ppl_bsvm.datasets.generators import CHUNK

    X_small, y_small = datasets.load(name, n=37, seed=1)
    X_big, y_big = datasets.load(name, n=CHUNK + 100, seed=1)
    np.testing.assert_array_equal(X_small, X_big[:37])
    np.testing.assert_array_equal(y_small, y_big[:37])


def test_generator_definitions():
    X, y = datasets.checker(2000, seed=0)
    cells = np.floor(4 * X).astype(int).sum(axis=1)
    np.testing.assert_array_equal(y > 0, cells % 2 == 0)
    X, y = datasets.twonorm(20000, seed=0)
    a = 2 / np.sqrt(20)
    np.testing.assert_allclose(X[y > 0].mean(axis=0), a, atol=0.05)
    np.testing.assert_allclose(X[y < 0].mean(axis=0), -a, atol=0.05)
    X, y = datasets.ringnorm(20000, seed=0)
    np.testing.assert_allclose(X[y > 0].var(axis=0), 4.0, rtol=0.1)
    np.testing.assert_allclose(X[y < 0].var(axis=0), 1.0, rtol=0.1)
    X, y = datasets.waveform(30000, seed=0)
    assert abs(np.mean(y > 0) - 1 / 3) < 0.02
    # Class 1 mixes h1 and h2: its mean is (h1 + h2) / 2 (u is uniform).
    h1 = np.maximum(6.0 - np.abs(np.arange(1, 22) - 11), 0.0)
    h2 = np.maximum(6.0 - np.abs(np.arange(1, 22) - 15), 0.0)
    np.testing.assert_allclose(X[y > 0].mean(axis=0), (h1 + h2) / 2, atol=0.1)


def test_art_noise_controls_overlap():
    X0, y0 = datasets.art(4000, seed=0, noise=0.0)
    X1, y1 = datasets.art(4000, seed=0, noise=0.5)
    np.testing.assert_array_equal(X0, X1)
    assert 0.4 < np.mean(y0 > 0) < 0.6
    assert 0.0 < np.mean(y0 != y1) < 0.5


@pytest.mark.parametrize("noise, floor", [(0.1, 0.0653), (0.5, 0.1832)])
def test_art_noise_flips_labels_at_the_bayes_rate(noise, floor):
    """A label differs from the noise-free one with probability Phi(-|g(x)| / sigma_psi), so
    the flip rate is the Bayes error ``art_bayes_error`` (within 4 binomial standard errors),
    and that is the floor documented at ``_ART_FUNCTION_SEED`` (computed on 200 000 points),
    within 4 standard errors of a mean of values in [0, 1/2] (sd at most 1/4)."""
    n = 20000
    X0, y0 = datasets.art(n, seed=3, noise=0.0)
    _, y1 = datasets.art(n, seed=3, noise=noise)
    bayes = datasets.art_bayes_error(X0, noise)
    assert bayes == pytest.approx(floor, abs=4 * 0.25 / np.sqrt(n))
    assert abs(np.mean(y0 != y1) - bayes) < 4 * np.sqrt(bayes * (1 - bayes) / n)


def test_art_bayes_error_checks_its_input():
    X, _ = datasets.art(10, seed=0)
    assert datasets.art_bayes_error(X, 0.0) == 0.0
    with pytest.raises(ValueError, match="X"):
        datasets.art_bayes_error(X[:, :3], 0.1)
    with pytest.raises(ValueError, match="noise"):
        datasets.art_bayes_error(X, -0.1)


def test_susy_shape_and_dtype():
    X, y = datasets.susy(1000, seed=0, dtype=np.float32)
    assert X.shape == (1000, 18) and X.dtype == np.float32
    assert 0.4 < np.mean(y > 0) < 0.52
    with pytest.raises(ValueError, match="n must be"):
        datasets.susy(0)
    with pytest.raises(ValueError, match="seed"):
        datasets.susy(10, seed=-1)
