"""A report cut into titled sections: the one model every human view renders.

`report.report_sections` assembles the sections of any report dictionary; the
sibling modules build the sections each kind of report holds (state
differences, process phases, sample coverage, op traces) out of the `Section`
type and the cell formatting in `cells`.
"""
