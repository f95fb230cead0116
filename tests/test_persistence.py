"""Saving, loading and pickling fits; checkpointing and resuming long runs to the same result."""

import json
import os
import pickle
import warnings

import jax
import numpy as np
import pytest
import xarray as xr

import ppl_bsvm
from ppl_bsvm.result import Fit
from tests._saved import rewrite, saved_file
from tests._shared import compilations, small_problem

# Short runs of every engine family: (model, method, options). The static options (the
# samplers' chains, NUTS's tree depth and warmup, MCLMC's warmup, the inducing points) are
# test_properties' and test_runtime's: the same programs.
SAVED = [
    ("gp", "vi", {}),
    ("gp", "ecm", {}),
    ("linear", "vi", {}),
    ("gp", "svi", {"max_iter": 40, "elbo_every": 10, "num_inducing": 10}),
    ("linear", "gibbs", {"num_samples": 40, "num_warmup": 40, "num_chains": 2}),
    ("gp", "nuts", {"num_samples": 5, "num_warmup": 5, "num_chains": 1, "max_tree_depth": 2}),
    ("linear", "pathfinder", {"num_draws": 50, "num_elbo_draws": 25}),
    ("gp", "advi", {"max_iter": 60, "window": 10, "num_draws": 50}),
    ("gp", "platt", {}),
    ("gp", "gpc", {}),
    ("gp", "svgp", {"max_iter": 40, "num_inducing": 3}),
    ("gp", "bcsvm", {"module_size": 20, "query_size": 20}),
    ("gp", "rvm", {}),
]


@pytest.fixture(scope="module")
def small():
    """The shared problem (``tests/_shared.py``) and 30 test rows: with its static options
    (ADVI's window, BCSVM's modules) the fits load most of their programs from the other
    modules'."""
    return small_problem(n_test=30)


def _fit(small, model, method, options, **extra):
    X, y, _ = small
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains warn about R-hat
        return ppl_bsvm.fit(X, y, model=model, method=method, seed=5, **options, **extra)


def _assert_same_fit(a: Fit, b: Fit, Xt):
    assert (a.method, a.model, a.n_iter, a.stop_reason) == (b.method, b.model, b.n_iter,
                                                             b.stop_reason)
    assert a.idata.equals(b.idata)  # values and coordinates; attrs hold creation times
    for key in ("rhat_max", "ess_bulk_min", "stop_reason"):
        np.testing.assert_equal(a.idata.attrs.get(key), b.idata.attrs.get(key))
    np.testing.assert_array_equal(a.predict_proba(Xt), b.predict_proba(Xt))
    if a.predictor.__class__.__name__ != "ScorePredictor":
        for u, v in zip(a.predict_latent(Xt), b.predict_latent(Xt), strict=True):
            np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(a.predict(Xt), b.predict(Xt))
    assert a.trace.keys() == b.trace.keys()
    for key in a.trace:
        np.testing.assert_array_equal(a.trace[key], b.trace[key])
    assert a.hyperparameters.keys() == b.hyperparameters.keys()


@pytest.mark.slow
@pytest.mark.parametrize("model,method,options", SAVED, ids=lambda v: str(v) if isinstance(v, str) else "")
def test_save_load_and_pickle_round_trip_exactly(small, tmp_path, model, method, options):
    """A saved and loaded fit, and a pickled one, are the fit; and they predict with the
    programs the fit compiled: JAX keys them by the arguments' types and commitment and by the
    jitted function, and a loaded fit compiled its predictive again where the fit's arrays were
    weak-typed (BC-SVM's ``s``, SVGP's scalar) or committed to the device (the outputs of a
    stored program), or where ``cloudpickle`` copied its jitted function (SVGP's):
    ``inference.latent.Latent``."""
    fit = _fit(small, model, method, options)
    Xt = small[2]
    _assert_same_fit(fit, fit, Xt)  # the fit's predictive programs compiled
    loaded = ppl_bsvm.load(fit.save(tmp_path / "fit"))
    assert loaded.idata.identical(fit.idata)
    assert loaded.summary() == fit.summary()
    for copy in (loaded, pickle.loads(pickle.dumps(fit))):
        with compilations() as count:
            _assert_same_fit(fit, copy, Xt)
        assert count[0] == 0
    # the posterior file is plain ArviZ netCDF, readable without ppl_bsvm
    with xr.open_datatree(saved_file(tmp_path / "fit", "posterior"), engine="h5netcdf") as tree:
        assert set(tree.children) == set(fit.idata.children)


