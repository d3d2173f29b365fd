"""`trainparity.display`: text, repr and HTML views of reports, a documented path kept as a face; see docs/api.md."""

from trainparity.reports.html_views import OUTCOME_COLOURS as OUTCOME_COLOURS
from trainparity.reports.html_views import html_fragment as html_fragment
from trainparity.reports.html_views import result_html as result_html
from trainparity.reports.notebook import NotebookProgress as NotebookProgress
from trainparity.reports.sections.cells import Section as Section
from trainparity.reports.sections.report import report_sections as report_sections
from trainparity.reports.text_views import headline as headline
from trainparity.reports.text_views import result_repr as result_repr
from trainparity.reports.text_views import text_report as text_report
