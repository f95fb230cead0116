"""Show what a reader of the stored notebooks sees: ``make browser-check``.

    .venv/bin/python -m scripts.browser_check                            # every notebook
    .venv/bin/python -m scripts.browser_check quickstart validating_vi   # only these
    .venv/bin/python -m scripts.browser_check --out DIR                  # not build/browser_check

Each ``notebooks/<name>.ipynb`` is rendered as stored (not executed) with nbconvert's lab
template to ``<out>/<name>.html``, and headless Chromium photographs the whole page at
:data:`WIDTH` CSS px; the photograph is cut into tiles of about :data:`WIDTH` x
:data:`TILE_HEIGHT` px, ``<name>-01.png``, ``<name>-02.png``, ..., which a person or an image
viewer can read one by one. Per notebook it prints the paths and the number of code cells,
and warns of each code cell that a reader sees without output or with an error, of each cell
wider than the page (its right-hand part is cut off or scrolls out of sight), and when MathJax
did not load.

Equations: the lab template loads MathJax from a CDN. Where Debian's ``libjs-mathjax`` is
installed, the page loads that copy instead, so equations render offline too; otherwise an
offline machine shows them as raw TeX, and the script says so.

Needs Chromium (``chromium``, ``chromium-browser``, ``google-chrome`` on the PATH, or the
``CHROMIUM`` environment variable) and nbconvert (``pip install -e ".[notebooks]"``).
Exit status: 0 when all is well, 1 when a stored output is an error, 2 when Chromium or
nbconvert is missing or Chromium fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageChops

from scripts.notebooks import NOTEBOOKS, ROOT, SETTINGS_TAGS, notebook_paths

OUT = ROOT / "build" / "browser_check"

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
WIDTH = 1200  # CSS px: a desktop reader's window
TILE_HEIGHT = 1500
# Chromium's time for one screenshot grows faster than linearly with the window's height
# (20,000 px: 3 s, 70,000 px: 53 s), so a long page is photographed in segments this tall.
SEGMENT_HEIGHT = 12_000
# Virtual time lets MathJax finish typesetting without a real wait: it stands still while
# files are loading and runs fast while the page is idle.
VIRTUAL_TIME_MS = 10_000
BROWSER_TIMEOUT_S = 180  # real seconds; a segment takes a few
LOCAL_MATHJAX = Path("/usr/share/javascript/mathjax/MathJax.js")  # Debian's libjs-mathjax
MATHJAX_CONFIG = "?config=TeX-AMS_CHTML-full,Safe"  # what nbconvert's CDN address asks for
# Rows of a screenshot with at most this many changes of colour are blank between lines of
# text (the edges of a cell's box only): a tile is cut there rather than through a line.
QUIET_ROW_CHANGES = 8
CUT_SEARCH = 300  # px above a tile's full height in which to look for such a row
TRIM_MARGIN = 20  # px of blank kept under the last content
FIRST_LINE_CHARS = 60  # of a cell's source, to name it in a warning
WIDE_PROBLEMS = {  # by the part of a cell wider than its box on the page
    "input": "has code wider than the page, cut off at its right edge",
    "output": "has output wider than the page: a reader scrolls it sideways, the tiles show "
              "its left part",
    "text": "has text wider than the page: the tiles show its left part",
}

# Added to the copy that Chromium measures and photographs: it writes where --dump-dom can
# read them the page's height, whether MathJax loaded, and the cells (by their position among
# the page's cells) with a part wider than its box, which the tiles show only the left of;
# and it applies the offset in the URL's fragment as a shift upwards (--screenshot
# photographs the page from its top whatever it is scrolled to). It repeats, so that all
# hold after MathJax has changed the layout.
PROBE = """<script>
setInterval(function () {
  var body = document.body, wide = [];
  body.setAttribute("data-browser-check-height", document.documentElement.scrollHeight);
  body.setAttribute("data-browser-check-mathjax", Boolean(window.MathJax));
  document.querySelectorAll(".jp-Cell").forEach(function (cell, i) {
    [["input", ".jp-InputArea-editor"], ["output", ".jp-OutputArea-output"],
     ["text", ".jp-MarkdownOutput"]].forEach(function (part) {
      var boxes = Array.from(cell.querySelectorAll(part[1]));
      if (boxes.some(function (b) { return b.scrollWidth > b.clientWidth + 1; })) {
        wide.push(i + ":" + part[0]);
      }
    });
  });
  body.setAttribute("data-browser-check-wide", wide.join(" "));
  var m = /browser-check-y=(\\d+)/.exec(location.hash);
  if (m) { document.documentElement.style.transform = "translateY(-" + m[1] + "px)"; }
}, 100);
</script>
"""
# The page's scrollHeight is at least the viewport's height, so it is measured in a window
# lower than any notebook.
MEASURE_WINDOW_HEIGHT = 300


class BrowserError(RuntimeError):
    """Chromium failed, timed out, or wrote nothing."""


@dataclass
class CellIssue:
    """A cell that a reader would see with a gap, an error, or cut off."""

    number: int  # the cell's position in the notebook, counting from 1
    prompt: str  # "In [3]" as the page shows it, or "markdown"
    first_line: str
    problem: str


@dataclass
class PageFacts:
    height: int  # CSS px at WIDTH
    mathjax: bool  # whether MathJax loaded: where not, equations show as raw TeX
    wide: list[tuple[int, str]]  # (position among the page's cells, "input"/"output"/"text")


@dataclass
class CellReport:
    code_cells: int = 0
    without_output: list[CellIssue] = field(default_factory=list)
    errors: list[CellIssue] = field(default_factory=list)


def find_browser(env: Mapping[str, str] = os.environ) -> str | None:
    """The Chromium to run: ``$CHROMIUM`` when set (a path or a name on the PATH; None when
    that is not executable, rather than a different browser), else the first of
    :data:`BROWSER_NAMES` on the PATH."""
    if env.get("CHROMIUM"):
        return shutil.which(env["CHROMIUM"])
    return next(filter(None, map(shutil.which, BROWSER_NAMES)), None)


def missing_tool(browser: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    """A one-line message saying how to install what is missing, or None."""
    if browser is None:
        tried = f"$CHROMIUM={env['CHROMIUM']}" if env.get("CHROMIUM") else ", ".join(BROWSER_NAMES)
        return f"no Chromium found (tried {tried}): on Debian/Ubuntu, apt-get install chromium"
    if importlib.util.find_spec("nbconvert") is None:
        return 'nbconvert is not installed: pip install -e ".[notebooks]" (or nbconvert alone)'
    return None


def mathjax_url() -> str | None:
    """A local MathJax for nbconvert's ``mathjax_url``, or None for nbconvert's CDN."""
    return LOCAL_MATHJAX.as_uri() + MATHJAX_CONFIG if LOCAL_MATHJAX.exists() else None


def cell_issue(number: int, cell: Mapping, problem: str) -> CellIssue:
    """``problem`` of the ``number``-th cell, named by its prompt and first line."""
    source = "".join(cell["source"])  # a list of lines in a notebook read as plain JSON
    first_line = next((line.strip() for line in source.splitlines() if line.strip()), "")
    if len(first_line) > FIRST_LINE_CHARS:
        first_line = first_line[:FIRST_LINE_CHARS - 3] + "..."
    prompt = cell["cell_type"]
    if prompt == "code":
        prompt = f"In [{cell.get('execution_count') or ' '}]"
    return CellIssue(number, prompt, first_line, problem)


def cell_report(nb: Mapping) -> CellReport:
    """The code cells of ``nb`` that show a reader nothing (but the run-size cells, which
    print nothing by design: :data:`scripts.notebooks.SETTINGS_TAGS`), and those that show
    an error."""
    report = CellReport()
    for number, cell in enumerate(nb["cells"], start=1):
        if cell["cell_type"] != "code":
            continue
        report.code_cells += 1
        settings = SETTINGS_TAGS & set(cell.get("metadata", {}).get("tags", []))
        if not cell["outputs"] and not settings:
            report.without_output.append(cell_issue(number, cell, "has no stored output"))
        report.errors += [
            cell_issue(number, cell, f"stored an error: {out['ename']}: {out['evalue']}")
            for out in cell["outputs"] if out["output_type"] == "error"]
    return report


def wide_cells(nb: Mapping, wide: Sequence[tuple[int, str]]) -> list[CellIssue]:
    """The cells of ``nb`` at the positions in ``wide`` among the page's cells."""
    # The lab template renders every cell but a raw one as a .jp-Cell, in order.
    shown = [(n, cell) for n, cell in enumerate(nb["cells"], start=1)
             if cell["cell_type"] != "raw"]
    return [cell_issue(*shown[i], WIDE_PROBLEMS[part]) for i, part in wide]


