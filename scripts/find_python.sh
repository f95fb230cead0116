#!/bin/sh
# Print the path of a Python >= 3.12 interpreter, or explain and exit 1.
# Looks at python3.13, python3.12 and python3 on PATH, then at pyenv's installed versions
# (where plain python3 may be 3.11 and the 3.12/3.13 shims are inactive).
ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }
for c in "${PYTHON:-}" python3.13 python3.12 python3; do
    [ -n "$c" ] || continue
    p=$(command -v "$c" 2>/dev/null) || continue
    if ok "$p"; then echo "$p"; exit 0; fi
done
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
# The newest first, as on PATH: the test suite passes on 3.12 and 3.13 alike, and 3.13 ran
# three of its modules in a cold process 3 % faster (213 and 220 s against 223 and 225 s,
# alternated on one 2-core machine; tests/README.md, item 17).
# (globs, not ls, which would sort them back; one that matches nothing fails the check)
for v in "$root"/versions/3.13* "$root"/versions/3.12*; do
    if ok "$v/bin/python3"; then echo "$v/bin/python3"; exit 0; fi
done
echo "error: ppl_bsvm needs Python >= 3.12 (JAX >= 0.11 and ArviZ 1.x require it)," >&2
echo "       and none was found (tried python3.13, python3.12, python3 and pyenv versions)." >&2
echo "       Install one (e.g. 'pyenv install 3.12') or set PYTHON=/path/to/python3.12." >&2
exit 1
