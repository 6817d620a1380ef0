"""The estimator reference, generated at build time from ``cvflow.estimators.REGISTRY``.

``.. cvflow-estimators::`` (in MyST: a ```` ```{cvflow-estimators} ```` fence) writes one
section per declared estimator: its one-line summary, the split roles it reads, what it
accepts (per-fold metrics, time-ordered folds), its options with their defaults and
descriptions, and its result variables with their dimensions. Nothing is written by hand, so
an estimator declared in its module appears here at the next build.
"""
from __future__ import annotations

import inspect

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _rst_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A list-table: cells may hold any inline markup, no column widths to keep aligned."""
    out = [".. list-table::", "   :header-rows: 1", ""]
    for row in [header, *rows]:
        out.append(f"   * - {row[0]}")
        out.extend(f"     - {cell}" for cell in row[1:])
    return out + [""]


def estimator_rst(spec) -> list[str]:
    """reStructuredText lines documenting one declaration (a :class:`cvflow.estimators.Estimator`)."""
    doc = inspect.getdoc(spec.func) or ""
    summary = doc.split("\n\n")[0].replace("\n", " ") if doc else ""
    title = spec.name
    lines = [f".. _estimator-{spec.name}:", "", title, "~" * len(title), "", summary, ""]
    lines += [f"- **split roles read**: {', '.join(f'``{r}``' for r in spec.needs)}",
              f"- **per-fold metrics** (``roc_auc``, ``r2``, ...): {'yes' if spec.metrics else 'no'}",
              f"- **time-ordered folds**: {'yes' if spec.time_ordered else 'no'}",
              f"- **Python**: :func:`cvflow.estimators.{spec.name}`"
              f" — ``cvflow.estimators.{spec.name}(cube, *, loss=None, **options)``", ""]
    if spec.options:
        rows = [[f"``{o.name}``", f"``{o.default!r}``", _cell(o.doc) or "—"] for o in spec.options]
        lines += ["**Options**", ""] + _rst_table(["option", "default", "meaning"], rows)
    else:
        lines += ["**Options**: none.", ""]
    rows = []
    for name, dims in spec.results.items():
        optional = name.endswith("?")
        rows.append([f"``{name.rstrip('?')}``", f"``({', '.join(dims)})``" if dims else "scalar",
                     "when it applies (e.g. a held-out test set)" if optional else "always"])
    if rows:
        lines += ["**Results** (variables of the returned ``xarray.Dataset``)", ""]
        lines += _rst_table(["variable", "dims", "present"], rows)
    return lines


class CvflowEstimators(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from cvflow.estimators import REGISTRY

        lines: list[str] = []
        for name in REGISTRY:
            lines += estimator_rst(REGISTRY[name])
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(StringList(lines, source="cvflow.estimators.REGISTRY"), self.content_offset,
                                container, match_titles=True)
        return container.children


def setup(app):
    app.add_directive("cvflow-estimators", CvflowEstimators)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
