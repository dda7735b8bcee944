"""Error handling shared by every admin and tenant command: exit codes, messages, suggestions.

Why it exists: people type these commands all day, and scripts parse their
exit codes. One decorator turns every expected failure into one line on
stderr and the right exit code, so no command has to remember to.

What must stay true: exit 2 for bad usage or bad input (a bad flag, a bad
quantity, a bad YAML path: the message names the argument or the path), exit 1
for a failure (unknown object, database down, a conflict); never a traceback
unless ``--debug`` (or ``QUEUEMGR_DEBUG=1``) is given. Unknown names come with
the nearest existing names (difflib), so a typo is one glance away from fixed.
"""

from __future__ import annotations

import difflib
import functools
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, TypeVar

import click

from queuemgr.core.resources import QuantityError
from queuemgr.core.values import shown
from queuemgr.spec.checks import InputError
from queuemgr.store.admin import ObjectInUse
from queuemgr.store.database import DatabaseError
from queuemgr.store.errors import InvalidValue, PermissionDenied, SchemaMissing, StoreError
from queuemgr.store.workloads import StateConflict, WorkloadExists

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
ADMIN_ROLE = "queuemgr_admin"  # created by migration 0006

F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """An expected failure: the message is for the user; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


class BadInput(CliError):
    """Bad usage or input: exit 2. The message starts with the argument or path at fault."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_BAD_INPUT)


def nearest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The existing names closest to ``name`` (difflib's ratio), best first."""
    return difflib.get_close_matches(name, sorted(set(candidates)), n=n, cutoff=0.5)


# No stored name is longer (a Kubernetes name, plus a re-created job's "~id"): a longer
# one is compared with nothing, so a hostile name costs no fuzzy search.
_LONGEST_NAME = 300


def not_found(kind: str, name: str, candidates: Iterable[str]) -> CliError:
    """``kind 'name' not found``, plus "did you mean" when something is close; the name
    is shown bounded."""
    close = nearest(name, candidates) if len(name) <= _LONGEST_NAME else []
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return CliError(f"{kind} {shown(name)} not found{hint}")


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    raise CliError(message, code)


def debug_option(f: F) -> F:
    """``--debug``: let an unexpected error's traceback through (for bug reports)."""
    return click.option(
        "--debug",
        is_flag=True,
        envvar="QUEUEMGR_DEBUG",
        help="Show the traceback of an unexpected error.",
    )(f)


def handled(f: F) -> F:
    """Run a command body, mapping every exception to a message and an exit code."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool(kwargs.pop("debug", False)) or os.environ.get("QUEUEMGR_DEBUG") == "1"
        try:
            return f(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise  # click's own usage errors already exit 2 with a message
        except CliError as exc:
            _die(str(exc), exc.code)
        except (InputError, QuantityError) as exc:
            _die(str(exc), EXIT_BAD_INPUT)
        except (DatabaseError, ObjectInUse, StateConflict, WorkloadExists) as exc:
            _die(str(exc), EXIT_FAILURE)
        except BrokenPipeError:
            sys.exit(EXIT_FAILURE)
        except PermissionDenied as exc:
            _die(_denied(exc), EXIT_FAILURE)
        except InvalidValue as exc:
            _die(exc.reason, EXIT_BAD_INPUT)  # the submit function's checks
        except SchemaMissing as exc:
            _die(
                f"database error: {exc.reason}: the database lacks queuemgr's tables, or "
                "holds those of an older queuemgr; create or upgrade them with "
                "`queuemgr db upgrade`",
                EXIT_FAILURE,
            )
        except StoreError as exc:  # DatabaseError, above, is one too: its message is the user's
            if debug:
                traceback.print_exc()
            _die(f"database error: {exc.reason}", EXIT_FAILURE)
        except Exception as exc:  # the last line of defence: report, never a traceback
            if debug:
                traceback.print_exc()
            _die(f"internal failure: {type(exc).__name__}: {exc}", EXIT_FAILURE)

    return debug_option(wrapper)  # type: ignore[return-value]


def _denied(exc: PermissionDenied) -> str:
    first = exc.reason
    if first.startswith("namespace "):  # queuemgr_submit or queuemgr_cancel refused it
        return f"{first}: an admin grants it with `queuemgr grant ROLE NAMESPACE`"
    return (
        f"{first}: changing queues, quotas, flavors, nodes or cohorts needs the "
        f"{ADMIN_ROLE} database role (an admin grants it: GRANT {ADMIN_ROLE} TO <role>)"
    )


def _die(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
