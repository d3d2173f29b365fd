"""`trainparity.display`: text, repr and HTML views of reports, a documented path kept as a face; see docs/api.md."""

from trainparity.reports.display import OUTCOME_COLOURS as OUTCOME_COLOURS
from trainparity.reports.display import NotebookProgress as NotebookProgress
from trainparity.reports.display import Section as Section
from trainparity.reports.display import headline as headline
from trainparity.reports.display import html_fragment as html_fragment
from trainparity.reports.display import report_sections as report_sections
from trainparity.reports.display import result_html as result_html
from trainparity.reports.display import result_repr as result_repr
from trainparity.reports.display import text_report as text_report
