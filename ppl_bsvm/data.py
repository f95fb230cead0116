"""Input validation shared by every entry point.

Every public function that takes user data goes through :func:`check_X_y` (training) or
:func:`check_X` (prediction). Labels of any type (ints, bools, strings, ...) with exactly two
distinct values are mapped to -1/+1; the mapping is kept in :class:`BinaryLabels` so that
predictions come back in the user's labels.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["BinaryLabels", "Problem", "check_X", "check_X_y", "check_binary_y", "design_matrix",
           "feature_names_of", "check_feature_names"]


class BinaryLabels(NamedTuple):
    """The mapping between the user's two labels and -1/+1.

    Attributes
    ----------
    negative : object
        The user's label mapped to -1.
    positive : object
        The user's label mapped to +1 (``predict_proba`` returns P(y = positive)).
    """

    negative: Any
    positive: Any

    @property
    def classes(self) -> np.ndarray:
        """The two labels in the order (negative, positive), as in scikit-learn's ``classes_``."""
        return np.array([self.negative, self.positive])

    def encode(self, y) -> np.ndarray:
        """Map user labels to float64 -1/+1; a label outside the pair raises ``ValueError``."""
        y = np.asarray(y)
        pos = y == self.positive
        neg = y == self.negative
        if not np.all(pos | neg):
            bad = np.unique(y[~(pos | neg)])[:5]
            raise ValueError(
                f"y contains labels {bad.tolist()} that are neither the negative label "
                f"{self.negative!r} nor the positive label {self.positive!r}"
            )
        return np.where(pos, 1.0, -1.0)

    def decode(self, signs) -> np.ndarray:
        """Map -1/+1 (or any real score, by its sign; 0 goes to positive) to the user's labels."""
        return np.where(np.asarray(signs) >= 0, self.positive, self.negative)


class Problem(NamedTuple):
    """A validated binary classification problem.

    Attributes
    ----------
    X : ndarray of shape (n, d)
        Finite float64 inputs.
    y : ndarray of shape (n,)
        Labels in {-1.0, +1.0}.
    labels : BinaryLabels
        How the user's labels map to -1/+1.
    feature_names : tuple of str or None
        The columns of a DataFrame ``X`` (:func:`feature_names_of`); None for an array.
    """

    X: np.ndarray
    y: np.ndarray
    labels: BinaryLabels
    feature_names: tuple[str, ...] | None = None

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]


MAX_ABS = 1e150
"""Largest absolute input value accepted: squares and their sums over up to 10^7 terms (kernel
distances, Gram matrices ``Z^T Z``) stay finite in float64 (``1e150^2 = 1e300``)."""


def _nullable_to_float(X):
    """A pandas DataFrame or Series with nullable extension columns (``Float64``, ``Int64``,
    ``boolean``) as float64 with NaN for ``pd.NA`` (which ``np.asarray`` makes an object array
    of), else None. Numeric extension dtypes only: text columns stay an error."""
    dtypes = getattr(X, "dtypes", None)
    if dtypes is None or not hasattr(X, "to_numpy"):
        return None
    import pandas as pd

    kinds = list(dtypes) if isinstance(dtypes, pd.Series) else [dtypes]  # a frame's, a series'
    if not any(isinstance(d, pd.api.extensions.ExtensionDtype) for d in kinds):
        return None
    if not all(pd.api.types.is_numeric_dtype(d) or pd.api.types.is_bool_dtype(d)
               for d in kinds):
        return None
    return X.to_numpy(dtype=np.float64, na_value=np.nan)


