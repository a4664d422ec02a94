"""The exit codes of every subcommand: 0 clean, 1 findings at or above --fail-on (inspect: the audit found a
problem), 2 usage error, unreadable/unparsable input or internal error; interrupted: 130 (SIGINT), 143 (SIGTERM),
129 (SIGHUP), the shell's 128 + signal number."""

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
