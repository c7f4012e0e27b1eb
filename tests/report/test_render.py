"""Report rendering on hand-made inputs."""
from stages.report.render import _markdown_to_html


def test_markdown_tables_become_html_tables():
    html = _markdown_to_html("# Sweep x\n\n| a | b |\n|---|---|\n| `1` | <2> |\ntext\nmore\n")
    assert html == ("<h3>Sweep x</h3><table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td><code>1</code>"
                    "</td><td>&lt;2&gt;</td></tr></tbody></table><p>text more</p>")
