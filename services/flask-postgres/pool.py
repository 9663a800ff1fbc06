"""A small PostgreSQL connection pool for one gevent worker: at most `size`
connections, each taken for one query and given back, every wait bounded.

Not psycopg_pool: its background threads (reconnect, grow, check) add
moving parts under gevent for nothing this path needs: a connection that
breaks is dropped, the next query connects anew, and a stale pooled
connection (PostgreSQL restarted) is retried once on a fresh one.
"""
import threading

import gevent
import psycopg
from gevent import monkey
from gevent.lock import BoundedSemaphore

from lab_http import StoreUnavailable


class QueryTimeout(Exception):
    """No answer in time: the server is frozen or the network gone."""


class Pool:
    def __init__(self, conninfo: str, size: int, connect_timeout: int, statement_timeout: float,
                 application_name: str, wait_timeout: float = 60):
        self.conninfo = conninfo
        self.password = psycopg.conninfo.conninfo_to_dict(conninfo).get("password") or None
        self.connect_options = {
            "connect_timeout": connect_timeout,  # libpq counts whole seconds, 2 at least
            "application_name": application_name,
            "options": f"-c statement_timeout={int(statement_timeout * 1000)}",
            "autocommit": True,  # one statement per use: no transaction left open between chunks
        }
        # statement_timeout needs a live server; this bounds the wait when
        # the server (or the network) stops answering altogether.
        self.query_timeout = statement_timeout + 1
        # For a free connection when all are busy. Long: before an answer's
        # head the request's deadline ends the wait sooner (FileStore.within);
        # after it, a late batch beats a cut body, as at nginx-gridfs (at
        # 5 s, 50 clients of 100 MB cut 13-18 bodies short in make overload).
        self.wait_timeout = wait_timeout
        self.idle: list[psycopg.Connection] = []
        # In a gevent worker, gevent's own: its release never waits, so that
        # the request's deadline (a gevent.Timeout) cannot land inside it,
        # as it could in threading's, whose Condition lock yields
        # ("Semaphore released too many times", a 500, when deadlines passed
        # under overload). threading's where the pool serves real threads.
        gevent_worker = monkey.is_module_patched("threading")
        self.slots = (BoundedSemaphore if gevent_worker else threading.BoundedSemaphore)(size)

    def query(self, sql: str, params: tuple) -> list[tuple]:
        """All rows of one statement, in binary format (bytea as bytes)."""
        if not self.slots.acquire(timeout=self.wait_timeout):
            raise StoreUnavailable(f"no free PostgreSQL connection within {self.wait_timeout:g} s")
        try:
            may_retry = True
            while True:
                reused = bool(self.idle)
                connection = self.idle.pop() if reused else self._connect()
                try:
                    with gevent.Timeout(self.query_timeout, QueryTimeout):
                        rows = connection.execute(sql, params, binary=True).fetchall()
                except psycopg.Error as error:
                    # A pooled connection the server dropped (it restarted):
                    # the other idle ones are dead too; once more on a new one.
                    stale = reused and connection.broken
                    connection.close()
                    if stale and may_retry:
                        may_retry = False
                        self.close_idle()
                        continue
                    raise StoreUnavailable(self.describe(error)) from error
                except QueryTimeout as error:
                    connection.close()  # mid-statement: not reusable
                    raise StoreUnavailable(f"no answer from PostgreSQL within {self.query_timeout:g} s") from error
                except BaseException:
                    connection.close()
                    raise
                self.idle.append(connection)
                return rows
        finally:
            self.slots.release()

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.conninfo, **self.connect_options)
        except psycopg.Error as error:
            raise StoreUnavailable(self.describe(error)) from error

    def close_idle(self) -> None:
        while self.idle:
            self.idle.pop().close()

    def describe(self, error: psycopg.Error) -> str:
        """One line naming the error, for the log: libpq's messages carry no
        password, and the password is masked should one ever do."""
        text = f"{type(error).__name__}: {' '.join(str(error).split())}"
        return text.replace(self.password, "***") if self.password else text
