"""Plain text, Markdown and HTML extraction, plus the text decoding rule."""

from __future__ import annotations

import codecs

import pytest

from context_engine.ingest.extracted import ExtractionFailed, Unit
from context_engine.ingest.formats import extract


def _units(data: bytes, name: str | None = None) -> list[Unit]:
    return list(extract(data, name=name).units)


# -------------------------------------------------------------------------------------- plain text


def test_plain_text_one_unit_per_paragraph() -> None:
    result = extract(b"First paragraph\nstill first.\n\n\nSecond one.\r\n\r\nThird.\n", name="notes.txt")
    assert result.mime == "text/plain"
    assert [u.text for u in result.units] == ["First paragraph\nstill first.", "Second one.", "Third."]
    assert all(u.section is None and u.kind == "text" for u in result.units)


def test_empty_file_fails_clearly() -> None:
    with pytest.raises(ExtractionFailed, match="the file is empty") as info:
        extract(b"", name="empty.txt")
    assert info.value.reason == "extraction_failed"


def test_whitespace_only_file_fails() -> None:
    with pytest.raises(ExtractionFailed, match="no extractable text"):
        extract(b"  \n\n \t\n", name="blank.txt")


def test_utf8_bom_is_stripped() -> None:
    units = _units(codecs.BOM_UTF8 + "café au lait".encode(), name="a.txt")
    assert units[0].text == "café au lait"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_by_bom(codec: str) -> None:
    bom = codecs.BOM_UTF16_LE if codec.endswith("le") else codecs.BOM_UTF16_BE
    data = bom + "Grüße aus Köln\n\nzweiter Absatz".encode(codec)
    result = extract(data, name="a.txt")
    assert [u.text for u in result.units] == ["Grüße aus Köln", "zweiter Absatz"]
    assert result.meta["encoding"] == "utf-16"


def test_cp1252_file_falls_back() -> None:
    result = extract("naïve “quotes” – dash".encode("cp1252"), name="legacy.txt")
    assert next(iter(result.units)).text == "naïve “quotes” – dash"
    assert result.meta["fallback_encodings"] == ["cp1252"]


def test_mixed_encodings_decode_per_line() -> None:
    data = "line one: café\n".encode() + "line two: café\n".encode("cp1252") + "line three: ✓\n".encode()
    result = extract(data, name="mixed.txt")
    assert next(iter(result.units)).text == "line one: café\nline two: café\nline three: ✓"
    assert result.meta["encoding"] == "mixed"
    assert result.meta["fallback_lines"] == 1


def test_binary_garbage_fails() -> None:
    data = bytes(range(256)) * 8
    with pytest.raises(ExtractionFailed, match="cannot be decoded as text"):
        extract(data, name="blob.txt")


def test_binary_without_nul_fails() -> None:
    data = bytes(b for b in range(1, 32) if b not in (9, 10, 12, 13, 27)) * 50
    with pytest.raises(ExtractionFailed, match="cannot be decoded as text"):
        extract(data)


def test_nul_byte_after_the_head_fails() -> None:
    data = b"plain text line\n" * 10_000 + b"oops\x00\n"
    with pytest.raises(ExtractionFailed, match="NUL byte on line 10001"):
        extract(data, name="late.txt")


def test_path_source_uses_its_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "readme.md"
    path.write_text("# Hi\n\nthere\n", encoding="utf-8")
    result = extract(path)
    assert result.mime == "text/markdown"
    assert [(u.section, u.text) for u in result.units] == [("Hi", "there")]


# ---------------------------------------------------------------------------------------- markdown

MARKDOWN = """\
# Leave policy

Everyone gets 25 days.

## Carry over

Up to five days carry over.
Ask your manager.

| Grade | Days |
|------:|------|
| A     | 25   |
| B     | 30   |

```python
def days(grade):

    return 25
```

Setext heading
--------------

After setext.

### Deep ###
#### Deeper
Text under deeper.
"""


