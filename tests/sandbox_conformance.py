"""The sandbox conformance suite: what every provider must do, run against the fake and docker.

A test module subclasses `SandboxConformance` (as `Test...`) and supplies two fixtures:
`provider` (a SandboxProvider) and `image` (a tag that provider can start). Paths stay under the
sandbox workdir so the fake, whose root is a temp directory, runs the same tests.
"""

from __future__ import annotations

import contextlib
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.sandbox.base import LABEL_DRIVER, LABEL_JOB, Sandbox, SandboxError, SandboxProvider, SandboxSpec

CONFORMANCE_JOB = "conformance-job"


class SandboxConformance:
    @pytest.fixture
    def sandbox(self, provider: SandboxProvider, image: str) -> Iterator[Sandbox]:
        sb = provider.start(SandboxSpec(image=image, workdir="/app", labels=self.labels()))
        try:
            yield sb
        finally:
            sb.stop()

    def labels(self) -> dict[str, str]:
        """Labels for the suite's sandboxes; docker tests override it with their run's job id."""
        return {LABEL_JOB: CONFORMANCE_JOB}

    # -- exec

    def test_exec_reports_exit_code_and_separate_streams(self, sandbox: Sandbox) -> None:
        r = sandbox.exec("echo out-line; echo err-line >&2; exit 7", timeout=30)
        assert r.exit_code == 7
        assert r.stdout == "out-line\n"
        assert r.stderr == "err-line\n"
        assert not r.timed_out and not r.ok

    def test_exec_keeps_output_without_trailing_newline(self, sandbox: Sandbox) -> None:
        r = sandbox.exec("printf 'a  b'; printf 'e' >&2", timeout=30)
        assert (r.stdout, r.stderr, r.exit_code) == ("a  b", "e", 0)
        assert r.ok

    def test_exec_runs_in_workdir_with_env(self, sandbox: Sandbox) -> None:
        assert sandbox.exec("pwd", timeout=30).stdout.strip().endswith("/app")
        sandbox.exec("mkdir -p sub", timeout=30)
        r = sandbox.exec(
            'pwd; echo "$GREETING"',
            timeout=30,
            workdir=f"{sandbox.workdir}/sub",
            env={"GREETING": "hello there"},
        )
        lines = r.stdout.splitlines()
        assert lines[0].endswith("/app/sub") and lines[1] == "hello there"

    def test_exec_in_missing_workdir_fails_without_raising(self, sandbox: Sandbox) -> None:
        r = sandbox.exec("echo should-not-run", timeout=30, workdir=f"{sandbox.workdir}/no/such/dir")
        assert r.exit_code != 0 and "should-not-run" not in r.stdout

    def test_exec_decodes_invalid_utf8_with_replacement(self, sandbox: Sandbox) -> None:
        r = sandbox.exec(r"printf 'caf\xc3\xa9 \xff\n'", timeout=30)
        assert r.stdout == "café \ufffd\n"

    def test_timeout_kills_the_command_promptly(self, sandbox: Sandbox) -> None:
        t0 = time.monotonic()
        r = sandbox.exec("echo begun; sleep 30; echo survived", timeout=1)
        elapsed = time.monotonic() - t0
        assert r.timed_out and not r.ok
        assert elapsed < 10, f"exec with timeout=1 took {elapsed:.1f}s"
        assert "survived" not in r.stdout
        # The killed command's children are gone too: nothing writes the file later.
        sandbox.exec("(sleep 2; touch late-writer) & sleep 30", timeout=1)
        time.sleep(2.5)
        assert sandbox.get_file("late-writer") is None

    def test_timeout_kills_a_command_that_ignores_term(self, sandbox: Sandbox) -> None:
        t0 = time.monotonic()
        r = sandbox.exec("trap '' TERM; sleep 30", timeout=1)
        assert r.timed_out
        assert time.monotonic() - t0 < 10

    def test_background_child_does_not_block_exec(self, sandbox: Sandbox) -> None:
        t0 = time.monotonic()
        r = sandbox.exec("sleep 20 & echo started", timeout=60)
        assert r.exit_code == 0 and r.stdout == "started\n" and not r.timed_out
        assert time.monotonic() - t0 < 5

    def test_command_killed_by_signal_reports_128_plus_n(self, sandbox: Sandbox) -> None:
        r = sandbox.exec("echo before; kill -9 $$", timeout=30)
        assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (137, "before\n", "", False)

    def test_fast_command_is_not_reported_as_timeout(self, sandbox: Sandbox) -> None:
        r = sandbox.exec("exit 124", timeout=30)
        assert r.exit_code == 124 and not r.timed_out

    # -- files

    def test_put_get_file_roundtrip_binary_and_exec_bit(self, sandbox: Sandbox) -> None:
        blob = bytes(range(256)) * 40
        sandbox.put_file(f"{sandbox.workdir}/deep/dir/blob.bin", blob)
        assert sandbox.get_file(f"{sandbox.workdir}/deep/dir/blob.bin") == blob
        sandbox.put_file(f"{sandbox.workdir}/run.sh", b"#!/bin/bash\necho ran-script\n", mode=0o755)
        r = sandbox.exec("./run.sh", timeout=30)
        assert (r.exit_code, r.stdout) == (0, "ran-script\n")
        sandbox.put_file(f"{sandbox.workdir}/plain.sh", b"echo x\n")  # default mode: not executable
        assert sandbox.exec("./plain.sh", timeout=30).exit_code != 0

    def test_get_missing_file_is_none(self, sandbox: Sandbox) -> None:
        assert sandbox.get_file(f"{sandbox.workdir}/nope.txt") is None

    def test_get_file_written_by_a_command(self, sandbox: Sandbox) -> None:
        sandbox.exec("mkdir -p logs && echo 0.75 > logs/reward.txt", timeout=30)
        assert sandbox.get_file(f"{sandbox.workdir}/logs/reward.txt") == b"0.75\n"

    def test_put_dir_get_dir_roundtrip(self, sandbox: Sandbox, tmp_path: Path) -> None:
        src = tmp_path / "src"
        (src / "nested").mkdir(parents=True)
        (src / "a.txt").write_text("alpha\n")
        (src / "nested" / "b.bin").write_bytes(b"\x00\x01beta")
        (src / "test.sh").write_text("#!/bin/bash\necho graded\n")
        (src / "test.sh").chmod(0o755)
        sandbox.put_dir(src, f"{sandbox.workdir}/tests")
        r = sandbox.exec("cat tests/a.txt && tests/test.sh", timeout=30)
        assert (r.exit_code, r.stdout) == (0, "alpha\ngraded\n")

        sandbox.exec("echo added-inside > tests/nested/c.txt", timeout=30)
        out = tmp_path / "out"
        assert sandbox.get_dir(f"{sandbox.workdir}/tests", out) is True
        assert (out / "a.txt").read_text() == "alpha\n"
        assert (out / "nested" / "b.bin").read_bytes() == b"\x00\x01beta"
        assert (out / "nested" / "c.txt").read_text() == "added-inside\n"
        assert (out / "test.sh").stat().st_mode & stat.S_IXUSR

    def test_get_missing_dir_is_false(self, sandbox: Sandbox, tmp_path: Path) -> None:
        assert sandbox.get_dir(f"{sandbox.workdir}/no-such-dir", tmp_path / "x") is False

    # -- state

    def test_changed_paths_show_written_and_deleted_files(self, sandbox: Sandbox) -> None:
        sandbox.put_file(f"{sandbox.workdir}/keep.txt", b"k")
        baseline = set(sandbox.changed_paths())
        sandbox.exec("echo hi > written.txt && rm keep.txt", timeout=30)
        changed = set(sandbox.changed_paths())
        assert f"{sandbox.workdir}/written.txt" in changed
        assert f"{sandbox.workdir}/keep.txt" in baseline
        assert all(p.startswith("/") for p in changed)
        kinds = sandbox.changes()  # docker diff's kinds: 0 modified, 1 added, 2 deleted
        assert set(kinds) == changed and kinds[f"{sandbox.workdir}/written.txt"] == 1

    def test_snapshot_then_start_sees_the_files(self, sandbox: Sandbox, provider: SandboxProvider) -> None:
        sandbox.exec("echo from-agent > state.txt", timeout=30)
        tag = sandbox.snapshot(self.labels())
        try:
            other = provider.start(SandboxSpec(image=tag, workdir="/app", labels=self.labels()))
            try:
                assert other.get_file(f"{other.workdir}/state.txt") == b"from-agent\n"
                assert other.exec("cat state.txt", timeout=30).stdout == "from-agent\n"
            finally:
                other.stop()
        finally:
            provider.remove_image(tag)

    def test_pause_holds_commands_keeps_files_and_resume_runs_them_again(self, sandbox: Sandbox) -> None:
        sandbox.exec("echo kept > kept.txt", timeout=30)
        sandbox.pause()
        with pytest.raises(SandboxError):
            sandbox.exec("true", timeout=30)
        assert sandbox.get_file(f"{sandbox.workdir}/kept.txt") == b"kept\n"
        assert f"{sandbox.workdir}/kept.txt" in sandbox.changed_paths()
        sandbox.resume()
        assert sandbox.exec("cat kept.txt", timeout=30).stdout == "kept\n"

    def test_network_of_reaches_a_service_the_other_sandbox_left_running(
        self, sandbox: Sandbox, provider: SandboxProvider, image: str
    ) -> None:
        """A sandbox started with `network_of` answers what the other's service says on localhost,
        with its own filesystem (the service's files are not there)."""
        port = 20000 + int(time.time() * 1000) % 20000
        # The server stops itself after a minute: the fake's sandboxes do not end what they leave running.
        serve = (f"echo served-by-agent > page.txt; nohup timeout 60 python3 -m http.server {port} --bind 127.0.0.1 "
                 f"> /dev/null 2>&1 & for i in $(seq 100); do python3 -c \"import socket; "
                 f"socket.create_connection(('127.0.0.1', {port}), 1)\" 2>/dev/null && exit 0; sleep 0.1; done; "
                 "exit 1")
        assert sandbox.exec(serve, timeout=60).ok
        fetch = (f"python3 -c \"import urllib.request; "
                 f"print(urllib.request.urlopen('http://127.0.0.1:{port}/page.txt', timeout=10).read().decode())\""
                 f"; test -e page.txt && echo page-is-here || echo page-not-here")
        other = provider.start(SandboxSpec(image=image, workdir="/app", labels=self.labels(), command=fetch,
                                           network_of=sandbox.id))
        try:
            res = other.wait(60)
        finally:
            other.stop()
            with contextlib.suppress(SandboxError):
                sandbox.exec(f"pkill -f 'http.server {port}' || true", timeout=30)
        assert res.exit_code == 0, res.stderr
        assert "served-by-agent" in res.stdout
        assert "page-not-here" in res.stdout

    def test_stop_is_idempotent_and_later_use_is_an_infra_error(
        self, provider: SandboxProvider, image: str
    ) -> None:
        sb = provider.start(SandboxSpec(image=image, workdir="/app", labels=self.labels()))
        sb.stop()
        sb.stop()
        with pytest.raises(SandboxError):
            sb.exec("true", timeout=30)

    def test_gc_removes_sandboxes_of_dead_jobs_only(self, provider: SandboxProvider, image: str) -> None:
        dead, live = f"{self.labels()[LABEL_JOB]}-dead", f"{self.labels()[LABEL_JOB]}-live"
        doomed = provider.start(SandboxSpec(image=image, labels={LABEL_JOB: dead}))
        kept = provider.start(SandboxSpec(image=image, labels={LABEL_JOB: live}))
        try:
            report = provider.gc({live}, scope={dead, live})
            assert doomed.id[:12] in [c[:12] for c in report.containers]
            assert kept.id[:12] not in [c[:12] for c in report.containers]
            assert kept.exec("echo alive", timeout=30).stdout == "alive\n"
            with pytest.raises(SandboxError):
                doomed.exec("true", timeout=30)
        finally:
            doomed.stop()
            kept.stop()

    def test_gc_for_one_driver_leaves_another_drivers_containers_of_the_same_job(
        self, provider: SandboxProvider, image: str
    ) -> None:
        """A driver that lost its job to another sweeps what it started, never the new owner's trials."""
        job = f"{self.labels()[LABEL_JOB]}-taken"
        mine = provider.start(SandboxSpec(image=image, labels={LABEL_JOB: job, LABEL_DRIVER: "old"}))
        theirs = provider.start(SandboxSpec(image=image, labels={LABEL_JOB: job, LABEL_DRIVER: "new"}))
        try:
            report = provider.gc(set(), scope={job}, driver="old")
            assert [c[:12] for c in report.containers] == [mine.id[:12]]
            assert theirs.exec("echo alive", timeout=30).stdout == "alive\n"
            with pytest.raises(SandboxError):
                mine.exec("true", timeout=30)
        finally:
            mine.stop()
            theirs.stop()
