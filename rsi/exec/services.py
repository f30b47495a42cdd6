"""Telling "the tests found no service to talk to" from a wrong answer, from the verifier's output.

At the snapshot level the verifier runs in the agent container's network namespace, so a service the
solution left running answers on localhost (trial.py). When a reference solution (the oracle) still
fails and the tests' output says a connection was refused or could not be made, the environment did not
give the tests the service the task's author had: a task/environment error with that line as its reason
(`service_unreachable`), never a plain wrong solution. For any other agent it is only noted: a service
the agent never started is the agent's failure.
"""

from __future__ import annotations

import re

_UNREACHABLE = re.compile(
    r"connection refused|errno 111\b|errno 99\b|cannot assign requested address|couldn't connect to server|"
    r"failed to connect to|could not connect to|connect to host \S+ port \d+|no route to host|"
    r"newconnectionerror|remotedisconnected|connection reset by peer",
    re.IGNORECASE,
)
_ADDRESS = re.compile(
    r"(?P<host>localhost|127\.0\.0\.1|0\.0\.0\.0|\[?::1\]?)(?:(?::|\s+port\s+|'?,\s*port=)(?P<port>\d{1,5}))?",
    re.IGNORECASE,
)


# a local address with its port anywhere in the output: a URL, pytest's locals (host = 'localhost:8000',
# address = ('localhost', 8000))
_URL = re.compile(r"(?:://|['\"(])(?P<host>localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])(?::|['\"]?,\s*)(?P<port>\d{1,5})",
                  re.IGNORECASE)


def service_failure(stdout: str, stderr: str) -> str | None:
    """The first line of the verifier's output that says a connection failed, with the local address it
    names (or else the first local URL in that output) if any, e.g. "the tests could not reach a service
    on localhost:8000: <line>"; None when none does."""
    for text in (stdout, stderr):
        for line in text.splitlines():
            if not _UNREACHABLE.search(line):
                continue
            addr = _ADDRESS.search(line) or _URL.search(f"{stdout}\n{stderr}")  # else the URL the tests asked for
            where = ""
            if addr is not None:
                where = f" on {addr.group('host')}" + (f":{addr.group('port')}" if addr.group("port") else "")
            return f"the tests could not reach a service{where}: {line.strip()[:200]}"
    return None
