import numpy as np
import pytest

from ppl_bsvm.data import BinaryLabels, check_X, check_X_y, design_matrix, feature_names

X_OK = np.arange(12.0).reshape(6, 2)


@pytest.mark.parametrize(
    "labels, negative, positive",
    [
        ([0, 1, 1, 0, 1, 0], 0, 1),
        ([-1, 1, 1, -1, 1, -1], -1, 1),
        ([True, False, True, False, True, True], False, True),
        (["cat", "dog", "dog", "cat", "cat", "dog"], "cat", "dog"),
        ([2.5, 7.0, 7.0, 2.5, 2.5, 7.0], 2.5, 7.0),
    ],
)
def test_labels_of_any_type_map_to_pm1_and_back(labels, negative, positive):
    problem = check_X_y(X_OK, labels)
    assert problem.labels == BinaryLabels(negative, positive)
    assert problem.y.dtype == np.float64
    assert set(problem.y.tolist()) == {-1.0, 1.0}
    np.testing.assert_array_equal(problem.labels.decode(problem.y), np.asarray(labels))


def test_object_dtype_labels_map_to_pm1():
    # pandas string columns and sklearn's checks pass labels as an object array of str
    labels = np.array(["one", "two", "two", "one", "one", "two"], dtype=object)
    problem = check_X_y(X_OK, labels)
    assert problem.labels == BinaryLabels("one", "two")
    np.testing.assert_array_equal(problem.y, [-1, 1, 1, -1, -1, 1])
    assert check_X_y(X_OK, labels, positive="one").labels == BinaryLabels("two", "one")


def test_positive_label_can_be_chosen():
    problem = check_X_y(X_OK, ["a", "b", "b", "a", "a", "b"], positive="a")
    assert problem.labels.positive == "a"
    np.testing.assert_array_equal(problem.y, [1, -1, -1, 1, 1, -1])
    with pytest.raises(ValueError, match="positive='z'"):
        check_X_y(X_OK, ["a", "b", "b", "a", "a", "b"], positive="z")


def test_X_is_float64_contiguous():
    X = check_X(np.asfortranarray(np.ones((3, 2), dtype=np.float32)))
    assert X.dtype == np.float64 and X.flags.c_contiguous


@pytest.mark.parametrize(
    "X, y, message",
    [
        (np.array([[1.0, np.nan], [0.0, 1.0]]), [0, 1], "NaN"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), [0, 1], "inf"),
        (np.arange(4.0), [0, 1, 0, 1], "2-D"),
        (np.ones((2, 2, 2)), [0, 1], "2-D"),
        (np.ones((3, 2)), [0, 1], "different lengths"),
        (np.ones((3, 2)), [1, 1, 1], "only one class"),
        (np.ones((3, 2)), [0, 1, 2], "3 classes"),
        (np.ones((0, 2)), [], "empty"),
        (np.ones((3, 0)), [0, 1, 0], "empty"),
        (np.ones((2, 2)), np.ones((2, 2)), "1-D"),
        (np.ones((2, 2)), [0.0, np.nan], "NaN"),
        (np.array([["a", "b"], ["c", "d"]]), [0, 1], "numeric"),
        (np.ones((2, 2)), [None, 1], "missing"),
    ],
)
def test_bad_input_raises_a_clear_value_error(X, y, message):
    with pytest.raises(ValueError, match=message):
        check_X_y(X, y)


def test_error_names_the_argument():
    with pytest.raises(ValueError, match=r"^X_test "):
        check_X(np.array([[np.nan]]), name="X_test")
    with pytest.raises(ValueError, match="has 3 features, but the model was fitted with 2"):
        check_X(np.ones((4, 3)), n_features=2)


def test_encode_rejects_unknown_labels():
    labels = BinaryLabels("a", "b")
    with pytest.raises(ValueError, match="neither"):
        labels.encode(["a", "c"])


def test_design_matrix_appends_intercept():
    Xd = design_matrix(X_OK, intercept=True)
    np.testing.assert_array_equal(Xd[:, -1], 1.0)
    assert feature_names(2, True) == ["x0", "x1", "intercept"]
    assert design_matrix(X_OK, intercept=False) is X_OK
