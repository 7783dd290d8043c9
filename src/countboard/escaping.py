"""Text from the store (model, dataset, class and run names, tags, error messages) shown as typed, wherever it goes.

One rule per destination, and this module is its only owner; the board and every export call it:

- ``md``: Streamlit markdown (``st.markdown``, captions, titles, subheaders, info boxes, tab and radio labels).
  Every ASCII punctuation character is backslash-escaped (CommonMark shows an escaped punctuation character as
  itself, so no link, emphasis, heading, list, table, math ``$``, HTML tag or Streamlit directive ``:red[…]`` can
  form) and line breaks become spaces (a name cannot start a new block). ``md_code`` puts text in an inline code
  span whose fence is longer than any run of backticks in it.
- ``html``: HTML text and attributes (``html.escape`` with quotes).
- ``plotly``: Plotly's labels, legends, titles and hovers, which read a subset of HTML (``<b>``, ``<br>``,
  ``<a href>``), for a string between ``$`` signs, LaTeX, and in hover templates ``%{…}``: HTML-escaped, with
  ``$`` and ``%`` as entities.
- ``latex``: LaTeX table cells: ``\\ & % $ # _ { } ~ ^`` as their text commands.
- ``csv_cell`` / ``csv_frame``: spreadsheet exports. A text cell starting with ``=``, ``+``, ``-``, ``@``, a tab or
  a carriage return would be read as a formula by a spreadsheet (CSV injection); it gets a leading ``'``, as
  spreadsheet programs and OWASP's advice do. Numbers are left as they are, and so is a one-character cell (a
  table's mark such as ``=`` for "not significant" or ``-`` for "none": no formula has a body of nothing).
- ``slug``: a file name or a LaTeX ``\\label`` made from store text: letters, digits and ``. _ : -`` kept, any
  other run of characters one ``-`` (a ``}`` or ``%`` in a label would end it and let the rest be read as LaTeX).

Example:
    >>> md("[ds](javascript:alert(2))")
    '\\\\[ds\\\\]\\\\(javascript\\\\:alert\\\\(2\\\\)\\\\)'
    >>> html("<img src=x onerror=alert(1)>")
    '&lt;img src=x onerror=alert(1)&gt;'
    >>> latex("$\\\\frac{}$")
    '\\\\$\\\\textbackslash{}frac\\\\{\\\\}\\\\$'
    >>> csv_cell("=HYPERLINK(\\"http://x\\")"), csv_cell(-3), csv_cell("plain")
    ('\\'=HYPERLINK("http://x")', -3, 'plain')
"""

from __future__ import annotations

import html as _html
import re
import string
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

_MD_SPECIAL = re.compile("([" + re.escape(string.punctuation) + "])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029]+")
_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_RE = re.compile("|".join(re.escape(k) for k in _LATEX))
_SLUG_OUT = re.compile(r"[^A-Za-z0-9._:-]+")
#: First characters a spreadsheet reads as the start of a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def md(text: Any) -> str:
    """``text`` as literal Streamlit markdown (see the module docstring); ``None`` is ``""``.

    Example:
        >>> md("*x* <b>"), md("a\\nb")
        ('\\\\*x\\\\* \\\\<b\\\\>', 'a b')
    """
    if text is None:
        return ""
    return _MD_SPECIAL.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(text)))


def md_code(text: Any) -> str:
    """``text`` as an inline code span (shown as typed: nothing inside a code span is markdown).

    Example:
        >>> md_code("a`b"), md_code("plain")
        ('`` a`b ``', '`plain`')
    """
    body = _LINE_BREAKS.sub(" ", "" if text is None else str(text))
    runs = [len(r) for r in re.findall("`+", body)]
    fence = "`" * (max(runs) + 1 if runs else 1)
    pad = " " if runs or body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def html(text: Any) -> str:
    """``text`` escaped for HTML text or a quoted attribute."""
    return _html.escape("" if text is None else str(text), quote=True)


def plotly(text: Any, template: bool = True) -> str:
    """``text`` for a Plotly label, legend, title or hover (its HTML subset and its ``$…$`` LaTeX read nothing).

    Example:
        >>> plotly("<b>x</b> $a$")
        '&lt;b&gt;x&lt;/b&gt; &#36;a&#36;'
    """
    out = html(text).replace("$", "&#36;")
    return out.replace("%", "&#37;") if template else out  # titles are no templates: "95%" stays as written


def latex(text: Any) -> str:
    """``text`` for a LaTeX table cell: its special characters as text commands.

    Example:
        >>> latex("50% of a_b & c")
        '50\\\\% of a\\\\_b \\\\& c'
    """
    return _LATEX_RE.sub(lambda m: _LATEX[m.group()], "" if text is None else str(text))


def csv_cell(value: Any) -> Any:
    """A text cell that a spreadsheet would read as a formula, with a leading ``'``; anything else as it is.

    Example:
        >>> csv_cell("=cmd|' /C calc'!A0"), csv_cell("-1"), csv_cell("="), csv_cell(-1)
        ("'=cmd|' /C calc'!A0", "'-1", '=', -1)
    """
    if isinstance(value, str) and len(value) > 1 and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def slug(text: Any) -> str:
    """``text`` for a file name or a LaTeX ``\\label`` (see the module docstring).

    Example:
        >>> slug("classic_[ds](javascript:alert(2))_test"), slug("a}\\input{x}%")
        ('classic_-ds-javascript:alert-2-_test', 'a-input-x-')
    """
    return _SLUG_OUT.sub("-", "" if text is None else str(text))


def csv_frame(frame: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """A copy of ``frame`` with ``csv_cell`` applied to the text cells of ``columns`` (default: every column; name
    only those that hold store text when others hold the table's own marks, such as ``=`` for "not significant")
    and to its column names, for ``to_csv``.

    Example:
        >>> import pandas as pd
        >>> csv_frame(pd.DataFrame({"Method": ["=cmd|' /C calc'!A0", "ok"], "NMN": [-0.5, 1.0]})).values.tolist()
        [["'=cmd|' /C calc'!A0", -0.5], ['ok', 1.0]]
    """
    import pandas as pd

    out = frame.copy()
    for col in out.columns if columns is None else columns:
        if col in out and not pd.api.types.is_numeric_dtype(out[col]):
            out[col] = out[col].map(csv_cell)
    out.columns = [csv_cell(c) for c in out.columns]
    return out
