"""Benchmarks: a small PNG line plot with no plotting library (the main environment has no matplotlib): panels of
series of (x, y) points with labels, drawn on an RGB canvas with a 3x5 pixel font and written with zlib.
`scatter_panels(path, panels)` is the one entry point; benchmarks/memory_budget.py draws its plot with it.
"""
from __future__ import annotations

import itertools
import struct
import zlib

_GLYPHS = {  # 3x5 pixels, five rows top to bottom
    "0": "### #.# #.# #.# ###", "1": ".#. ##. .#. .#. ###", "2": "### ..# ### #.. ###", "3": "### ..# ### ..# ###",
    "4": "#.# #.# ### ..# ..#", "5": "### #.. ### ..# ###", "6": "### #.. ### #.# ###", "7": "### ..# ..# .#. .#.",
    "8": "### #.# ### #.# ###", "9": "### #.# ### ..# ###", "A": ".#. #.# ### #.# #.#", "B": "##. #.# ##. #.# ##.",
    "C": ".## #.. #.. #.. .##", "D": "##. #.# #.# #.# ##.", "E": "### #.. ##. #.. ###", "F": "### #.. ##. #.. #..",
    "G": ".## #.. #.# #.# .##", "H": "#.# #.# ### #.# #.#", "I": "### .#. .#. .#. ###", "J": "..# ..# ..# #.# .#.",
    "K": "#.# #.# ##. #.# #.#", "L": "#.. #.. #.. #.. ###", "M": "#.# ### ### #.# #.#", "N": "##. #.# #.# #.# #.#",
    "O": ".#. #.# #.# #.# .#.", "P": "##. #.# ##. #.. #..", "Q": ".#. #.# #.# ### .##", "R": "##. #.# ##. #.# #.#",
    "S": ".## #.. .#. ..# ##.", "T": "### .#. .#. .#. .#.", "U": "#.# #.# #.# #.# ###", "V": "#.# #.# #.# #.# .#.",
    "W": "#.# #.# ### ### #.#", "X": "#.# #.# .#. #.# #.#", "Y": "#.# #.# .#. .#. .#.", "Z": "### ..# .#. #.. ###",
    " ": "... ... ... ... ...", ".": "... ... ... ... .#.", "-": "... ... ### ... ...", "=": "... ### ... ### ...",
    ":": "... .#. ... .#. ...", "(": "..# .#. .#. .#. ..#", ")": "#.. .#. .#. .#. #..", "/": "..# ..# .#. #.. #..",
    ",": "... ... ... .#. #..", "[": "##. #.. #.. #.. ##.", "]": ".## ..# ..# ..# .##", "_": "... ... ... ... ###",
    "+": "... .#. ### .#. ...", "%": "#.# ..# .#. #.. #.#",
}
_GLYPHS = {k: v.replace(" ", "") for k, v in _GLYPHS.items()}
assert all(len(v) == 15 for v in _GLYPHS.values())
WHITE, BLACK, GREY = (255, 255, 255), (40, 40, 40), (200, 200, 200)


class Canvas:
    def __init__(self, width: int, height: int):
        self.w, self.h = width, height
        self.px = bytearray(bytes(WHITE) * (width * height))

    def dot(self, x: int, y: int, color):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(color)

    def box(self, x: int, y: int, w: int, h: int, color):
        for yy in range(y, y + h):
            for xx in range(x, x + w):
                self.dot(xx, yy, color)

    def line(self, x0, y0, x1, y1, color, width: int = 1):
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(n + 1):
            x, y = round(x0 + (x1 - x0) * k / n), round(y0 + (y1 - y0) * k / n)
            self.box(x - width // 2, y - width // 2, width, width, color)

    def text(self, x: int, y: int, s: str, color=BLACK, scale: int = 2):
        for ch in s.upper():
            glyph = _GLYPHS.get(ch, _GLYPHS[" "])
            for r in range(5):
                for c in range(3):
                    if glyph[3 * r + c] == "#":
                        self.box(x + c * scale, y + r * scale, scale, scale, color)
            x += 4 * scale

    def png(self) -> bytes:
        rows = b"".join(b"\x00" + bytes(self.px[3 * self.w * y: 3 * self.w * (y + 1)]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        head = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        body = chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
        return b"\x89PNG\r\n\x1a\n" + body


def text_width(s: str, scale: int = 2) -> int:
    return 4 * scale * len(s)


def _tick(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _panel(c: Canvas, x0: int, y0: int, w: int, h: int, panel: dict):
    """One panel: {"title", "xlabel", "ylabel", "series": [{"name", "color", "points": [(x, y, label)]}]}."""
    left, right, top, bottom = x0 + 70, x0 + w - 20, y0 + 50, y0 + h - 45
    pts = [(x, y) for s in panel["series"] for x, y, _ in s["points"]]
    xs, ys = [p[0] for p in pts] or [0, 1], [p[1] for p in pts] or [0, 1]
    xlo, xhi = min(xs) * 0.95, max(xs) * 1.05 or 1
    ylo, yhi = 0.0, max(ys) * 1.1 or 1
    if xhi <= xlo:
        xhi = xlo + 1

    def at(x, y):
        return (round(left + (x - xlo) / (xhi - xlo) * (right - left)),
                round(bottom - (y - ylo) / (yhi - ylo) * (bottom - top)))

    c.text(x0 + 10, y0 + 8, panel["title"])
    for k in range(5):  # grid and tick labels
        fy, fx = ylo + (yhi - ylo) * k / 4, xlo + (xhi - xlo) * k / 4
        _, py = at(xlo, fy)
        px, _ = at(fx, ylo)
        c.line(left, py, right, py, GREY)
        c.line(px, top, px, bottom, GREY)
        c.text(left - 6 - text_width(_tick(fy)), py - 5, _tick(fy))
        c.text(min(px - text_width(_tick(fx)) // 2, x0 + w - 2 - text_width(_tick(fx))), bottom + 6, _tick(fx))
    c.line(left, top, left, bottom, BLACK)
    c.line(left, bottom, right, bottom, BLACK)
    c.text(right - text_width(panel["xlabel"]), bottom + 24, panel["xlabel"])
    c.text(x0 + 10, y0 + 28, panel["ylabel"])
    lx = x0 + w - 20
    for s in panel["series"]:  # legend, right-aligned under the title
        lx -= text_width(s["name"]) + 24
        c.box(lx, y0 + 10, 10, 10, s["color"])
        c.text(lx + 14, y0 + 10, s["name"])
    for s in panel["series"]:
        ps = [(at(x, y), label) for x, y, label in s["points"]]
        for (a, _), (b, _) in itertools.pairwise(ps):
            c.line(*a, *b, s["color"], width=2)
        for (px, py), label in ps:
            c.box(px - 3, py - 3, 7, 7, s["color"])
            c.text(px + 6, py - 12, label, s["color"])


def scatter_panels(path, panels: list[dict], columns: int = 2, size=(560, 380)):
    """Write panels (see _panel) in a grid of `columns` to a PNG file at path."""
    rows = (len(panels) + columns - 1) // columns
    c = Canvas(size[0] * columns, size[1] * max(rows, 1))
    for k, panel in enumerate(panels):
        _panel(c, (k % columns) * size[0], (k // columns) * size[1], size[0], size[1], panel)
    with open(path, "wb") as f:
        f.write(c.png())
