"""Helpers for tests that read or tamper with a saved fit's files (``ppl_bsvm._store``)."""

import hashlib
import json
from pathlib import Path


def saved_file(path, key: str) -> Path:
    """The file of ``key`` (``"posterior"``, ``"fields"``, ``"arrays"``) of the fit at ``path``."""
    meta = json.loads((Path(path) / "meta.json").read_text())
    return Path(path) / meta["files"][key]


def rewrite(path, key: str, data: bytes) -> None:
    """Replace a saved fit's file and its checksum, as someone who edits both would."""
    saved_file(path, key).write_bytes(data)
    meta_path = Path(path) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["sha256"][key] = hashlib.sha256(data).hexdigest()
    meta_path.write_text(json.dumps(meta))
