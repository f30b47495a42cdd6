"""Terminal-Bench tasks as their authors meant them, offline, in real Docker, under the default contract:

- a service the solution leaves running answers the tests (static-site-service: `python3 -m http.server 8000 &`)
  at the snapshot level: the verifier runs from the snapshot in the agent container's network namespace,
  while a daemon of the agent cannot write the verifier's reward;
- an `apt-get install` in the Dockerfile gets the base's own release (cert-subject-check: FROM
  python:3.13-slim-bookworm, whose reference solution parses bookworm's openssl 3.0 `CN = x`), recorded
  on the trial; a package (version) the release lacks fails the build in one line naming it;
- an oracle whose tests found no service is the environment's fault (`service_unreachable`), never a plain
  wrong solution.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rsi.loop.context import WorkspaceContext
from rsi.loop.init import init_workspace
from rsi.loop.run import RunRequest, run_job
from rsi.sandbox.base_image import substitute_base
from rsi.store.tables import TrialRow
from tests.taskgen import SOLVE_OK, TEST_OK, make_task

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tb21"
HARBOR_TOML = '''schema_version = "1.1"

[task]
name = "rsi-env/{name}"

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 120.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 512
network_mode = "no-network"
'''

# A daemon that serves "alive" on 8000 (so it demonstrably runs during grading) and, from the tests' first
# request on (after the snapshot, so the change check has nothing to see), writes reward 1 wherever it can: its
# own /logs/verifier and that of every process root it can see.
DAEMON_SOLVE = r"""cat > /tmp/daemon.py <<'PY'
import glob, http.server, os, threading, time

def forge():
    while True:
        for d in ["/logs/verifier", *glob.glob("/proc/*/root/logs/verifier")]:
            try:
                os.makedirs(d, exist_ok=True)
                open(os.path.join(d, "reward.txt"), "w").write("1\n")
            except OSError:
                pass
        time.sleep(0.05)

started = []

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if not started and self.path == "/grading":
            started.append(threading.Thread(target=forge, daemon=True))
            started[0].start()
        self.send_response(200); self.end_headers(); self.wfile.write(b"alive")
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
PY
nohup setsid python3 /tmp/daemon.py > /dev/null 2>&1 &
for i in $(seq 50); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/')" \
  2>/dev/null && exit 0; sleep 0.1; done
exit 1
"""
DAEMON_TEST = r"""mkdir -p /logs/verifier
python3 -c "import urllib.request; print('daemon said', urllib.request.urlopen('http://127.0.0.1:8000/grading').read().decode())"
echo 0 > /logs/verifier/reward.txt
sleep 2
"""
# The reference starts its server, then stops it: the tests find nothing on port 8000.
GONE_SOLVE = "python3 -m http.server 8000 > /dev/null 2>&1 &\nsleep 1\nkill %1\n"
GONE_TEST = r"""mkdir -p /logs/verifier
echo "checking http://localhost:8000/"
if python3 -c "import urllib.request; urllib.request.urlopen('http://localhost:8000/', timeout=5)"; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
APT_DOCKERFILE = ("FROM {tag}\nRUN apt-get update && apt-get install -y {pkg} && rm -rf /var/lib/apt/lists/*\n"
                  "WORKDIR /app\n")


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory, docker_ready: None) -> WorkspaceContext:
    root = tmp_path_factory.mktemp("tbenv") / "ws"
    init_workspace(root, starter_tasks=False)
    return WorkspaceContext.open(root)


@pytest.fixture(scope="module")
def bookworm_313() -> str:
    """`rsi sandbox build-base --as python:3.13-slim-bookworm`: bookworm with a CPython 3.13 (made again
    if an older rsi made it from another release)."""
    tag = "python:3.13-slim-bookworm"
    substitute_base(tag)
    return tag


