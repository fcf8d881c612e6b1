"""The HTML report: one self-contained file (inline script and styles, no network) with an
interactive roofline and sortable tables, for a profile, a sweep, a comparison or an advice report.

Python decides what is shown and gathers the raw numbers into one JSON payload; the inline script
(outputs/html_assets/report.js) formats and draws them, so every number on the page goes through
one formatter. A Content-Security-Policy in the page forbids every fetch: nothing can reach the
network, by construction.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rooflinekit.core.report import Report
from rooflinekit.core.sweep_report import SweepReport
from rooflinekit.core.version import __version__
from rooflinekit.outputs.html_advise import advise_payload
from rooflinekit.outputs.html_compare import compare_payload
from rooflinekit.outputs.html_data import clean
from rooflinekit.outputs.html_profile import profile_payload
from rooflinekit.outputs.html_sweep import sweep_payload

#: The page and its entry points (the data helpers are rooflinekit.outputs.html_data's).
__all__ = ["ASSETS", "CSP", "advise_html", "compare_html", "embed", "page", "profile_html", "sweep_html"]

ASSETS = Path(__file__).resolve().parent / "html_assets"

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


# -- the page ---------------------------------------------------------------------------------------


def embed(payload: dict) -> str:
    """JSON that is safe inside <script>: no '<', '>' or '&' survives as itself, and ASCII only
    (the page is written the same whatever the locale's encoding)."""
    text = json.dumps(clean(payload), separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(payload: dict) -> str:
    """The self-contained HTML document for a payload."""
    css = (ASSETS / "report.css").read_text(encoding="utf-8")
    js = (ASSETS / "report.js").read_text(encoding="utf-8")
    payload = {**payload, "tool": f"rooflinekit {__version__}"}
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"rooflinekit {__version__}\">\n"
        f"<title>{html.escape(payload['title']).encode('ascii', 'xmlcharrefreplace').decode()}</title>\n<style>\n{css}</style>\n</head>\n<body>\n"
        "<main id=\"rk-app\"><noscript>This report draws its chart and tables with JavaScript: "
        "open it in a browser with scripts enabled.</noscript></main>\n"
        f"<script id=\"rk-data\" type=\"application/json\">{embed(payload)}</script>\n"
        f"<script>\n{js}</script>\n</body>\n</html>\n"
    )


def profile_html(report: Report, group_layers: bool = True) -> str:
    """A profile report as a self-contained HTML page (identical layers folded unless `group_layers` is off)."""
    return page(profile_payload(report, group_layers))


def sweep_html(sweep: SweepReport | dict) -> str:
    """A sweep (its report or the dict of one) as a self-contained HTML page."""
    return page(sweep_payload(sweep if isinstance(sweep, SweepReport) else SweepReport.from_dict(sweep)))


def compare_html(comparison: dict, a: Report, b: Report) -> str:
    """A comparison of two profile reports as a self-contained HTML page."""
    return page(compare_payload(comparison, a, b))


def advise_html(advice: Any) -> str:
    """An advice report (rooflinekit.core.advice_report.AdviceReport) as a self-contained HTML page."""
    return page(advise_payload(advice))
