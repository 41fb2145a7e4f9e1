"""A run's graph as SVG: steps laid out in layers (grandalf's Sugiyama layout), each drawn
with its status; ``for_each`` blocks framed as groups, conditions as dotted edges."""

from __future__ import annotations

import html
from collections.abc import Mapping

from brain.dsl.model import WorkflowGraph

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 150, 34, 30, 28, 16


class _View:
    def __init__(self) -> None:
        self.w, self.h = NODE_W + GAP_X, NODE_H + GAP_Y
        self.xy = (0.0, 0.0)


def layout(graph: WorkflowGraph) -> dict[str, tuple[float, float]]:
    """Top-left corner of each step's box; disconnected parts side by side."""
    from grandalf.graphs import Edge, Graph, Vertex
    from grandalf.layouts import SugiyamaLayout

    vertices = {name: Vertex(name) for name in graph.nodes}
    for v in vertices.values():
        v.view = _View()
    g = Graph(list(vertices.values()), [Edge(vertices[a], vertices[b]) for a, b in graph.edges
                                        if a in vertices and b in vertices])
    where: dict[str, tuple[float, float]] = {}
    left = 0.0
    for part in g.C:
        sugiyama = SugiyamaLayout(part)
        sugiyama.init_all()
        sugiyama.draw()
        xs = [v.view.xy[0] for v in part.sV]
        shift = left - min(xs)
        for v in part.sV:
            x, y = v.view.xy
            where[v.data] = (x + shift, y - NODE_H / 2)
        left += max(xs) - min(xs) + NODE_W + GAP_X
    return where


def svg(graph: WorkflowGraph, statuses: Mapping[str, str]) -> str:
    """The graph as an inline SVG document fragment (classes ``st-<status>`` per step)."""
    where = layout(graph)
    if not where:
        return ""
    width = max(x for x, _ in where.values()) + NODE_W + 2 * PAD
    height = max(y for _, y in where.values()) + NODE_H + 2 * PAD
    parts = [f'<svg class="graph" viewBox="{-PAD} {-PAD} {width:.0f} {height:.0f}" '
             f'width="{width:.0f}" role="img" aria-label="the run\'s steps">']
    for group in graph.groups:
        boxes = [where[s] for s in group.steps if s in where]
        if not boxes:
            continue
        x0, y0 = min(x for x, _ in boxes) - 8, min(y for _, y in boxes) - 18
        x1, y1 = max(x for x, _ in boxes) + NODE_W + 8, max(y for _, y in boxes) + NODE_H + 8
        parts.append(f'<g class="group"><rect x="{x0:.0f}" y="{y0:.0f}" width="{x1 - x0:.0f}" '
                     f'height="{y1 - y0:.0f}" rx="8"/><text x="{x0 + 6:.0f}" y="{y0 + 12:.0f}">'
                     f'{html.escape(group.label)}</text></g>')
    for up, down in graph.edges:
        if up not in where or down not in where:
            continue
        (ux, uy), (dx, dy) = where[up], where[down]
        when = any(c in (f"{{{up}}}", f"not {{{up}}}") for c in graph.conditions.get(down, ()))
        parts.append(f'<path class="edge{" when" if when else ""}" d="M{ux + NODE_W / 2:.0f} '
                     f'{uy + NODE_H:.0f} C{ux + NODE_W / 2:.0f} {uy + NODE_H + 14:.0f} '
                     f'{dx + NODE_W / 2:.0f} {dy - 14:.0f} {dx + NODE_W / 2:.0f} {dy:.0f}"/>')
    for name, (x, y) in where.items():
        status = statuses.get(name, "pending")
        label = name if len(name) <= 18 else name[:17] + "…"
        title = html.escape(name + "".join(f" when {c}" for c in graph.conditions.get(name, ())))
        parts.append(f'<a href="#step-{html.escape(name)}"><g class="node st-{status}" '
                     f'data-step="{html.escape(name)}"><title>{title}</title>'
                     f'<rect x="{x:.0f}" y="{y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
                     f'<text x="{x + NODE_W / 2:.0f}" y="{y + NODE_H / 2 + 4:.0f}">'
                     f'{html.escape(label)}</text></g></a>')
    parts.append("</svg>")
    return "".join(parts)