def render_html(nb, name: str, mathjax: str | None) -> str:
    """``nb`` as nbconvert's lab template renders it, its images embedded so that the page
    needs nothing beside it."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", embed_images=True)
    if mathjax:
        exporter.mathjax_url = mathjax
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": name}})
    return body


def browser_command(browser: str, profile: Path, height: int) -> list[str]:
    """Headless Chromium with a fresh profile and a window :data:`WIDTH` x ``height``."""
    command = [browser, "--headless", f"--user-data-dir={profile}", "--hide-scrollbars",
               f"--window-size={WIDTH},{height}", "--force-device-scale-factor=1",
               "--run-all-compositor-stages-before-draw", "--no-first-run",
               f"--virtual-time-budget={VIRTUAL_TIME_MS}"]
    # Chromium refuses to start as root with its sandbox on.
    return command + ["--no-sandbox"] if os.geteuid() == 0 else command


def run_browser(command: list[str]) -> str:
    """Run Chromium and return what it printed on stdout."""
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BrowserError(f"Chromium took more than {BROWSER_TIMEOUT_S} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise BrowserError(f"Chromium exited with status {done.returncode}: {last}")
    return done.stdout


def measure(browser: str, profile: Path, page: Path) -> PageFacts:
    """What :data:`PROBE` reports of ``page`` once its scripts have run."""
    dom = run_browser(browser_command(browser, profile, MEASURE_WINDOW_HEIGHT)
                      + ["--dump-dom", page.as_uri()])
    height = re.search(r'data-browser-check-height="(\d+)"', dom)
    wide = re.search(r'data-browser-check-wide="([^"]*)"', dom)
    if height is None or wide is None:
        raise BrowserError(f"Chromium did not report the measures of {page}")
    return PageFacts(int(height.group(1)), 'data-browser-check-mathjax="true"' in dom,
                     [(int(i), part) for i, part in re.findall(r"(\d+):(\w+)", wide.group(1))])


def photograph(browser: str, profile: Path, page: Path, height: int, work: Path) -> Image.Image:
    """The whole page, ``height`` px tall, pieced together from segments."""
    whole = Image.new("RGB", (WIDTH, height), "white")
    for top in range(0, height, SEGMENT_HEIGHT):
        size = min(SEGMENT_HEIGHT, height - top)
        shot = work / f"segment-{top}.png"
        shot.unlink(missing_ok=True)  # left by the notebook before
        run_browser(browser_command(browser, profile, size)
                    + [f"--screenshot={shot}", f"{page.as_uri()}#browser-check-y={top}"])
        if not shot.exists():
            raise BrowserError(f"Chromium wrote no screenshot of {page}")
        with Image.open(shot) as segment:
            whole.paste(segment.convert("RGB"), (0, top))
    return whole


def content_bottom(image: Image.Image) -> int:
    """The number of rows of ``image`` above the blank ones (of its bottom-right pixel's
    colour) at its bottom."""
    rgb = image.convert("RGB")
    background = Image.new("RGB", rgb.size, rgb.getpixel((rgb.width - 1, rgb.height - 1)))
    box = ImageChops.difference(rgb, background).getbbox()
    return box[3] if box else 0


def quiet_rows(image: Image.Image) -> np.ndarray:
    """Per row of ``image``, whether a cut there passes through no text."""
    grey = np.asarray(image.convert("L"), dtype=np.int16)
    changes = np.count_nonzero(np.diff(grey, axis=1), axis=1)
    return changes <= QUIET_ROW_CHANGES


def cut_points(quiet: np.ndarray, tile_height: int = TILE_HEIGHT,
               search: int = CUT_SEARCH) -> list[int]:
    """The rows at which tiles of at most ``tile_height`` rows start and end (first 0, last
    the number of rows): at the lowest quiet row within ``search`` rows of a tile's full
    height, else at its full height."""
    points = [0]
    while len(quiet) - points[-1] > tile_height:
        full = points[-1] + tile_height
        low = max(points[-1] + 1, full - search)
        window = np.flatnonzero(quiet[low:full])
        points.append(low + int(window[-1]) if window.size else full)
    return points + [len(quiet)]


def tiles(image: Image.Image, tile_height: int = TILE_HEIGHT) -> list[Image.Image]:
    """``image`` cut into tiles between lines of text, its blank bottom trimmed to
    :data:`TRIM_MARGIN` (so the last tile can be that much taller)."""
    content = content_bottom(image)
    points = cut_points(quiet_rows(image)[:content], tile_height)
    points[-1] = min(image.height, content + TRIM_MARGIN)
    return [image.crop((0, top, image.width, bottom))
            for top, bottom in zip(points, points[1:])]


def save_tiles(parts: Sequence[Image.Image], out: Path, name: str) -> list[Path]:
    """Write ``<name>-01.png``, ... to ``out``, removing tiles of an earlier, longer run."""
    for old in out.glob(f"{name}-*.png"):
        if re.fullmatch(rf"{re.escape(name)}-\d{{2,}}\.png", old.name):
            old.unlink()
    paths = [out / f"{name}-{i:02d}.png" for i in range(1, len(parts) + 1)]
    for part, path in zip(parts, paths):
        part.save(path)
    return paths


def read_notebook(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def check_notebook(path: Path, out: Path, browser: str, work: Path,
                   mathjax: str | None) -> CellReport:
    """Render, photograph and report one notebook."""
    nb = read_notebook(path)
    html = out / f"{path.stem}.html"
    html.write_text(render_html(nb, path.stem, mathjax), encoding="utf-8")
    # The probe goes into a copy, so that the HTML a person opens is nbconvert's alone.
    probed = work / html.name
    probed.write_text(html.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"),
                      encoding="utf-8")
    profile = work / "profile"
    facts = measure(browser, profile, probed)
    shot = photograph(browser, profile, probed, facts.height, work)
    report = cell_report(nb)
    print_report(path.stem, html, save_tiles(tiles(shot), out, path.stem), facts, report,
                 wide_cells(nb, facts.wide))
    return report


def print_report(name: str, html: Path, tile_paths: Sequence[Path], facts: PageFacts,
                 report: CellReport, wide: Sequence[CellIssue]) -> None:
    print(f"{name}: {_shown(html)}")
    for path in tile_paths:
        print(f"  {_shown(path)}")
    print(f"  code cells: {report.code_cells}, "
          f"without stored output: {len(report.without_output)}")
    if not facts.mathjax:
        print("  warning: MathJax did not load: any equations show as raw TeX")
    issues = [*report.without_output, *report.errors, *wide]
    for issue in sorted(issues, key=lambda i: i.number):
        print(f"  warning: cell {issue.number} ({issue.prompt}) {issue.problem}: "
              f"{issue.first_line}")


def _shown(path: Path) -> str:
    """``path`` relative to the working directory where it is inside it."""
    return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.browser_check",
        description="Render the stored notebooks to HTML and screenshot them in Chromium.")
    parser.add_argument("names", nargs="*", help="notebooks to check (default: all)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    args = parser.parse_args(argv)
    paths = notebook_paths(args.names)
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such notebook in {NOTEBOOKS}: {', '.join(missing)}")
    browser = find_browser()
    problem = missing_tool(browser)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    mathjax = mathjax_url()
    print(f"equations: MathJax from {mathjax}" if mathjax else
          "equations: MathJax from its CDN (unreachable offline; apt-get install libjs-mathjax "
          "for a local copy)")
    args.out.mkdir(parents=True, exist_ok=True)
    errors = 0
    with tempfile.TemporaryDirectory(prefix="browser-check-") as work:
        for path in paths:
            try:
                report = check_notebook(path, args.out.resolve(), browser, Path(work), mathjax)
            except BrowserError as exc:
                print(f"{path.stem}: {exc}", file=sys.stderr)
                return 2
            errors += len(report.errors)
    if errors:
        print(f"{errors} stored error output(s): a reader sees a traceback", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
