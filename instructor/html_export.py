"""Executed HTML exports of the notebooks that read offline: nothing is loaded from the network.

    python -m instructor.release --html OUT                        # all seven, about two minutes
    python -m instructor.release --html OUT --only 01_tokenization.ipynb

Each notebook of `solutions/` runs in a fresh kernel (nbclient), then every solution cell is
replaced by its stub from the student release (`notebooks/`), so a page shows the reference's
outputs and plots but not its code. The math is rendered to MathML when the page is written
(latex2mathml), which browsers draw natively, so the page needs no MathJax; nor does it load
require.js, mermaid or a widget manager (a slider's page shows the static figure above it).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from jinja2 import DictLoader, pass_context
from latex2mathml.converter import convert
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

CELL_TIMEOUT_S = 900  # the end-to-end notebook trains for a couple of minutes in one cell
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# The lab template without the blocks that pull scripts from a CDN.
OFFLINE_TEMPLATE = """\
{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
"""


class MathMLRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, with $...$ and $$...$$ written as MathML."""

    def block_math(self, body: str) -> str:
        return convert(body, display="block")

    def inline_math(self, body: str) -> str:
        return convert(body)

    def latex_environment(self, name: str, body: str) -> str:
        return convert(f"\\begin{{{name}}}{body}\\end{{{name}}}", display="block")


class OfflineHTMLExporter(HTMLExporter):
    """HTMLExporter with MathML math and no network scripts."""

    def __init__(self, **kwargs):
        super().__init__(extra_loaders=[DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})],
                         template_file="offline.html.j2", **kwargs)

    @pass_context
    def markdown2html(self, context, source):
        cell = context.get("cell", {})
        renderer = MathMLRenderer(escape=False, attachments=cell.get("attachments", {}),
                                  exclude_anchor_links=self.exclude_anchor_links,
                                  anchor_link_text=self.anchor_link_text)
        return MarkdownWithMath(renderer=renderer).render(source)


def _student_view(executed: nbformat.NotebookNode, released: nbformat.NotebookNode) -> None:
    """Put the release's stub in place of every solution cell's source (outputs stay)."""
    stubs = {cell.id: cell.source for cell in released.cells}
    for cell in executed.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            if cell.id not in stubs:
                raise ValueError(f"the release has no cell {cell.id!r}: run `python -m "
                                 "instructor.release` first")
            cell.source = stubs[cell.id]
        if cell.cell_type == "code":  # a widget needs a live kernel; its static figure stays
            cell.outputs = [out for out in cell.outputs if WIDGET_VIEW not in out.get("data", {})]
    executed.metadata.pop("widgets", None)


def export_html(solution: Path, released: Path, target: Path, kernel_name: str = "python3") -> Path:
    """Execute `solution` (in its own folder), show it as the student sees it, write `target`."""
    notebook = nbformat.read(solution, as_version=4)
    NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name=kernel_name,
                   resources={"metadata": {"path": str(solution.parent)}}).execute()
    _student_view(notebook, nbformat.read(released, as_version=4))
    body, _ = OfflineHTMLExporter().from_notebook_node(notebook)
    target.write_text(body, encoding="utf-8")
    return target


def export_all(solutions_dir: Path, notebooks_dir: Path, out_dir: Path,
               only: list[str] | None = None,
               force: bool = False) -> list[Path]:
    """Export the named notebooks (all by default) to `out_dir/<name>.html`; never overwrite
    an existing page unless `force`."""
    names = only or sorted(p.name for p in solutions_dir.glob("*.ipynb"))
    missing = [n for n in names if not (solutions_dir / n).is_file()
               or not (notebooks_dir / n).is_file()]
    if missing:
        raise ValueError(f"--only names notebooks that are not in both {solutions_dir} and "
                         f"{notebooks_dir}: {missing}")
    targets = [out_dir / Path(name).with_suffix(".html").name for name in names]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not force:
        raise FileExistsError(f"{existing} exist already; pass --force to overwrite them")
    out_dir.mkdir(parents=True, exist_ok=True)
    return [export_html(solutions_dir / name, notebooks_dir / name, target)
            for name, target in zip(names, targets)]
