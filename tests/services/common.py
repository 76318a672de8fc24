"""Shared plumbing for the throwaway test servers: errors, processes, waiting, clean-up."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import cdc.testing as kit


class ServiceError(RuntimeError):
    """A test server could not be started, stopped or reached."""


class ServiceUnavailableError(ServiceError):
    """No way to get the service here: no address given, no local binaries, no Docker engine."""


class RestartUnsupportedError(ServiceError):
    """The server was given by address, so it is not ours to stop or restart."""


def in_ci() -> bool:
    """Tells whether we run in CI, where a missing service must fail rather than skip."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def docker_available() -> bool:
    """Tells whether a Docker engine answers, so testcontainers can be used as a fallback."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        subprocess.run([docker, "info"], capture_output=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def tail(path: Path, lines: int = 40) -> str:
    """Returns the last ``lines`` lines of a log file, or an empty string if it does not exist."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    interval: float = 0.1,
) -> None:
    """Polls ``predicate`` until it returns True.

    Args:
        predicate: Readiness check; exceptions count as "not yet".
        timeout: Seconds to wait at most.
        what: Description used in the error message.
        process: When given, fail fast if it exits while we wait.
        log: When given, its tail goes into the error message.
        interval: Seconds between polls.

    Raises:
        ServiceError: The predicate never held, or the process died.
    """

    def ready() -> bool:
        try:
            if predicate():
                return True
        except Exception:
            pass  # not yet: a server still starting refuses or half-answers
        if process is not None and process.poll() is not None:
            raise ServiceError(
                f"{what}: process exited with code {process.returncode}\n" + _tail(log)
            )
        return False

    try:
        kit.wait_until(ready, timeout, interval, describe=what)
    except kit.WaitTimeout:
        raise ServiceError(
            f"timed out after {timeout:.0f}s waiting for {what}\n" + _tail(log)
        ) from None


def _tail(log: Path | None) -> str:
    return f"--- {log} ---\n{tail(log)}" if log is not None else ""


class ManagedProcess:
    """A server process in its own session, its output appended to a log file."""

    def __init__(
        self, argv: Sequence[str], log: Path, cwd: Path, env: dict[str, str] | None = None
    ):
        """Starts the process.

        Args:
            argv: Command line.
            log: File that receives stdout and stderr (appended, so restarts keep history).
            cwd: Working directory.
            env: Environment; the current one when None.
        """
        self.log = log
        self._log_file: IO[bytes] = log.open("ab")
        # A new session lets us signal the whole process group (JVMs, forked helpers) at stop.
        self.popen: subprocess.Popen[bytes] = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        """Process id."""
        return self.popen.pid

    def alive(self) -> bool:
        """Tells whether the process still runs."""
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Signals the process group and waits; escalates to SIGKILL after ``timeout``.

        Args:
            sig: First signal to send (SIGKILL simulates a crash).
            timeout: Seconds to wait before escalating.
        """
        try:
            if self.alive():
                self._signal(sig)
                try:
                    self.popen.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    self.popen.wait(timeout=30)
        finally:
            self._log_file.close()

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)


# Strong references: a server whose object a script dropped must still be stopped at exit.
_LIVE: set[Service] = set()


class Service:
    """Base of every throwaway server: a temp dir, start/stop/restart, and clean-up at exit.

    Subclasses implement ``_start`` and ``_stop``. Instances are context managers; servers left
    running when the interpreter exits are closed by an ``atexit`` hook, so a crashed script does
    not leave a broker behind.
    """

    #: False for servers given by address (environment variable): they cannot be restarted.
    supports_restart: bool = True
    #: Short name used in temp dir names and messages.
    name: str = "service"
    #: Seconds a SIGTERM'd server gets to shut down cleanly before SIGKILL.
    stop_timeout: float = 30.0

    def __init__(self, base_dir: str | os.PathLike[str] | None = None):
        """Creates the temp dir that holds data and logs.

        Args:
            base_dir: Parent of the temp dir; the system temp dir when None.
        """
        self.workdir = Path(tempfile.mkdtemp(prefix=f"cdc-test-{self.name}-", dir=base_dir))
        self._running = False
        self._closed = False
        self._started_once = False
        self._process: ManagedProcess | None = None
        _LIVE.add(self)

    @property
    def running(self) -> bool:
        """Tells whether the server was started and not stopped since."""
        return self._running

    def start(self) -> None:
        """Starts the server and waits until it serves; a no-op when already running.

        The first start retries on other free ports: a port picked by ``free_port`` can be
        taken by another process before the server binds it. Later starts keep the port, so
        addresses handed out stay valid across restarts.
        """
        if self._closed:
            raise ServiceError(f"{self.name}: already closed")
        if self._running:
            return
        attempts = 1 if self._started_once else 3
        for attempt in range(attempts):
            try:
                self._start()
                break
            except ServiceError:
                if attempt == attempts - 1 or not self._forget_ports():
                    raise
        self._started_once = True
        self._running = True

    def stop(self) -> None:
        """Stops the server, keeping its data for a later ``start``."""
        if self._running:
            self._running = False
            self._stop()

    def restart(self) -> None:
        """Stops and starts the server on the same port with the same data."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stops the server and removes its temp dir."""
        if self._closed:
            return
        try:
            self.stop()
        finally:
            self._closed = True
            _LIVE.discard(self)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        """Kills the server with SIGKILL (a crash); ``start`` brings it back on the same port."""
        if self._process is not None and self._running:
            self._running = False
            self._process.stop(signal.SIGKILL)
            self._process = None

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        if self._process is not None:
            self._process.stop(signal.SIGTERM, timeout=self.stop_timeout)
            self._process = None

    def _forget_ports(self) -> bool:
        """Drops auto-picked ports after a failed first start; False when a retry is pointless."""
        return False

    def _launch(
        self,
        argv: Sequence[str],
        *,
        log: Path,
        ready: Callable[[], bool],
        timeout: float,
        interval: float = 0.1,
    ) -> ManagedProcess:
        """Starts a server process and waits until ``ready``; kills it if it never gets there.

        Args:
            argv: Command line.
            log: Log file (its tail goes into the error).
            ready: Readiness check.
            timeout: Seconds to wait.
            interval: Seconds between checks.

        Returns:
            The running process.

        Raises:
            ServiceError: The process exited or did not get ready in time.
        """
        process = ManagedProcess(argv, log=log, cwd=self.workdir)
        try:
            wait_until(
                ready,
                timeout=timeout,
                what=f"{self.name} ({' '.join(argv[:1])})",
                process=process.popen,
                log=log,
                interval=interval,
            )
        except BaseException:
            process.stop(signal.SIGKILL)
            raise
        return process

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ExternalService:
    """Mixin for servers given by address: start and stop are unavailable."""

    supports_restart: bool = False
    running: bool = True

    def start(self) -> None:
        """Nothing to start: the server is already running elsewhere."""

    def stop(self, *args: object, **kwargs: object) -> None:
        """Always fails: the server is not ours to stop.

        Raises:
            RestartUnsupportedError: Always.
        """
        raise RestartUnsupportedError(
            f"{type(self).__name__}: given by address, cannot be stopped or restarted"
        )

    def restart(self) -> None:
        """Always fails: the server is not ours to restart.

        Raises:
            RestartUnsupportedError: Always.
        """
        self.stop()

    def kill(self) -> None:
        """Always fails: the server is not ours to kill.

        Raises:
            RestartUnsupportedError: Always.
        """
        self.stop()

    def close(self) -> None:
        """Nothing to clean up."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_leftovers() -> None:
    for service in list(_LIVE):
        with contextlib.suppress(Exception):
            service.close()
