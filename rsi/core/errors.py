"""Error types shared by every layer.

`RsiError` carries an exit code so the CLI can turn any failure into one line on the error
console and `typer.Exit(code)`. `InputError` is bad user input: it names the file and the
field, and always exits 2.
"""

from __future__ import annotations


class RsiError(Exception):
    """A failure the user should see as one line, with an exit code."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class InputError(RsiError):
    """Bad input in a file the user gave us. Names the file and the field; exit code 2."""

    exit_code = 2

    def __init__(self, file: str, field: str | None, problem: str) -> None:
        self.file = file
        self.field = field
        where = f"{file}: {field}" if field else file
        super().__init__(f"{where}: {problem}")


class ConfigError(RsiError):
    """A configuration that is well formed but not allowed (e.g. loosens a contract limit)."""

    exit_code = 2


class NotFoundError(RsiError):
    """A named thing (task, job, trial, generation, provider) does not exist."""

    exit_code = 2


class StoreError(RsiError):
    """The workspace's database cannot be used as it is: damaged, not rsi's, or from a newer rsi.

    Names the file, what is wrong with it and the fix, in one line; exit code 2. Raised before
    anything is written to the file.
    """

    exit_code = 2

    def __init__(self, file: str, problem: str, fix: str) -> None:
        self.file = file
        self.problem = problem
        self.fix = fix
        super().__init__(f"{file}: {problem}; {fix}")


class InfraError(RsiError):
    """A transient failure of something outside the model (Docker daemon, model endpoint).

    Such failures are retried and recorded as `infra`; they never count against the model.
    """

    exit_code = 3


def pydantic_field(loc: tuple[object, ...]) -> str:
    """Render a pydantic error location as a dotted field path (`environment.cpus`)."""
    return ".".join(str(p) for p in loc) if loc else "(root)"


def first_validation_error(file: str, exc: Exception) -> InputError:
    """Turn a pydantic ValidationError into one InputError naming the first bad field."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        errs = errors()
        if errs:
            e = errs[0]
            return InputError(file, pydantic_field(tuple(e.get("loc", ()))), str(e.get("msg", "invalid")))
    return InputError(file, None, str(exc))