def test_loaded_arrays_are_float64_in_a_float32_session(small, tmp_path):
    fit = _fit(small, "gp", "vi", {})
    payload = pickle.dumps(fit)
    fit.save(tmp_path / "f")
    assert not jax.config.read("jax_enable_x64")
    for loaded in (pickle.loads(payload), ppl_bsvm.load(tmp_path / "f")):
        leaves = jax.tree.leaves(loaded.kernel_params)
        assert leaves and all(leaf.dtype == np.float64 for leaf in leaves)
        np.testing.assert_array_equal(loaded.predict_proba(small[2]), fit.predict_proba(small[2]))


def test_save_never_clobbers_and_load_checks_what_it_reads(small, tmp_path):
    fit = _fit(small, "gp", "vi", {})
    path = fit.save(tmp_path / "f")
    with pytest.raises(ValueError, match="already holds a saved Fit; pass overwrite=True"):
        fit.save(path)
    fit.save(path, overwrite=True)
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="exists and is not a saved ppl_bsvm Fit"):
        fit.save(other, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="is not a saved ppl_bsvm Fit"):
        ppl_bsvm.load(other)
    with pytest.raises(ValueError, match="is not a saved ppl_bsvm Fit"):
        ppl_bsvm.load(tmp_path / "absent")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "mine"]  # no temporaries left
    meta = json.loads((path / "meta.json").read_text())
    meta["ppl_bsvm"] = "0.0.1"
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match=r"other versions \(ppl_bsvm 0\.0\.1 -> "):
        ppl_bsvm.load(path)
    meta["format"] = 99
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="format 99"):
        ppl_bsvm.load(path)


# (model, method, budget option, total budget, other options); every sampler run compiles its
# loop anew (seconds), so the samplers get fewer runs than SVI.
RESUMABLE = [
    ("linear", "gibbs", "num_samples", 60, {"num_warmup": 30, "num_chains": 2, "store_lam": True}),
    ("gp", "svi", "max_iter", 60, {"elbo_every": 10, "tol": 1e-12,
                                   "learn_hyperparameters": True, "hyper_every": 5}),
    ("linear", "svi", "max_iter", 60, {"elbo_every": 10, "tol": 1e-12}),
]


@pytest.mark.slow
@pytest.mark.parametrize("model,method", [("linear", "nuts"), ("gp", "ess"), ("linear", "mclmc")])
def test_extending_a_saved_sampler_run_equals_the_longer_run(small, tmp_path, model, method):
    X, y, Xt = small
    options = {"num_warmup": 30, "num_chains": 2}
    whole = _fit(small, model, method, {"num_samples": 50, **options})
    part = _fit(small, model, method, {"num_samples": 20, **options})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = ppl_bsvm.resume(part.save(tmp_path / "part"), X, y, num_samples=50)
    _assert_same_fit(whole, resumed, Xt)
    assert resumed.idata.sample_stats.sizes["draw"] == 50  # the sampler's fields appended


@pytest.mark.parametrize("fresh", ["new session", "jax.clear_caches"])
def test_nuts_resumes_in_a_new_session_and_runs_after_jax_clears_its_caches(
        small, tmp_path, monkeypatch, fresh):
    """NumPyro's NUTS keeps settings from its ``init``: a saved run resumed where no ``init``
    had run (a new session: none of the driver's programs built) stopped at NumPyro's
    "``init`` must be called before ``sample``", and after ``jax.clear_caches()`` (which the
    library calls near the limit on memory mappings) the next fit failed inside ``vmap``.
    Both now give the uninterrupted run (the options of the test above: its programs)."""
    from ppl_bsvm.inference.mcmc import driver

    X, y, Xt = small
    options = {"num_warmup": 30, "num_chains": 2}
    whole = _fit(small, "linear", "nuts", {"num_samples": 50, **options})
    path = _fit(small, "linear", "nuts", {"num_samples": 20, **options}).save(tmp_path / "p")
    if fresh == "new session":
        monkeypatch.setattr(driver, "_PROGRAMS", type(driver._PROGRAMS)())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            again = ppl_bsvm.resume(ppl_bsvm.load(path), X, y, num_samples=50)
    else:
        jax.clear_caches()
        again = _fit(small, "linear", "nuts", {"num_samples": 50, **options})
    _assert_same_fit(whole, again, Xt)


