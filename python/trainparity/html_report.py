"""`trainparity.html_report`: self-contained HTML reports, a documented path kept as a face; see docs/api.md."""

from trainparity.reports.html import render_html_report as render_html_report
from trainparity.reports.html import write_html_report as write_html_report
