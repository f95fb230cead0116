"""Summarise a profile of the test suite (``tests/_profile.py``): by module and by program.

    PPL_BSVM_TEST_PROFILE=/tmp/profile make test
    python -m tests.profile_report /tmp/profile [--top 25]

Prints Markdown tables: per test module its tests, wall seconds (summed over workers), the
seconds of tracing, lowering and XLA compilation in them, and the programs compiled or loaded
from the persistent cache (JAX logs both alike); per program name how often it was
compiled, with how many distinct signatures, the seconds it took and in how many modules; the
compile seconds per entry point (the public ppl_bsvm function, or the test file) and per call
site (the line that asked for the programs); and the programs a worker compiled again at a
signature it had compiled before, per call site, with the tests of the first compilation and of
the repeat: another static option, which the tests choose, or a program compiled again for
arguments that differ in what the signature does not show (their commitment to a device, a
static value hashed by identity), which the library should not do (tests/README.md items 18
and 19).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def load(folder: Path) -> list[dict]:
    """The tests' rows in the order each worker ran them, each with its ``worker`` (the file)."""
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        rows += [{**json.loads(line), "worker": path.stem}
                 for line in path.read_text().splitlines() if line.strip()]
    return rows


def module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def by_module(rows: list[dict]) -> list[dict]:
    out = collections.defaultdict(lambda: {"tests": 0, "wall": 0.0, "trace": 0.0, "lower": 0.0,
                                           "compile": 0.0, "programs": 0})
    for row in rows:
        m = out[module_of(row["test"])]
        m["tests"] += 1
        for key in ("wall", "trace", "lower", "compile"):
            m[key] += row.get(key, 0.0)
        m["programs"] += len(row.get("programs", []))
    return sorted(({"module": k, **v} for k, v in out.items()), key=lambda r: -r["wall"])


def compiled(row: dict) -> list[tuple[str, float, str, str]]:
    """``(name, seconds, signature, site)`` of each program compiled in a test."""
    return [tuple(entry) for entry in row.get("programs", [])]


def by_program(rows: list[dict]) -> list[dict]:
    count, seconds = collections.Counter(), collections.Counter()
    modules, variants = collections.defaultdict(set), collections.defaultdict(set)
    for row in rows:
        for name, secs, signature, _ in compiled(row):
            count[name] += 1
            seconds[name] += secs
            modules[name].add(module_of(row["test"]))
            variants[name].add(signature)
    return [{"program": name, "compiles": count[name], "variants": len(variants[name]),
             "seconds": secs, "modules": len(modules[name])}
            for name, secs in seconds.most_common()]


def call_site(site: str) -> str:
    """The line that asked for a program (the first of its recorded ``line < entry`` chain)."""
    return site.split(" < ")[0]


def by_site(rows: list[dict]) -> list[dict]:
    """Compile seconds per call site (the line of ppl_bsvm, else of the tests, that asked for
    the programs): where sharing or jitting would save the most."""
    count, seconds = collections.Counter(), collections.Counter()
    names = collections.defaultdict(collections.Counter)
    for row in rows:
        for name, secs, _, site in compiled(row):
            site = call_site(site)
            count[site] += 1
            seconds[site] += secs
            names[site][name] += 1
    return [{"site": site or "?", "compiles": count[site], "seconds": secs,
             "programs": ", ".join(f"{n} x{c}" for n, c in names[site].most_common(3))}
            for site, secs in seconds.most_common()]


def by_entry(rows: list[dict]) -> list[dict]:
    """Compile seconds per entry point: the outermost ppl_bsvm line on the stack (a public
    function the test called), else the test's own line."""
    count, seconds = collections.Counter(), collections.Counter()
    for row in rows:
        for _, secs, _, site in compiled(row):
            entry = site.split(" < ")[-1].rsplit(":", 1)[0] if site else "?"
            count[entry] += 1
            seconds[entry] += secs
    return [{"entry": e, "compiles": count[e], "seconds": s} for e, s in seconds.most_common()]


REPEAT_MIN_SECONDS = 0.1
"""Compilations shorter than this are left out of :func:`repeats` (loads from the persistent
cache after a release of the programs, a few milliseconds each)."""


def repeats(rows: list[dict]) -> list[dict]:
    """Per call site, the programs a worker compiled again at a ``(name, site, signature)`` it
    had compiled in an earlier or the same test: their count, seconds, and the first such pair
    of tests (``first -> again``)."""
    count, seconds, example = collections.Counter(), collections.Counter(), {}
    seen: dict[tuple, str] = {}
    for row in rows:
        for name, secs, signature, site in compiled(row):
            if secs < REPEAT_MIN_SECONDS:
                continue
            key = (row.get("worker"), name, call_site(site), signature)
            if key in seen:
                count[key[2]] += 1
                seconds[key[2]] += secs
                example.setdefault(key[2], f"{seen[key]} -> {row['test']}")
            else:
                seen[key] = row["test"]
    return [{"site": site or "?", "repeats": count[site], "seconds": secs,
             "first -> again": example[site]} for site, secs in seconds.most_common()]


def markdown(rows: list[dict], columns: list[str]) -> str:
    def cell(v):
        return f"{v:.0f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    rows = load(args.folder)
    if not rows:
        parser.error(f"no profile lines in {args.folder}")
    modules = by_module(rows)
    total = {k: sum(m[k] for m in modules) for k in ("wall", "trace", "lower", "compile")}
    print(f"{len(rows)} tests, {total['wall']:.0f} s of test time over the workers; tracing "
          f"{total['trace']:.0f} s, lowering {total['lower']:.0f} s, XLA compilation "
          f"{total['compile']:.0f} s")
    print()
    print(markdown(modules[:args.top], ["module", "tests", "wall", "trace", "lower", "compile",
                                         "programs"]))
    print()
    print(markdown(by_program(rows)[:args.top], ["program", "compiles", "variants", "seconds",
                                                   "modules"]))
    print()
    print(markdown(by_entry(rows)[:args.top], ["entry", "compiles", "seconds"]))
    print()
    print(markdown(by_site(rows)[:args.top], ["site", "compiles", "seconds", "programs"]))
    print()
    again = repeats(rows)
    print(f"Compiled again in a worker at a signature it had compiled: "
          f"{sum(r['seconds'] for r in again):.0f} s")
    print()
    print(markdown(again[:args.top], ["site", "repeats", "seconds", "first -> again"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