@pytest.mark.slow
@pytest.mark.parametrize("model,method,budget,total,options", RESUMABLE,
                         ids=[f"{m}-{meth}" for m, meth, *_ in RESUMABLE])
def test_resumed_and_checkpointed_runs_equal_the_uninterrupted_run(
    small, tmp_path, monkeypatch, model, method, budget, total, options
):
    X, y, Xt = small
    whole = _fit(small, model, method, {budget: total, **options})
    # extend a shorter run
    part = _fit(small, model, method, {budget: total // 3, **options})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _assert_same_fit(whole, ppl_bsvm.resume(part, X, y, **{budget: total}), Xt)
    # checkpoints every 20 iterations; the run is killed after the second one is written
    saves = []
    original_save = Fit.save

    def save_then_die(self, path, **kwargs):
        out = original_save(self, path, **kwargs)
        saves.append(self.checkpoint.n_iter)
        if len(saves) == 2:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(Fit, "save", save_then_die)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        _fit(small, model, method, {budget: total, **options}, checkpoint=ckpt,
             checkpoint_every=20)
    assert saves == [20, 40]
    def save_and_count(self, path, **kwargs):
        saves.append(self.checkpoint.n_iter)
        return original_save(self, path, **kwargs)

    monkeypatch.setattr(Fit, "save", save_and_count)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the saved options carry the total budget; go on checkpointing to the same place
        resumed = ppl_bsvm.resume(ckpt, X, y, checkpoint=ckpt, checkpoint_every=20)
    assert saves == [20, 40, 60]
    _assert_same_fit(whole, resumed, Xt)
    _assert_same_fit(whole, ppl_bsvm.load(ckpt), Xt)  # the final checkpoint is the result


def test_resume_refuses_what_would_not_give_the_same_run(small, tmp_path):
    X, y, _ = small
    gibbs = _fit(small, "linear", "gibbs", {"num_samples": 20, "num_warmup": 20, "num_chains": 2,
                                             "thinning": 2})
    with pytest.raises(ValueError, match="not the data the fit was trained on"):
        ppl_bsvm.resume(gibbs, X[::-1], y[::-1], num_samples=40)
    with pytest.raises(ValueError, match="option 'prior_scale' cannot change when resuming"):
        ppl_bsvm.resume(gibbs, X, y, num_samples=40, prior_scale=2.0)
    with pytest.raises(ValueError, match="unknown option"):
        ppl_bsvm.resume(gibbs, X, y, num_sample=40)
    with pytest.raises(ValueError, match="num_samples=10 is below the 20 sampling iterations"):
        ppl_bsvm.resume(gibbs, X, y, num_samples=10)
    same = ppl_bsvm.resume(gibbs, X, y)  # nothing left to draw: the same posterior
    assert same.idata.equals(gibbs.idata)
    vi = _fit(small, "gp", "vi", {})
    with pytest.raises(ValueError, match=r"method='vi' \(model='gp'\) cannot be resumed"):
        ppl_bsvm.resume(vi, X, y)
    with pytest.raises(ValueError, match="checkpoint is not supported by method='vi'"):
        ppl_bsvm.fit(X, y, method="vi", checkpoint=tmp_path / "c")
    with pytest.raises(ValueError, match="checkpoint_every needs checkpoint"):
        ppl_bsvm.fit(X, y, method="svi", checkpoint_every=10)
    with pytest.raises(ValueError, match="checkpoint_every must be an integer >= 1"):
        ppl_bsvm.fit(X, y, method="svi", checkpoint=tmp_path / "c", checkpoint_every=0)
    with pytest.raises(ValueError, match="checkpoint_every=15 must be a multiple of thinning=2"):
        ppl_bsvm.fit(X, y, model="linear", method="gibbs", thinning=2, num_samples=40,
                     checkpoint=tmp_path / "c", checkpoint_every=15)
    with pytest.raises(ValueError, match="not a saved ppl_bsvm Fit"):
        ppl_bsvm.resume(tmp_path / "nothing", X, y)


class _Payload:
    """Pickling this runs ``touch <marker>``: what a crafted ``fit.pkl`` would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_load_executes_nothing_from_the_saved_directory(small, tmp_path):
    fit = _fit(small, "gp", "vi", {})
    path = fit.save(tmp_path / "f")
    marker = tmp_path / "ran"
    assert not (path / "fit.pkl").exists()
    assert sorted(p.name for p in path.iterdir()) == ["arrays.1.npz", "fit.1.json", "meta.json",
                                                      "posterior.1.nc"]
    # a pickle dropped into a saved fit is never read
    (path / "fit.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    loaded = ppl_bsvm.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(small[2]), fit.predict_proba(small[2]))
    # nor are pickles inside the array file
    np.save(path / "evil.npy", np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    rewrite(path, "arrays", _npz_with(saved_file(path, "arrays"), path / "evil.npy"))
    with pytest.raises(ValueError, match="malformed saved fit"):
        ppl_bsvm.load(path)
    # a fit.json naming a function or a class outside the library is refused, not called
    fit.save(path, overwrite=True)
    original = saved_file(path, "fields").read_text()
    for node in (
        {"t": "function", "name": "posix:system"},
        {"t": "namedtuple", "cls": "posix:system", "v": [f"touch {marker}"]},
        {"t": "dataclass", "cls": "subprocess:Popen", "v": {"args": ["touch", str(marker)]}},
        {"t": "object", "cls": "subprocess:Popen", "v": {}},
        {"t": "namedtuple", "cls": "os:terminal_size", "v": [1, 2]},
    ):
        tree = json.loads(original)
        tree["options"] = node
        rewrite(path, "fields", json.dumps(tree).encode())
        with pytest.raises(ValueError, match="saved fit names"):
            ppl_bsvm.load(path)
    assert not marker.exists()


def _npz_with(npz_path, npy_path) -> bytes:
    """``npz_path``'s archive with ``npy_path`` replacing its first array."""
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(npz_path) as old, zipfile.ZipFile(buffer, "w") as new:
        names = old.namelist()
        new.writestr(names[0], npy_path.read_bytes())
        for name in names[1:]:
            new.writestr(name, old.read(name))
    return buffer.getvalue()


def test_a_directory_of_the_old_pickle_format_is_refused_unread(small, tmp_path):
    path = _fit(small, "gp", "vi", {}).save(tmp_path / "old")
    marker = tmp_path / "ran"
    (path / "fit.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "format": 1}))
    with pytest.raises(ValueError, match=r"format 1.*runs code.*Re-create the fit"):
        ppl_bsvm.load(path)
    assert not marker.exists()


def test_a_callable_option_is_saved_as_a_placeholder_and_asked_for_on_resume(small, tmp_path):
    from ppl_bsvm._serial import Unsaved

    X, y, Xt = small

    def rate(count):
        return 0.5 / (1.0 + count) ** 0.6

    options = {"max_iter": 40, "elbo_every": 10, "tol": 1e-12, "learning_rate": rate}
    whole = _fit(small, "gp", "svi", {**options, "max_iter": 60})
    # the same function, the same programs (each fit had wrapped it anew, a new static
    # value: a second fit and the resume below compiled the loop again)
    with compilations() as count:
        part = _fit(small, "gp", "svi", options)
    assert count[0] == 0
    loaded = ppl_bsvm.load(part.save(tmp_path / "part"))
    assert isinstance(loaded.options["learning_rate"], Unsaved)
    np.testing.assert_array_equal(loaded.predict_proba(Xt), part.predict_proba(Xt))
    with pytest.raises(ValueError, match=r"\['learning_rate'\].*pass them again"):
        ppl_bsvm.resume(loaded, X, y, max_iter=60)
    with warnings.catch_warnings(), compilations() as count:
        warnings.simplefilter("ignore")
        resumed = ppl_bsvm.resume(loaded, X, y, max_iter=60, learning_rate=rate)
    assert count[0] == 0  # the loaded state committed as a program's outputs are
    _assert_same_fit(whole, resumed, Xt)


def test_a_baseline_fit_loads_in_a_fresh_process(small, tmp_path):
    """``load`` registers the library's types itself: a fresh interpreter that imports only
    ``ppl_bsvm`` reads a saved baseline fit (its predictor class lives in ``baselines``)."""
    import subprocess
    import sys

    X, y, Xt = small
    fit = _fit(small, "gp", "bcsvm", {"module_size": 30, "query_size": 30})
    fit.save(tmp_path / "fit")
    np.save(tmp_path / "Xt.npy", Xt)
    code = (
        "import sys, numpy as np, ppl_bsvm\n"
        "fit = ppl_bsvm.load(sys.argv[1])\n"
        "np.save(sys.argv[2], fit.predict_proba(np.load(sys.argv[3])))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "fit"), str(tmp_path / "p.npy"),
                    str(tmp_path / "Xt.npy")], check=True, capture_output=True, timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), fit.predict_proba(Xt))


def test_a_fit_whose_engine_state_changed_shape_loads_without_it(small, tmp_path):
    """A fit saved by another version whose engine state had other fields (format 2: fields by
    position only) loads with a warning, predicts as saved, and refuses to resume with a
    message that says why."""
    X, y, Xt = small
    fit = _fit(small, "gp", "svi", {"max_iter": 40})
    fit.save(tmp_path / "fit")
    path = saved_file(tmp_path / "fit", "fields")
    tree = json.loads(path.read_text())

    def old(node):  # an earlier layout: no field names, Batches with one more field
        if isinstance(node, dict):
            if node.get("t") == "namedtuple":
                node.pop("f", None)
                if node["cls"].endswith(":Batches"):
                    node["v"].append(node["v"][0])
            for value in node.values():
                old(value)
        elif isinstance(node, list):
            for value in node:
                old(value)

    old(tree)
    rewrite(tmp_path / "fit", "fields", json.dumps(tree).encode())
    # format 2's layout: fixed file names, no generations or checksums
    saved = tmp_path / "fit"
    for key, name in (("posterior", "posterior.nc"), ("fields", "fit.json"),
                      ("arrays", "arrays.npz")):
        saved_file(saved, key).rename(saved / name)
    meta = json.loads((saved / "meta.json").read_text())
    meta = {k: v for k, v in meta.items() if k not in ("files", "sha256", "generation")}
    (saved / "meta.json").write_text(json.dumps({**meta, "format": 2}))
    with pytest.warns(UserWarning, match="cannot be resumed"):
        loaded = ppl_bsvm.load(tmp_path / "fit")
    assert loaded.state is None and loaded.checkpoint is None
    np.testing.assert_array_equal(loaded.predict_proba(Xt), fit.predict_proba(Xt))
    with pytest.raises(ValueError, match="no checkpoint to resume from"):
        ppl_bsvm.resume(loaded, X, y, max_iter=80)


_GIBBS = {"num_samples": 40, "num_warmup": 40, "num_chains": 2}


def test_overwrite_keeps_the_files_the_library_did_not_write(small, tmp_path):
    fit = _fit(small, "gp", "ecm", {})
    path = fit.save(tmp_path / "fit")
    (path / "notes.txt").write_text("mine")
    fit.save(path, overwrite=True)
    assert (path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in path.iterdir()) == ["arrays.2.npz", "fit.2.json", "meta.json",
                                                      "notes.txt", "posterior.2.nc"]
    # a directory whose meta.json merely has a "format" key is not a saved fit: untouched
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.json").write_text('{"format": 3}')
    (other / "data.csv").write_text("1,2")
    with pytest.raises(ValueError, match="not a saved ppl_bsvm Fit"):
        fit.save(other, overwrite=True)
    assert sorted(p.name for p in other.iterdir()) == ["data.csv", "meta.json"]


def test_an_interrupted_save_leaves_the_old_fit_and_the_next_save_cleans_up(small, tmp_path,
                                                                            monkeypatch):
    """Fault injection: the process dies after writing the new files, before the commit (the
    rename of meta.json): the directory still loads as the old fit; the next save removes the
    dead save's files."""
    from ppl_bsvm import _store

    Xt = small[2]
    first, second = _fit(small, "gp", "ecm", {}), _fit(small, "gp", "vi", {})
    path = first.save(tmp_path / "fit")

    def killed(src, dst):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(_store.os, "replace", killed)
        with pytest.raises(KeyboardInterrupt):
            second.save(path, overwrite=True)
    assert {"posterior.2.nc", "fit.2.json", "arrays.2.npz"} <= {p.name for p in path.iterdir()}
    np.testing.assert_array_equal(ppl_bsvm.load(path).predict_proba(Xt), first.predict_proba(Xt))
    second.save(path, overwrite=True)
    assert sorted(p.name for p in path.iterdir()) == ["arrays.2.npz", "fit.2.json", "meta.json",
                                                      "posterior.2.nc"]
    np.testing.assert_array_equal(ppl_bsvm.load(path).predict_proba(Xt), second.predict_proba(Xt))
    assert not (tmp_path / ".fit.lock").exists()


def test_a_copy_left_by_an_interrupted_format_2_save_is_found_and_then_removed(small, tmp_path):
    """Format 2 saved by renaming directories: a kill between the renames left the fit only in
    ``.<name>.tmp-PID``; load finds it there, and the next save removes it."""
    Xt = small[2]
    fit = _fit(small, "gp", "ecm", {})
    saved = fit.save(tmp_path / "x")
    for key, name in (("posterior", "posterior.nc"), ("fields", "fit.json"),
                      ("arrays", "arrays.npz")):
        saved_file(saved, key).rename(saved / name)
    meta = json.loads((saved / "meta.json").read_text())
    meta = {k: v for k, v in meta.items() if k not in ("files", "sha256", "generation")}
    (saved / "meta.json").write_text(json.dumps({**meta, "format": 2}))
    saved.rename(tmp_path / ".fit.tmp-99999999")
    with pytest.warns(UserWarning, match="interrupted"):
        loaded = ppl_bsvm.load(tmp_path / "fit")
    np.testing.assert_array_equal(loaded.predict_proba(Xt), fit.predict_proba(Xt))
    loaded.save(tmp_path / "fit")
    assert not (tmp_path / ".fit.tmp-99999999").exists()


def test_a_changed_byte_is_caught_by_the_checksum(small, tmp_path):
    path = _fit(small, "gp", "ecm", {}).save(tmp_path / "fit")
    for key in ("posterior", "fields", "arrays"):
        file = saved_file(path, key)
        good = file.read_bytes()
        bad = bytearray(good)
        bad[len(bad) // 2] ^= 1
        file.write_bytes(bytes(bad))
        with pytest.raises(ValueError, match=f"{file.name} does not match the checksum"):
            ppl_bsvm.load(path)
        file.write_bytes(good)
    ppl_bsvm.load(path)


def test_a_checkpoint_never_replaces_another_fit_and_is_checked_before_the_run(small,
                                                                              tmp_path):
    _fit(small, "gp", "ecm", {}).save(tmp_path / "ck")
    with pytest.raises(ValueError, match="holds another fit"):
        _fit(small, "linear", "gibbs", {**_GIBBS, "num_samples": 10**7},
             checkpoint=tmp_path / "ck")  # refused at once, not after 10^7 draws
    assert ppl_bsvm.load(tmp_path / "ck").method == "ecm"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a saved ppl_bsvm Fit"):
        _fit(small, "linear", "gibbs", {**_GIBBS, "num_samples": 10**7},
             checkpoint=tmp_path / "notes")
    # a run of the same fit on the same data may write its checkpoint again
    for _ in range(2):
        _fit(small, "linear", "gibbs", _GIBBS, checkpoint=tmp_path / "same")
    assert ppl_bsvm.load(tmp_path / "same").method == "gibbs"


def test_a_second_writer_is_refused_and_a_dead_writers_lock_is_taken_over(small, tmp_path):
    import socket
    import subprocess
    import sys

    lock = tmp_path / ".ck.lock"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        lock.write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname()}))
        with pytest.raises(ValueError, match="being written by another run"):
            _fit(small, "linear", "gibbs", _GIBBS, checkpoint=tmp_path / "ck")
        with pytest.raises(ValueError, match="being written by another run"):
            _fit(small, "gp", "ecm", {}).save(tmp_path / "ck")
    finally:
        sleeper.kill()
        sleeper.wait()
    fit = _fit(small, "linear", "gibbs", _GIBBS, checkpoint=tmp_path / "ck")
    assert not lock.exists()
    assert ppl_bsvm.load(tmp_path / "ck").n_iter == fit.n_iter


