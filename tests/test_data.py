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


def test_pandas_nullable_columns_are_numbers_and_their_missing_values_are_named():
    """scikit-learn accepts pandas' nullable ``Float64``/``Int64``/``boolean`` columns; they
    were "X must be numeric, got an array of dtype object" (issue 34, item 9)."""
    import pandas as pd

    frame = pd.DataFrame({"a": pd.array([1.5, 2.0, 3.0], dtype="Float64"),
                          "b": pd.array([1, 2, 3], dtype="Int64"),
                          "c": pd.array([True, False, True], dtype="boolean")})
    np.testing.assert_array_equal(check_X(frame), [[1.5, 1, 1], [2, 2, 0], [3, 3, 1]])
    frame.loc[1, "b"] = pd.NA
    with pytest.raises(ValueError, match="X contains 1 non-finite.*row 1, column 1"):
        check_X(frame)
    with pytest.raises(ValueError, match="X must be numeric"):
        check_X(pd.DataFrame({"a": pd.array(["x", "y"], dtype="string")}))


def test_sparse_X_is_refused_with_the_way_to_densify_it():
    import scipy.sparse as sp

    with pytest.raises(ValueError, match=r"X is a scipy.sparse matrix of shape \(3, 3\).*"
                                         r"X.toarray\(\)"):
        check_X(sp.csr_matrix(np.eye(3)))


def test_more_than_two_classes_point_to_one_versus_rest():
    with pytest.raises(ValueError, match="10 classes.*OneVsRestClassifier"):
        check_X_y(np.zeros((20, 1)), np.arange(20) % 10)