def test_markdown_sections_tables_and_fences() -> None:
    units = _units(MARKDOWN.encode(), name="policy.md")
    assert [(u.section, u.kind, u.text.splitlines()[0]) for u in units] == [
        ("Leave policy", "text", "Everyone gets 25 days."),
        ("Carry over", "text", "Up to five days carry over."),
        ("Carry over", "table", "| Grade | Days |"),
        ("Carry over", "text", "```python"),
        ("Setext heading", "text", "After setext."),
        ("Deeper", "text", "Text under deeper."),
    ]
    table = units[2]
    assert table.text.count("\n") == 3
    code = units[3]
    assert "\n\n    return 25\n```" in code.text
    assert code.meta["language"] == "python"
    assert units[5].meta["headings"] == ["Leave policy", "Setext heading", "Deep", "Deeper"]


def test_markdown_unclosed_fence_runs_to_end() -> None:
    units = _units(b"# A\n\n```\ncode\n\n# not a heading\n", name="x.md")
    assert len(units) == 1
    assert "# not a heading" in units[0].text
    assert units[0].section == "A"


def test_markdown_front_matter_is_not_a_heading() -> None:
    units = _units(b"---\ntitle: x\n---\n\nBody.\n", name="x.markdown")
    assert units[0].meta["block"] == "front_matter"
    assert units[1].text == "Body." and units[1].section is None


def test_markdown_by_mime_hint() -> None:
    result = extract(b"# T\n\nbody", mime="text/markdown; charset=utf-8")
    assert result.mime == "text/markdown"


# -------------------------------------------------------------------------------------------- html

HTML = """<!DOCTYPE html>
<html><head><title> Handbook </title><style>p {color: red}</style>
<script>var secret = 1;</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/x">Menu</a></nav>
<h1>Benefits</h1>
<p>We offer a <b>generous</b>
   pension.</p>
<h2>Holidays</h2>
<ul><li>Christmas<ol><li>Eve</li><li>Day</li></ol></li><li>Easter</li></ul>
<div>Loose text in a div<br>second line</div>
<table><caption>Allowance</caption>
<tr><th>Grade</th><th>Days</th></tr>
<tr><td>A</td><td>25</td></tr>
<tr><td>B | senior</td><td>30</td></tr>
</table>
<h1>Other</h1><p>Tail &amp; end.</p>
<!-- a comment -->
</body></html>"""


def test_html_structure() -> None:
    result = extract(HTML.encode(), name="page.html")
    assert result.mime == "text/html"
    assert result.meta["title"] == "Handbook"
    units = list(result.units)
    texts = [u.text for u in units]
    assert "We offer a generous pension." in texts
    assert not any("secret" in t or "Menu" in t or "color" in t or "comment" in t for t in texts)
    by_text = {u.text: u for u in units}
    assert by_text["We offer a generous pension."].section == "Benefits"
    assert by_text["- Christmas\n  1. Eve\n  2. Day\n- Easter"].section == "Holidays"
    assert by_text["Loose text in a div\nsecond line"].section == "Holidays"
    assert by_text["Tail & end."].section == "Other"
    [table] = [u for u in units if u.kind == "table"]
    assert table.section == "Holidays"
    assert table.text.splitlines() == [
        "Allowance",
        "| Grade | Days |",
        "| --- | --- |",
        "| A | 25 |",
        "| B \\| senior | 30 |",
    ]


def test_html_sniffed_despite_txt_name() -> None:
    result = extract(b"<html><body><h2>S</h2><p>x</p></body></html>", name="saved.txt")
    assert result.mime == "text/html"
    assert [(u.section, u.text) for u in result.units] == [("S", "x")]


def test_html_fragment_by_extension() -> None:
    units = _units(b"<h3>Only</h3><p>fragment</p>", name="frag.htm")
    assert [(u.section, u.text) for u in units] == [("Only", "fragment")]


def test_html_with_only_script_fails() -> None:
    with pytest.raises(ExtractionFailed, match="no extractable text"):
        extract(b"<html><body><script>x()</script></body></html>", name="x.html")


def test_html_nested_table_stays_in_its_cell() -> None:
    data = b"<table><tr><td>outer<table><tr><td>inner</td></tr></table></td><td>2</td></tr></table>"
    [unit] = _units(data, name="t.html")
    assert unit.kind == "table"
    assert unit.text.splitlines()[0] == "| outerinner | 2 |"


def test_html_page_wrapped_in_a_form_keeps_its_text() -> None:
    data = b"<html><body><form id=f1><h1>Portal</h1><p>Welcome back.</p><button>Go</button></form></body>"
    assert [(u.section, u.text) for u in _units(data, name="p.aspx")] == [("Portal", "Welcome back.")]
