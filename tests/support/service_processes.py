"""Serving paths run natively for tests: the Flask paths (GridFS, PostgreSQL)
under gunicorn, the Node path under node, nginx's static module over a
directory, and the GridFS module with the lab's own nginx.conf, each on a
free 127.0.0.1 port and stopped afterwards."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from support.processes import free_port, stop_process, wait_for_port

REPO = Path(__file__).resolve().parents[2]
SERVICES = REPO / "services"
VENV_BIN = Path(sys.executable).parent
NGINX = "/usr/sbin/nginx"
GUNICORN_CONF = SERVICES / "python-common" / "gunicorn.conf.py"  # shared by flask and flask-postgres


class ServiceProcess:
    """One server process listening on 127.0.0.1:<port>; stderr goes to a
    temporary log file that failures can show."""

    def __init__(self, name: str, command: list[str], cwd: Path, env: dict[str, str], port: int):
        self.name, self.command, self.cwd, self.env, self.port = name, command, cwd, env, port
        self.log_path = Path(tempfile.mkstemp(prefix=f"lab-{name}-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ServiceProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, cwd=self.cwd, env={**os.environ, **self.env},
                                         stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, self.name, self.proc)
            deadline = time.monotonic() + 15
            while requests.get(f"{self.url}/health", timeout=5).status_code != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} /health never answered 200")
                time.sleep(0.1)
        except Exception as error:
            self.stop()
            raise RuntimeError(f"{error}\n--- {self.name} log ---\n{self.log()}") from error
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        stop_process(self.proc)


def service_env(mongo_uri: str, db: str, port: int) -> dict[str, str]:
    return {"MONGO_URI": mongo_uri, "GRIDFS_DB": db, "GRIDFS_BUCKET": "fs", "PORT": str(port)}


def flask_service(mongo_uri: str, db: str) -> ServiceProcess:
    port = free_port()
    return ServiceProcess(
        "flask", [str(VENV_BIN / "gunicorn"), "-c", str(GUNICORN_CONF), "app:app"],
        SERVICES / "flask", service_env(mongo_uri, db, port), port)


def flask_postgres_service(postgres_url: str) -> ServiceProcess:
    port = free_port()
    return ServiceProcess(
        "flask-postgres", [str(VENV_BIN / "gunicorn"), "-c", str(GUNICORN_CONF), "app:app"],
        SERVICES / "flask-postgres", {"POSTGRES_URL": postgres_url, "PORT": str(port)}, port)


def postgres_database(server_url: str, name: str) -> str:
    """A new, empty database `name` in the PostgreSQL at server_url (an old
    one is dropped); its URL."""
    import psycopg
    from psycopg import sql
    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{server_url.rsplit('/', 1)[0]}/{name}"


def image_command(dockerfile: Path) -> list[str]:
    """The CMD of a Dockerfile in its exec form: natively, a path runs as its
    image starts it (node's V8 flags included)."""
    line = next(line for line in reversed(dockerfile.read_text().splitlines()) if line.startswith("CMD "))
    return json.loads(line.removeprefix("CMD "))


def node_service(mongo_uri: str, db: str) -> ServiceProcess:
    directory = SERVICES / "node"
    if not (directory / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--omit=dev", "--no-audit", "--no-fund"], cwd=directory,
                       check=True, capture_output=True, timeout=300)
    port = free_port()
    return ServiceProcess("node", image_command(directory / "Dockerfile"), directory,
                          service_env(mongo_uri, db, port), port)


class NginxGridFSService:
    """The nginx-gridfs module natively (tests/support/nginx_gridfs_build.py),
    shaped like the other serving paths: url, port, start(), log(), stop()."""

    def __init__(self, mongo_uri: str, db: str):
        self.mongo_uri, self.db = mongo_uri, db
        self.nginx = None

    def start(self) -> "NginxGridFSService":
        from support.nginx_gridfs_build import Nginx, build_module
        self.prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-"))
        self.nginx = Nginx(build_module(), self.mongo_uri, self.prefix, self.prefix, self.db)
        self.port, self.url = self.nginx.port, self.nginx.url()
        return self

    def log(self) -> str:
        return self.nginx.log()

    def stop(self) -> None:
        if self.nginx:
            self.nginx.stop()
        shutil.rmtree(self.prefix, ignore_errors=True)


def nginx_gridfs_service(mongo_uri: str, db: str) -> NginxGridFSService:
    return NginxGridFSService(mongo_uri, db)


def native_nginx_config(source: Path, prefix: Path, replacements: dict[str, str]) -> str:
    """A service's nginx.conf rewritten to run unprivileged in `prefix`:
    each replacement must still match (else the service's config changed
    under the test), the error log moves into the prefix, and so does
    everything nginx writes, which the service keeps under /tmp."""
    text = source.read_text()
    if "pid /tmp/nginx.pid;" not in text:
        raise RuntimeError(f"{source} no longer keeps its pid under /tmp")
    text = text.replace(" /tmp/", f" {prefix}/")
    replacements = {**replacements, "error_log stderr warn;": f"error_log {prefix}/error.log warn;"}
    for old, new in replacements.items():
        if old not in text:
            raise RuntimeError(f"{source} no longer contains {old!r}")
        text = text.replace(old, new)
    return f"daemon off;\nworker_processes 1;\nerror_log {prefix}/error.log warn;\n" + text


class NginxStatic:
    """nginx with services/nginx-static/nginx.conf, rewritten to run
    unprivileged in a temporary prefix and serve `files_dir` at /files/;
    changes: more of native_nginx_config's replacements."""

    def __init__(self, files_dir: Path, changes: dict[str, str] | None = None):
        self.files_dir = files_dir
        self.changes = changes or {}
        self.prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> str:
        return native_nginx_config(SERVICES / "nginx-static" / "nginx.conf", self.prefix, {
            "listen 8080 reuseport;": f"listen 127.0.0.1:{self.port};",
            "alias /data/files/;": f"alias {self.files_dir}/;",
            **self.changes,
        })

    def start(self) -> "NginxStatic":
        conf = self.prefix / "nginx.conf"
        conf.write_text(self.config())
        self.proc = subprocess.Popen([NGINX, "-p", str(self.prefix), "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, "nginx", self.proc)
        return self

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.prefix, ignore_errors=True)


class LabNginxGridFS:
    """The module with services/nginx-gridfs/nginx.conf as the lab runs it
    (its thread pool, queue timeout, buffer size, cap on responses, log
    level), natively in a temporary prefix: the figures are of the
    configuration people run. changes: more of native_nginx_config's
    replacements, each of which must still match the lab's file."""

    name = "nginx-gridfs"

    def __init__(self, mongo_uri: str, db: str, files_dir: Path, changes: dict[str, str] | None = None,
                 deadline_ms: int | None = None):
        from support.nginx_gridfs_build import build_module
        self.prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-"))
        self.prefix.chmod(0o755)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # as the image's CMD writes it; deadline_ms: REQUEST_DEADLINE_MS
        deadline = f"gridfs_deadline {deadline_ms}ms;\n" if deadline_ms else ""
        (self.prefix / "gridfs-env.conf").write_text(
            f'mongo "{mongo_uri}";\ngridfs "{db}" "root_collection=fs" field=filename type=string;\n{deadline}')
        (self.prefix / "nginx.conf").write_text(native_nginx_config(
            SERVICES / "nginx-gridfs" / "nginx.conf", self.prefix, {
                "load_module /usr/lib/nginx/modules/ngx_http_gridfs_module.so;": f"load_module {build_module()};",
                "listen 8080 reuseport;": f"listen 127.0.0.1:{self.port};",
                "alias /data/files/;": f"alias {files_dir}/;", **(changes or {})}))
        self.proc = None

    def start(self) -> "LabNginxGridFS":
        self.proc = subprocess.Popen([NGINX, "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, "nginx-gridfs", self.proc)
        return self

    def log(self) -> str:
        return (self.prefix / "error.log").read_text(errors="replace") if (self.prefix / "error.log").exists() else ""

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.prefix, ignore_errors=True)
