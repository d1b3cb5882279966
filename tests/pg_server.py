"""A throwaway PostgreSQL server for tests that restart or fill one: its own data folder and
port, started with the installed binaries (`pg_config --bindir`), removed after. initdb and
pg_ctl refuse to run as root, so as root they run as the `postgres` user."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class ThrowawayPostgres:
    def __init__(self, max_connections: int = 100):
        self.max_connections = max_connections
        self.bindir = Path(subprocess.run(["pg_config", "--bindir"], capture_output=True,
                                          text=True, check=True).stdout.strip())
        self.root = Path(tempfile.mkdtemp(prefix="tp-pg-"))
        self.root.chmod(0o755)  # the postgres user reaches its data folder through it
        self.data = self.root / "data"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self._as_postgres([str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust",
                           "-U", "postgres", "--no-sync", "-E", "UTF8"])

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   f"-c max_connections={self.max_connections} -c fsync=off")
        self._as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options,
                           "-l", str(self.root / "server.log"), "-w", "start"])

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode,
                           "-w", "stop"], check=False)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _as_postgres(self, argv: list[str], check: bool = True) -> None:
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=check, capture_output=True, text=True, timeout=120)