def test_a_second_writer_in_the_same_process_is_refused(small, tmp_path):
    """The lock of a running checkpoint belongs to the run's thread: another thread's
    Fit.save(path, overwrite=True) wrote into it, and the checkpointed run died with OSError
    (issue 34, item 3). The run's own saves still go through."""
    import threading

    from ppl_bsvm import _store

    fit = _fit(small, "gp", "ecm", {})
    path = tmp_path / "ck"
    seen = {}

    def other_thread():
        seen["holds"] = _store.holds_lock(path)
        try:
            fit.save(path, overwrite=True)
        except ValueError as err:
            seen["error"] = str(err)

    with _store.writer_lock(path):
        fit.save(path, overwrite=True)  # the holder's save: a checkpoint
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join(30)
        assert _store.holds_lock(path)
    assert seen["holds"] is False
    assert "is being written by another run" in seen["error"]
    assert not _store.holds_lock(path)
    _assert_same_fit(fit, ppl_bsvm.load(path), small[2])


_FULL_DISK_CHILD = """
import errno, gc, resource, signal, sys, warnings
from pathlib import Path
import ppl_bsvm

unraisable = []  # what the garbage collector meets and cannot raise ("Exception ignored in")
sys.unraisablehook = lambda hook: unraisable.append(repr(hook.exc_value))
errors = []  # kept in a reference cycle, as pytest's or IPython's record of an error is

fit = ppl_bsvm.load(sys.argv[1])
target, existing, limit = Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
for path, overwrite in ((target, False), (existing, True)):
    try:
        fit.save(path, overwrite=overwrite)
    except OSError as error:
        errors.append(error)
        print(f"OSError {errno.errorcode.get(error.errno)} {path.name}")
errors.append(errors)
del errors
gc.collect()
print("unraisable", unraisable)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
print("exists" if target.exists() else "removed", sorted(p.name for p in existing.iterdir()))
print("loads", ppl_bsvm.load(existing).method)
"""


