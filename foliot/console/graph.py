"""A workflow drawn as SVG, server-side, from its definition document (pure; no I/O).

Steps stand in a column in definition order, the sentinels they reach below them. An edge to
the next box is a short arrow; every other edge (a jump, a loop back, `onFailure`,
`onTimeout`, a choice) runs in its own lane to the right, labelled. Marks: the current step,
the steps the run passed through, the steps that failed.
"""

from __future__ import annotations

from html import escape
from typing import Any, Final

import attrs

from ..core.workflow.definition import SENTINELS

BOX_W: Final = 230
BOX_H: Final = 38
GAP: Final = 26
LEFT: Final = 12
TOP: Final = 12
LANE: Final = 16
LABEL_LINE: Final = 13  # vertical room for one edge label


@attrs.frozen
class Edge:
    source: str
    target: str
    label: str  # "" for the plain `next`
    kind: str  # next | failure | timeout | choice | default | signal


@attrs.frozen
class Marks:
    current: str | None = None
    visited: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()


def edges(document: dict[str, Any]) -> list[Edge]:
    """Every transition a definition allows, in step order."""
    steps = document.get("steps") or []
    names = [s["name"] for s in steps]
    out: list[Edge] = []
    for i, step in enumerate(steps):
        name = step["name"]
        following = names[i + 1] if i + 1 < len(names) else "$end"
        kind = step.get("type")
        if kind == "choice":
            for n, choice in enumerate(step.get("choices") or []):
                out.append(Edge(name, choice["next"], f"when #{n + 1}", "choice"))
            if step.get("default"):
                out.append(Edge(name, step["default"], "default", "default"))
            continue
        out.append(Edge(name, step.get("next") or following, "", "next"))
        if step.get("onFailure"):
            out.append(Edge(name, step["onFailure"], "on failure", "failure"))
        if step.get("onTimeout"):
            out.append(Edge(name, step["onTimeout"], "on timeout", "timeout"))
        for signal, target in (step.get("onSignal") or {}).items():
            out.append(Edge(name, target, f"on {signal}", "signal"))
    return out


def render(document: dict[str, Any], marks: Marks = Marks()) -> str:
    """The SVG text (every name escaped)."""
    steps = document.get("steps") or []
    all_edges = edges(document)
    order = [s["name"] for s in steps]
    order += [s for s in ("$end", "$fail", "$stuck") if any(e.target == s for e in all_edges)]
    kinds = {s["name"]: s.get("type", "") for s in steps}
    row = {name: i for i, name in enumerate(order)}
    lanes = [e for e in all_edges if not (e.kind == "next" and row.get(e.target) == row[e.source] + 1)]
    leaving: dict[str, int] = {}
    for e in lanes:
        leaving[e.source] = leaving.get(e.source, 0) + 1
    # A box is as tall as the lanes leaving it need (one label line each), so labels never overlap.
    heights = {name: max(BOX_H, 10 + LABEL_LINE * leaving.get(name, 0)) for name in order}
    tops: dict[str, int] = {}
    y = TOP
    for name in order:
        tops[name] = y
        y += heights[name] + GAP
    width = LEFT + BOX_W + 40 + LANE * len(lanes) + 90
    height = y
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="workflow graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
    ]
    for name in order:
        x, y = LEFT, tops[name]
        box_h = heights[name]
        classes = ["node", "sentinel" if name in SENTINELS else f"kind-{escape(kinds.get(name, ''))}"]
        if name in marks.visited and name not in marks.failed:
            classes.append("visited")
        if name in marks.failed:
            classes.append("failed")
        if name == marks.current:
            classes.append("current")
        label = escape(name) if name in SENTINELS else f"{escape(name)} · {escape(kinds.get(name, ''))}"
        parts.append(
            f'<g class="{" ".join(classes)}" data-step="{escape(name)}"><title>{escape(name)}</title>'
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{box_h}" rx="6"/>'
            f'<text x="{x + 10}" y="{y + BOX_H / 2 + 5}">{label}</text></g>'
        )
    for e in all_edges:
        if e not in lanes and e.source in row and e.target in row:
            y0 = tops[e.source] + heights[e.source]
            parts.append(
                f'<line class="edge" x1="{LEFT + BOX_W / 2}" y1="{y0}" x2="{LEFT + BOX_W / 2}" '
                f'y2="{y0 + GAP - 2}" marker-end="url(#arrow)"/>'
            )
    from_source: dict[str, int] = {}
    for lane, e in enumerate(lanes):
        if e.source not in row or e.target not in row:
            continue
        nth = from_source.get(e.source, 0)  # the n-th lane leaving this box: its own height
        from_source[e.source] = nth + 1
        ys = tops[e.source] + 10 + LABEL_LINE * nth
        yt = tops[e.target] + BOX_H / 2 + 6
        xr = LEFT + BOX_W
        xl = xr + 20 + LANE * lane
        parts.append(
            f'<path class="edge edge-{e.kind}" d="M {xr} {ys} H {xl} V {yt} H {xr + 2}" fill="none" '
            f'marker-end="url(#arrow)"/>'
        )
        if e.label:
            # Just right of the box, on its own lane's line: one line per lane leaving the box.
            parts.append(f'<text class="edge-label" x="{xr + 4}" y="{ys - 2}">{escape(e.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
