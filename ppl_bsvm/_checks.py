"""Option validation: every bad option value is a ``ValueError`` that names the option."""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "positive_int",
    "positive_float",
    "nonnegative_float",
    "open_interval",
    "one_of",
    "boolean",
]


def positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def positive_float(name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


def nonnegative_float(name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def open_interval(name: str, value, low: float, high: float) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number in ({low:g}, {high:g}), got {value!r}")
    if not low < value < high:
        raise ValueError(f"{name} must lie strictly between {low:g} and {high:g}, got {value!r}")
    return float(value)


def one_of(name: str, value, options) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def boolean(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)
