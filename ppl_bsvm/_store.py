"""Saved-fit directories: what is in them, how they are replaced, who may write them.

A directory written by :meth:`ppl_bsvm.Fit.save` (format 3)::

    path/
        meta.json          format, versions, method, model, data fingerprint, generation, the
                           names of the data files below and their SHA-256 checksums
        posterior.<g>.nc   the ArviZ tree as netCDF (``xarray.open_datatree``)
        fit.<g>.json       the rest of the fit as JSON (``ppl_bsvm._serial``)
        arrays.<g>.npz     its arrays

**Replacing a fit never loses it.** A save writes the data files of a new generation ``g``
beside the current ones, then replaces ``meta.json`` in one atomic rename: that rename is the
commit. A save interrupted at any point leaves ``meta.json`` naming either the old files or
the new ones, both complete; the next save removes what an interrupted one left (files of
the library's naming pattern that ``meta.json`` does not name). Only files the library wrote
are ever deleted: a user's ``notes.txt`` in the directory stays.

**Integrity.** :func:`read` checks every data file against its checksum before anything is
decoded: a changed or corrupted file is an error, never silently different draws.

**One writer.** :func:`writer_lock` takes the lock file ``.<name>.lock`` beside the directory
(created exclusively; a lock whose process has died is taken over), so two runs given the same
``checkpoint`` do not overwrite each other: the second is refused before it starts. Within
a process the lock belongs to the thread that took it (:func:`holds_lock`): the run's own
checkpoints go through, another thread's save to the same folder is refused.

Format 2 (the four files without generations or checksums) is read as well; directories of
the format before it (a pickle) are refused by :func:`ppl_bsvm.load`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import threading
from pathlib import Path
from typing import Any

__all__ = ["META_FILE", "read_meta", "files_of", "write", "check_files", "writer_lock",
           "remove_leftovers"]

META_FILE = "meta.json"
_LEGACY = {"posterior": "posterior.nc", "fields": "fit.json", "arrays": "arrays.npz"}
"""The data files of format 2, which had fixed names."""
_GENERATION_FILE = re.compile(r"^(posterior\.\d+\.nc|fit\.\d+\.json|arrays\.\d+\.npz)$")
_META_TMP = re.compile(r"^\.meta\.json\.tmp-\d+$")
_OLD_SCHEME_TMP = r"^\.{name}\.(tmp|old)-(\d+)$"
"""Sibling directories that format-2 saves renamed through (an interrupted save left them)."""


def read_meta(path: Path) -> dict | None:
    """The ``meta.json`` of a saved fit at ``path``, or None when ``path`` holds none (a
    ``meta.json`` that is not the library's, with no integer ``format``, is not one)."""
    try:
        meta = json.loads((Path(path) / META_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("format"), int) \
            or isinstance(meta["format"], bool):
        return None
    if meta["format"] >= 3:  # the library's own meta names its files
        ok = isinstance(meta.get("files"), dict) and set(meta["files"]) == set(_LEGACY)
    elif meta["format"] == 2:
        ok = all((Path(path) / name).is_file() for name in _LEGACY.values())
    else:
        ok = (Path(path) / "fit.pkl").is_file()
    return meta if ok else None


def files_of(meta: dict) -> dict[str, str]:
    """``{"posterior", "fields", "arrays"} -> file name`` of the saved fit ``meta`` describes."""
    return dict(meta["files"]) if meta["format"] >= 3 else dict(_LEGACY)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_files(path: Path, meta: dict) -> None:
    """``ValueError`` naming the first data file that is missing or differs from its checksum."""
    for key, name in files_of(meta).items():
        file = Path(path) / name
        if not file.is_file():
            raise ValueError(f"{str(path)!r}: the saved fit's {name} is missing")
        expected = meta.get("sha256", {}).get(key)
        if expected is not None and _sha256(file) != expected:
            raise ValueError(
                f"{str(path)!r}: {name} does not match the checksum recorded when the fit was "
                "saved; the file was changed or corrupted. Re-create the fit (or, for the "
                "posterior alone, open the file with xarray.open_datatree at your own risk)"
            )


def write(path: Path, writers: dict, meta: dict, old: dict | None) -> None:
    """Write a new generation of the data files (``writers[key](file)`` writes one) and commit
    it by replacing ``meta.json``; then remove the previous generation's files.

    ``path`` exists; ``old`` is its current :func:`read_meta` (None for a new directory);
    ``meta`` is completed with the generation, file names and checksums.
    """
    path = Path(path)
    generation = (old.get("generation", 0) if old is not None else 0) + 1
    names = {"posterior": f"posterior.{generation}.nc", "fields": f"fit.{generation}.json",
             "arrays": f"arrays.{generation}.npz"}
    tmp = path / f".{META_FILE}.tmp-{os.getpid()}"
    try:
        for key, name in names.items():
            writers[key](path / name)
        meta = {**meta, "generation": generation, "files": names,
                "sha256": {key: _sha256(path / name) for key, name in names.items()}}
        tmp.write_text(json.dumps(meta, indent=1) + "\n")
        os.replace(tmp, path / META_FILE)  # the commit
    except Exception:  # an interrupt is a dead process: the next save removes its files
        # a failed save (a full disk, say) leaves the committed generation as it was and
        # gives back the space its own partial files took
        for partial in (*(path / name for name in names.values()), tmp):
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        raise
    remove_leftovers(path, keep=set(names.values()),
                     also=set(files_of(old).values()) if old is not None else set())


def remove_leftovers(path: Path, keep: set[str], also: set[str] = frozenset()) -> None:
    """Remove the library's files in ``path`` that the committed ``meta.json`` does not name
    (``keep``): earlier generations, an interrupted save's files and temporaries, and the
    ``also`` files (format 2's fixed names being replaced). Nothing else is touched."""
    for entry in Path(path).iterdir():
        name = entry.name
        ours = _GENERATION_FILE.match(name) or _META_TMP.match(name) or name in also
        if ours and name not in keep and entry.is_file():
            entry.unlink(missing_ok=True)


def old_scheme_leftovers(path: Path) -> list[Path]:
    """Sibling directories an interrupted format-2 save left (``.<name>.tmp-PID`` with the new
    copy, ``.<name>.old-PID`` with the old one), newest first."""
    path = Path(path)
    pattern = re.compile(_OLD_SCHEME_TMP.format(name=re.escape(path.name)))
    found = [p for p in path.parent.glob(f".{path.name}.*") if pattern.match(p.name)
             and p.is_dir() and read_meta(p) is not None]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def writer_lock(path):
    """Hold the lock of the saved-fit directory ``path`` (see the module docstring);
    ``ValueError`` naming the process that holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock_path(path)
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            if holder is not None and (holder.get("host") != me["host"]
                                       or _alive(int(holder.get("pid", -1)))):
                raise ValueError(
                    f"{str(path)!r} is being written by another run (process "
                    f"{holder.get('pid')} on {holder.get('host')}, lock file {str(lock)!r}); "
                    "use another path, or wait for that run to finish"
                ) from None
            lock.unlink(missing_ok=True)  # its process died: take the lock over
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    else:
        raise ValueError(f"could not take the lock {str(lock)!r} of {str(path)!r}")
    key = _held_key(path)
    with _held_guard:
        _held[key] = threading.get_ident()
    try:
        yield
    finally:
        with _held_guard:
            _held.pop(key, None)
        lock.unlink(missing_ok=True)


def _holder(lock: Path) -> dict[str, Any] | None:
    try:
        holder = json.loads(lock.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


_held: dict[str, int] = {}  # the locks this process holds: resolved path -> holding thread
_held_guard = threading.Lock()


def _held_key(path) -> str:
    return str(Path(path).resolve())


def holds_lock(path) -> bool:
    """True when this thread holds the lock of ``path`` (a checkpoint's save inside the run
    that took it). Per thread, not per process: another thread saving to a running
    checkpoint's folder (``Fit.save(path, overwrite=True)``) must be refused, not let in as
    the run's own save."""
    with _held_guard:
        return _held.get(_held_key(path)) == threading.get_ident()