def test_a_save_that_runs_out_of_space_raises_oserror_and_the_process_goes_on(small, tmp_path):
    """A save that meets a full disk (here the file-size limit, which fails writes with EFBIG
    the way a full disk fails them with ENOSPC, and needs no privileges) raises ``OSError``
    and the process lives on: the posterior's netCDF file is built in memory, so HDF5 never
    meets the failing write (handed the file, it crashed the process with SIGSEGV after the
    error). The new directory is removed, an overwritten fit is kept whole, and the partial
    files are gone; the failed write releases its view of that in-memory file, so collecting
    the errors later prints nothing (the view had kept xarray's ``BytesIO`` open: "Exception
    ignored ... BufferError" when the collector finalised them together)."""
    import subprocess
    import sys

    small_fit = _fit(small, "gp", "ecm", {})
    big_fit = _fit(small, "linear", "gibbs", {"num_samples": 400, "num_warmup": 40,
                                              "num_chains": 2})
    big_fit.save(tmp_path / "big")
    small_fit.save(tmp_path / "kept")
    posterior = max(p.stat().st_size for p in (tmp_path / "big").iterdir())
    assert posterior > 200_000
    proc = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(tmp_path / "big"), str(tmp_path / "new"),
         str(tmp_path / "kept"), str(posterior // 2)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "OSError EFBIG new", "OSError EFBIG kept", "unraisable []",
        "removed ['arrays.1.npz', 'fit.1.json', 'meta.json', 'posterior.1.nc']", "loads ecm"]
    assert not list(tmp_path.glob(".*.lock"))


