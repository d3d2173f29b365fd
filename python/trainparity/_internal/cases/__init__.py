"""Cases: what a check runs, as the user declares it.

Loading a case class from its `"package.module:ClassName"` spec (`loading`), a
case made from a command line (`command_case`, `command_template`), the phase
plan a case's command hands its training process (`phase_plan`), and the ERROR
message for a case that cannot be set up (`setup_failure`).
"""
