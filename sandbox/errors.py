"""Exceptions that carry a one-line, user-facing reason (never a traceback dump)."""

# Error kind a worker reports when the task itself (not the solution) is broken.
TASK_ERROR = "task_error"


class TaskError(ValueError):
    """The task file cannot be used: the CLI exits non-zero with this message."""


class SolutionError(ValueError):
    """The solution is not in either accepted form: the evaluation fails with invalid_solution."""


class CompileError(RuntimeError):
    """A compiler rejected the sources; ``log`` holds the compiler output."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log