def _tree(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


def _extra(t: TrialRow) -> dict[str, object]:
    return dict(json.loads((Path(t.trial_dir) / "result.json").read_text())["extra"])


def _out(t: TrialRow) -> str:
    v = Path(t.trial_dir) / "verifier"
    return "".join((v / n).read_text()[-3000:] for n in ("test-stdout.txt", "test-stderr.txt") if (v / n).exists())


def _harbor(root: Path, name: str, solve: str, test: str, dockerfile: str | None = None) -> Path:
    d = make_task(root, name, solve=solve, test=test, **({"dockerfile": dockerfile} if dockerfile else {}))
    (d / "task.toml").write_text(HARBOR_TOML.format(name=name))
    return d


@pytest.mark.parametrize("name", ["static-site-service", "cert-subject-check"])
def test_tb_fixtures_pass_with_oracle_and_fail_with_nop_offline_unedited(
    ctx: WorkspaceContext, bookworm_313: str, name: str
) -> None:
    assert ctx.contract.limits.sandbox.network is False and ctx.contract.grading.agent_services == "kept"
    task = FIXTURES / name
    before = _tree(task)
    ok = run_job(ctx, RunRequest(paths=[task], agent="oracle")).trials[0]
    assert ok.passed and ok.integrity == "snapshot", (ok.error_type, ok.error_message, _out(ok))
    extra = _extra(ok)
    env = extra["environment"]
    assert isinstance(env, dict) and "(bookworm)" in str(env["release"]), env
    assert "debian bookworm" in str(extra["base_substitution"])  # type: ignore[index]
    if name == "cert-subject-check":
        installed = env["apt_installed"]
        assert str(installed["openssl"]).startswith("3.0."), installed  # bookworm's, as the author had it
        assert "kept" in str(extra["agent_services"])
        from typer.testing import CliRunner

        from rsi.cli.app import app

        shown = CliRunner().invoke(app, ["-w", str(ctx.ws.root), "trials", "show", ok.id])
        assert "environment: Debian GNU/Linux 12 (bookworm)" in shown.output, shown.output
        assert f"openssl={installed['openssl']}" in shown.output
    else:
        assert "2 passed" in _out(ok)
    nop = run_job(ctx, RunRequest(paths=[task], agent="nop")).trials[0]
    assert not nop.passed and nop.reward == 0.0, (nop.error_type, nop.error_message)
    if name == "static-site-service":  # nobody served: noted, still the (nop) agent's failure
        assert nop.error_type is None and "localhost:8000" in str(_extra(nop)["service_unreachable"])
    assert _tree(task) == before


def test_an_agent_daemon_serves_the_tests_but_cannot_write_the_verifiers_reward(
    ctx: WorkspaceContext, tmp_path: Path
) -> None:
    daemon = _harbor(tmp_path, "reward-daemon", DAEMON_SOLVE, DAEMON_TEST)
    gone = _harbor(tmp_path, "service-gone", GONE_SOLVE, GONE_TEST)
    rows = {t.task_name: t for t in run_job(ctx, RunRequest(paths=[daemon, gone], agent="oracle")).trials}
    t = rows["rsi-env/reward-daemon"]
    assert "daemon said alive" in _out(t)  # it ran during grading and answered on localhost
    assert not t.passed and t.reward == 0.0 and t.error_type is None, (t.error_type, t.error_message, _out(t))
    g = rows["rsi-env/service-gone"]
    assert not g.passed and g.error_type == "service_unreachable", (g.error_type, g.error_message, _out(g))
    assert "localhost:8000" in str(g.error_message)


def test_apt_get_gets_the_bases_release_and_a_package_it_lacks_fails_in_one_line(
    ctx: WorkspaceContext, tmp_path: Path
) -> None:
    """openssl from bookworm (3.0, older than trixie's) and from trixie (3.5, newer than this bookworm host's);
    trixie's version pinned on bookworm, and a package bookworm does not have, fail the build naming them."""
    for tag in ("debian:bookworm-slim", "debian:trixie-slim"):
        substitute_base(tag)
    tasks = {
        "old": _harbor(tmp_path, "apt-old", SOLVE_OK, TEST_OK, APT_DOCKERFILE.format(tag="debian:bookworm-slim",
                                                                                     pkg="openssl")),
        "new": _harbor(tmp_path, "apt-new", SOLVE_OK, TEST_OK, APT_DOCKERFILE.format(tag="debian:trixie-slim",
                                                                                     pkg="openssl")),
        "pinned": _harbor(tmp_path, "apt-pinned", SOLVE_OK, TEST_OK,
                          APT_DOCKERFILE.format(tag="debian:bookworm-slim", pkg="openssl=3.5.1-1")),
        "absent": _harbor(tmp_path, "apt-absent", SOLVE_OK, TEST_OK,
                          APT_DOCKERFILE.format(tag="debian:bookworm-slim", pkg="python3.13")),
    }
    run = run_job(ctx, RunRequest(paths=list(tasks.values()), agent="oracle"))
    got = {t.task_name.split("/")[-1]: t for t in run.trials}
    old, new = _extra(got["apt-old"])["environment"], _extra(got["apt-new"])["environment"]
    assert got["apt-old"].passed and got["apt-new"].passed
    assert isinstance(old, dict) and isinstance(new, dict)
    assert str(old["apt_installed"]["openssl"]).startswith("3.0.") and "(bookworm)" in old["release"], old
    assert str(new["apt_installed"]["openssl"]).startswith("3.5.") and "(trixie)" in new["release"], new
    for name, pkg in (("apt-pinned", "openssl=3.5.1-1"), ("apt-absent", "python3.13")):
        t = got[name]
        assert not t.passed and t.error_type == "environment_build_failed", (t.error_type, t.error_message)
        msg = str(t.error_message)
        assert "\n" not in msg and f"apt-get cannot install {pkg}" in msg and "bookworm" in msg, msg