def check_X(X, *, name: str = "X", n_features: int | None = None) -> np.ndarray:
    """Return ``X`` as a C-contiguous float64 2-D array with finite entries.

    Parameters
    ----------
    X : array-like of shape (n, d)
    name : str, default="X"
        The argument name used in error messages.
    n_features : int, optional
        If given, ``X`` must have this many columns (prediction after fitting).

    Raises
    ------
    ValueError
        If ``X`` is empty, not 2-D, not numeric, or contains NaN or inf.
    """
    if hasattr(X, "tocsr") and hasattr(X, "nnz"):  # scipy.sparse: densify on purpose only
        raise ValueError(
            f"{name} is a scipy.sparse matrix of shape {X.shape}; ppl_bsvm's engines compute "
            f"with dense arrays: pass {name}.toarray() (memory n x d x 8 bytes)")
    try:
        arr = _nullable_to_float(X)
        arr = np.asarray(X) if arr is None else arr
    except Exception as err:  # ragged lists and the like
        raise ValueError(f"{name} could not be converted to an array: {err}") from None
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise ValueError(f"{name} must be numeric, got an array of dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"{name} must be real, got complex dtype {arr.dtype}")
    if arr.ndim != 2:
        if arr.ndim == 1 and n_features is not None and n_features > 1 \
                and arr.shape[0] == n_features:
            hint = f"reshape a single row with {name}.reshape(1, -1)"
        elif arr.ndim == 1:
            hint = (f"reshape a single feature with {name}.reshape(-1, 1), a single row with "
                    f"{name}.reshape(1, -1)")
        else:
            hint = "give a 2-D array"
        raise ValueError(
            f"{name} must be 2-D of shape (n_samples, n_features), got {arr.ndim}-D shape "
            f"{arr.shape}; {hint}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    lo, hi = float(arr.min()), float(arr.max())  # NaN if any is; no temporary array
    if not (np.isfinite(lo) and np.isfinite(hi)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        kind = "NaN" if np.isnan(arr[tuple(bad)]) else "inf"
        count = int(np.sum(~np.isfinite(arr)))
        raise ValueError(
            f"{name} contains {count} non-finite value(s) ({kind} first at row {bad[0]}, "
            f"column {bad[1]}); remove or impute them"
        )
    biggest = max(-lo, hi)
    if biggest > MAX_ABS:
        row, col = np.unravel_index(int(np.argmax(np.abs(arr))), arr.shape)
        raise ValueError(
            f"{name} has values up to {biggest:.3g} in absolute value (row {row}, column "
            f"{col}), beyond {MAX_ABS:g}: their squares overflow float64 and every engine's "
            "arithmetic with them. Standardise the features (e.g. sklearn's StandardScaler, or "
            "ppl_bsvm.datasets.load(..., standardize=True))"
        )
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(
            f"{name} has {arr.shape[1]} features, but the model was fitted with {n_features}"
        )
    return arr


def feature_names_of(X) -> tuple[str, ...] | None:
    """The column names of a DataFrame-like ``X`` when all are strings, as scikit-learn's
    ``feature_names_in_``; None for an array or for columns that are not strings (a default
    ``RangeIndex``). Names mixing strings and other types raise ``ValueError``, as in
    scikit-learn."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return None
    names = [c for c in columns]
    strings = [isinstance(c, str) for c in names]
    if all(strings) and names:
        return tuple(names)
    if any(strings):
        raise ValueError(
            "X has feature names of mixed types (strings and others: "
            f"{sorted({type(c).__name__ for c in names})}); convert all column names to str "
            "(X.columns = X.columns.astype(str))"
        )
    return None


def check_feature_names(X, fitted: tuple[str, ...] | None, *, what: str = "the fit") -> None:
    """At prediction: scikit-learn's check of ``X``'s column names against those of the fit.

    A DataFrame whose columns differ from the fitted names, or come in another order, raises
    ``ValueError`` naming them; an array after a DataFrame fit (or a DataFrame after an array
    fit) is accepted with a ``UserWarning``, as scikit-learn 1.9 does.
    """
    import warnings

    names = feature_names_of(X)
    if names is None and fitted is None:
        return
    if fitted is None:
        warnings.warn(f"X has feature names, but {what} was fitted without feature names",
                      UserWarning, stacklevel=3)
        return
    if names is None:
        warnings.warn(f"X does not have valid feature names, but {what} was fitted with "
                      "feature names", UserWarning, stacklevel=3)
        return
    if names == tuple(fitted):
        return
    unseen = [c for c in names if c not in fitted]
    missing = [c for c in fitted if c not in names]
    if not unseen and not missing:
        raise ValueError(
            "The feature names should match those that were passed during fit: they must be "
            f"in the same order as in fit, {list(fitted)}; got {list(names)} (select the "
            "columns with X[fit.feature_names_in])"
        )
    message = "The feature names should match those that were passed during fit."
    if unseen:
        message += f" Feature names unseen at fit time: {unseen}."
    if missing:
        message += f" Feature names seen at fit time, yet now missing: {missing}."
    raise ValueError(message)


def check_binary_y(y, *, positive=None, name: str = "y") -> tuple[np.ndarray, BinaryLabels]:
    """Validate a 1-D label vector with exactly two classes and map it to -1/+1.

    The positive class is ``positive`` if given, else the larger of the two labels in
    ``np.unique`` order (``True`` for bools, ``1`` for {0, 1}, ``+1`` for {-1, +1}, the
    alphabetically later string), as scikit-learn's ``classes_[1]``.

    Returns
    -------
    y_pm : ndarray of shape (n,)
        float64 labels in {-1, +1}.
    labels : BinaryLabels
    """
    refuse_mixed_label_types(y, name)
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}; use {name}.ravel()")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got {arr.ndim}-D shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf labels")
    if arr.dtype == object and any(v is None for v in arr):
        raise ValueError(f"{name} contains missing (None) labels")
    try:
        classes = np.unique(arr)
    except TypeError as err:
        raise ValueError(f"{name} has labels of mixed, unorderable types: {err}") from None
    if classes.size == 1:
        raise ValueError(
            f"{name} has only one class ({_python_scalar(classes[0])!r}); binary classification "
            "needs two"
        )
    if classes.size > 2:
        shown = classes[:6].tolist()
        raise ValueError(
            f"{name} has {classes.size} classes ({shown}{' ...' if classes.size > 6 else ''}); "
            "ppl_bsvm is a binary classifier and needs exactly two; for more, wrap "
            "ppl_bsvm.BayesianSVC in sklearn.multiclass.OneVsRestClassifier (README: More than "
            "two classes)"
        )
    if positive is None:
        labels = BinaryLabels(
            negative=_python_scalar(classes[0]), positive=_python_scalar(classes[1])
        )
    else:
        if positive not in classes.tolist():
            raise ValueError(f"positive={positive!r} is not one of the labels {classes.tolist()}")
        other = classes[0] if classes[1] == positive else classes[1]
        labels = BinaryLabels(negative=_python_scalar(other), positive=positive)
    return labels.encode(arr), labels


def refuse_mixed_label_types(y, name: str = "y") -> None:
    """``ValueError`` for a sequence (not an array) mixing strings with other labels: NumPy
    turns them all into strings (``[0, "a"]`` would predict ``"0"``); scikit-learn's label
    encoders refuse such labels too."""
    if hasattr(y, "dtype") or not isinstance(y, (list, tuple)):
        return
    if np.asarray(y).dtype.kind != "U":
        return
    kinds = sorted({type(v).__name__ for v in y})
    if kinds != ["str"]:
        raise ValueError(f"{name} mixes labels of types {', '.join(kinds)}; give labels of one "
                         f"type (all strings or all numbers)")


def _python_scalar(value):
    """A NumPy scalar as the Python scalar it holds; elements of object arrays are already one."""
    return value.item() if isinstance(value, np.generic) else value


def check_X_y(X, y, *, positive=None) -> Problem:
    """Validate training data and return a :class:`Problem` with labels in {-1, +1}.

    Raises
    ------
    ValueError
        For NaN or inf, wrong dimensions, length mismatch, one class, more than two classes,
        or empty input; the message names the argument and the problem.
    """
    names = feature_names_of(X)
    X = check_X(X)
    y_pm, labels = check_binary_y(y, positive=positive)
    if X.shape[0] != y_pm.shape[0]:
        raise ValueError(
            f"X and y have different lengths: X has {X.shape[0]} rows, y has {y_pm.shape[0]}"
        )
    return Problem(X=X, y=y_pm, labels=labels, feature_names=names)


def design_matrix(X: np.ndarray, intercept: bool) -> np.ndarray:
    """Inputs of the linear model: ``X``, with a trailing column of ones when ``intercept``.

    The linear Bayesian SVM has no bias of its own (``f = x^T beta``); every linear engine
    adds the intercept the same way, so their ``beta`` line up feature by feature.
    """
    if not intercept:
        return X
    return np.concatenate([X, np.ones((X.shape[0], 1), dtype=X.dtype)], axis=1)


def feature_names(d: int, intercept: bool, names=None) -> list[str]:
    """Coordinate labels of ``beta``: ``names`` (a DataFrame's columns) or ``x0 .. x{d-1}``,
    and ``intercept`` last when present (``intercept_`` and so on if a column has that name)."""
    labels = list(names) if names is not None else [f"x{j}" for j in range(d)]
    if intercept:
        extra = "intercept"
        while extra in labels:
            extra += "_"
        labels.append(extra)
    return labels