def test_a_save_on_a_full_tmpfs_raises_oserror(small, tmp_path):
    """The same on a real full file system: a tmpfs of half the big fit's size (where this
    process may mount one: root on Linux)."""
    import errno
    import subprocess

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    big = _fit(small, "linear", "gibbs", {"num_samples": 2000, "num_warmup": 40,
                                          "num_chains": 2})
    kept = _fit(small, "linear", "vi", {})
    sizes = [sum(p.stat().st_size for p in fit.save(tmp_path / name).iterdir())
             for fit, name in ((big, "big"), (kept, "kept"))]
    room = (sizes[0] // 2) // 4096 * 4096
    assert sizes[1] + 8 * 4096 < room  # the small fit fits, the big one does not
    mount = tmp_path / "small_disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={room}", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with pytest.raises(OSError) as caught:
            big.save(mount / "fit")
        assert caught.value.errno == errno.ENOSPC
        assert list(mount.iterdir()) == []  # the failed save's files and folder are gone
        kept.save(mount / "fit")  # the space was given back
        assert ppl_bsvm.load(mount / "fit").method == "vi"
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_checkpoint_that_cannot_be_written_warns_and_the_run_goes_on(small, tmp_path,
                                                                       monkeypatch):
    """A checkpoint on a full disk: a warning naming the folder and the iteration, the run
    finishes and returns its fit, and the folder keeps the checkpoint written before."""
    import errno

    path = tmp_path / "ckpt"
    calls = []
    real_save = Fit.save

    def save_then_fail(self, target, **kwargs):
        calls.append(self.checkpoint.n_iter)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(self, target, **kwargs)

    monkeypatch.setattr(Fit, "save", save_then_fail)
    X, y, _ = small
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = ppl_bsvm.fit(X, y, model="linear", method="gibbs", num_samples=40, num_warmup=40,
                           num_chains=2, seed=5, checkpoint=path, checkpoint_every=20)
    monkeypatch.undo()
    messages = [str(w.message) for w in caught if "checkpoint" in str(w.message)]
    assert messages == [f"checkpoint {str(path)!r} not written after iteration 40 (No space "
                        "left on device); the run goes on, and the folder keeps the last "
                        "checkpoint written"]
    assert calls == [20, 40] and fit.idata.posterior.sizes["draw"] == 40
    assert ppl_bsvm.load(path).checkpoint.n_iter == 20


def test_other_prng_settings_give_the_same_draws_and_resume_a_checkpoint(small, tmp_path):
    """A session with another ``jax_default_prng_impl`` (rbg keys are (4,), threefry's (2,):
    resuming raised a TypeError about key shapes) or ``jax_threefry_partitionable=False``
    gets the same draws from a seed and resumes a checkpoint made without them."""
    X, y, Xt = small
    options = {"num_samples": 40, "num_warmup": 20, "num_chains": 2}
    path = tmp_path / "ckpt"
    plain = _fit(small, "linear", "gibbs", options, checkpoint=path, checkpoint_every=20)
    with jax.default_prng_impl("rbg"), jax.threefry_partitionable(False):
        other = _fit(small, "linear", "gibbs", options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            longer = ppl_bsvm.resume(ppl_bsvm.load(path), X, y, num_samples=60)
    assert plain.idata.equals(other.idata)
    assert longer.posterior["beta"].shape[:2] == (2, 60)
    np.testing.assert_array_equal(longer.posterior["beta"].values[:, :40],
                                  plain.posterior["beta"].values)
