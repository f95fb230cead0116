"""``scripts/browser_check.py``: finding Chromium, cutting a screenshot into tiles, and the
report of code cells a reader sees without output; one test photographs a small page and
skips where Chromium is not installed (as on CI)."""

import stat

import nbformat
import numpy as np
import pytest
from PIL import Image, ImageDraw

from scripts import browser_check as bc


def _executable(path):
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_chromium_variable_wins_over_the_path(tmp_path, monkeypatch):
    on_path = _executable(tmp_path / "chromium")
    chosen = _executable(tmp_path / "my-chrome")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bc.find_browser({}) == str(on_path)
    assert bc.find_browser({"CHROMIUM": str(chosen)}) == str(chosen)
    assert bc.find_browser({"CHROMIUM": "my-chrome"}) == str(chosen)
    # one that is not executable finds nothing, rather than the browser on the PATH
    env = {"CHROMIUM": str(tmp_path / "missing")}
    assert bc.find_browser(env) is None
    assert "$CHROMIUM=" in bc.missing_tool(None, env)


def test_a_missing_tool_is_named_with_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bc.find_browser({}) is None
    message = bc.missing_tool(None, {})
    assert "apt-get install chromium" in message and "\n" not in message
    monkeypatch.setattr(bc.importlib.util, "find_spec", lambda name: None)
    assert "pip install" in bc.missing_tool("/usr/bin/chromium", {})


def _page(height, lines_at):
    """A white page 600 px wide with a 'line of text' (a row of dashes) 10 px tall at each
    y in ``lines_at``."""
    image = Image.new("RGB", (600, height), "white")
    draw = ImageDraw.Draw(image)
    for y in lines_at:
        for x in range(20, 580, 8):
            draw.rectangle((x, y, x + 4, y + 9), fill="black")
    return image


def test_tiles_are_cut_between_lines_and_the_blank_bottom_is_trimmed():
    lines = range(0, 950, 15)  # 10 px of text, 5 px of blank
    image = _page(3000, lines)
    parts = bc.tiles(image, tile_height=400)
    heights = [p.height for p in parts]
    assert all(h <= 400 for h in heights[:-1])
    assert sum(heights) == max(lines) + 10 + bc.TRIM_MARGIN
    # every cut falls in a blank gap, so each line lies whole in one tile
    cuts = np.cumsum(heights)[:-1]
    assert all(not (y <= c < y + 10) for c in cuts for y in lines)
    assert (np.vstack(parts) == np.asarray(image)[:sum(heights)]).all()


def test_a_page_without_blank_rows_is_cut_at_full_tiles():
    noise = np.random.default_rng(0).integers(0, 255, (1000, 300, 3), dtype=np.uint8)
    parts = bc.tiles(Image.fromarray(noise), tile_height=400)
    assert [p.height for p in parts] == [400, 400, 200]


def test_cut_points_cover_the_rows_once():
    quiet = np.zeros(1000, bool)
    quiet[[350, 380, 700]] = True
    assert bc.cut_points(quiet, tile_height=400, search=100) == [0, 380, 700, 1000]
    assert bc.cut_points(quiet[:300], tile_height=400) == [0, 300]


def test_save_tiles_replaces_an_earlier_longer_run(tmp_path):
    for name in ("nb-01.png", "nb-02.png", "nb-03.png", "nb-extra-01.png"):
        Image.new("RGB", (4, 4)).save(tmp_path / name)
    paths = bc.save_tiles([Image.new("RGB", (4, 4))] * 2, tmp_path, "nb")
    assert [p.name for p in paths] == ["nb-01.png", "nb-02.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb-01.png", "nb-02.png",
                                                          "nb-extra-01.png"]


def test_cell_report_finds_gaps_and_errors():
    v4 = nbformat.v4
    error = v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])
    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell("# Title"),
        v4.new_code_cell("\nx = 1", execution_count=1),
        v4.new_code_cell("print(x)", execution_count=2,
                         outputs=[v4.new_output("stream", name="stdout", text="1\n")]),
        v4.new_code_cell("raise ValueError('bad')", execution_count=3, outputs=[error]),
        v4.new_code_cell("", execution_count=None),
        v4.new_code_cell("N = 10", execution_count=4, metadata={"tags": ["parameters"]}),
    ])
    report = bc.cell_report(nb)
    assert report.code_cells == 5
    assert [(i.number, i.prompt, i.first_line) for i in report.without_output] == [
        (2, "In [1]", "x = 1"), (5, "In [ ]", "")]
    assert [(i.number, i.problem) for i in report.errors] == [
        (4, "stored an error: ValueError: bad")]


def test_wide_cells_are_named_by_their_place_in_the_notebook():
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_raw_cell("not on the page"),
        v4.new_markdown_cell("| a | table |"),
        v4.new_code_cell("x = " + "1 + " * 40 + "1", execution_count=7),
    ])
    wide = bc.wide_cells(nb, [(0, "text"), (1, "input")])
    assert [(i.number, i.prompt) for i in wide] == [(2, "markdown"), (3, "In [7]")]
    assert "cut off" in wide[1].problem
    assert wide[1].first_line.endswith("...") and len(wide[1].first_line) == bc.FIRST_LINE_CHARS


@pytest.mark.skipif(bc.find_browser() is None, reason="Chromium is not installed")
def test_chromium_photographs_a_page_in_segments(tmp_path, monkeypatch):
    monkeypatch.setattr(bc, "SEGMENT_HEIGHT", 700)
    monkeypatch.setattr(bc, "VIRTUAL_TIME_MS", 300)
    page = tmp_path / "page.html"
    stripes = "".join(f'<div style="height:300px;background:{c}"></div>'
                      for c in ("red", "lime", "blue", "black"))
    page.write_text(f'<html><body style="margin:0">{stripes}{bc.PROBE}</body></html>')
    browser, profile = bc.find_browser(), tmp_path / "profile"
    facts = bc.measure(browser, profile, page)
    assert facts == bc.PageFacts(height=1200, mathjax=False, wide=[])
    shot = np.asarray(bc.photograph(browser, profile, page, facts.height, tmp_path))
    assert shot.shape == (1200, bc.WIDTH, 3)
    # each stripe where it belongs, across the seam of the two segments, at 700
    for top, colour in zip((0, 300, 600, 900), ((255, 0, 0), (0, 255, 0), (0, 0, 255),
                                                 (0, 0, 0))):
        assert (shot[top + 5:top + 295, ::50] == colour).all(), (top, colour)
