"""`trainparity.process_resume`: check_resume and its runner, a contract path (docs/api.md, "Module paths")."""

from trainparity._internal.resume.check import ProcessResumeRunner as ProcessResumeRunner
from trainparity._internal.resume.check import check_resume as check_resume
