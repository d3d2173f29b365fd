"""Cases: what a check runs, as the user declares it.

Loading a case class from its `"package.module:ClassName"` spec, and the ERROR
message for a case that cannot be set up (`loading`), a case made from a command
line (`command_case`, `command_template`), and the phase plan a case's command
hands its training process (`phase_plan`).
"""
