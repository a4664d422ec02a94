"""The exit codes of every subcommand: 0 clean, 1 findings at or above --fail-on (inspect: the audit found a
problem), 2 usage error, unreadable/unparsable input or internal error."""

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
