"""One sandbox pool for many processes of a machine: the pool of one process (the trainer's
rank 0) served to the others (its DDP ranks), so that every rank's episodes share the same
build slots and device lanes instead of each rank timing on the same GPUs with its own pool.

    server = PoolServer(pool, address, authkey)          # in the process that owns the pool
    with RemotePool(address, authkey) as pool:           # in any other process
        result = await pool.evaluate(EvalRequest(...))   # the PoolClient API, unchanged

Requests travel as pickled ``EvalRequest``s over ``multiprocessing.connection`` (HMAC-checked
with ``authkey``, so only processes given the key can submit); paths must name files the
serving process can read (one machine, or a shared filesystem). ``address`` is a Unix socket
path, or ``host:port`` for ranks on other nodes.
"""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Future
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener, answer_challenge, deliver_challenge
from typing import Any, Union

from .pool import EvalRequest, EvalResult, PoolClient

Address = Union[str, tuple[str, int]]


def parse_address(address: str) -> Address:
    """``/path/to/socket`` or ``host:port``."""
    host, sep, port = address.rpartition(":")
    if sep and port.isdigit() and "/" not in address:
        return host, int(port)
    return address


class PoolServer:
    """Accepts connections and forwards every request to ``pool``; results go back as they finish."""

    def __init__(self, pool: PoolClient, address: str, authkey: bytes):
        self.pool = pool
        self._listener = Listener(parse_address(address), authkey=authkey)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="pool-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn = self._listener.accept()
            except (OSError, EOFError, AuthenticationError):
                if self._closed.is_set():
                    return
                # A client that failed the handshake (a wrong key raises AuthenticationError):
                # refused, and the server goes on accepting the others.
                continue
            threading.Thread(target=self._serve, args=(conn,), name="pool-conn", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        futures: dict[int, Future] = {}
        send_lock = threading.Lock()

        def reply(key: int, future: Future) -> None:
            futures.pop(key, None)
            result = future.result() if not future.cancelled() else EvalResult("", cancelled=True)
            with send_lock:
                try:
                    conn.send((key, result))
                except OSError:
                    pass  # the client is gone

        try:
            while True:
                op, key, payload = conn.recv()
                if op == "submit" and isinstance(payload, EvalRequest):
                    future = self.pool.submit(payload)
                    futures[key] = future
                    future.add_done_callback(lambda f, k=key: reply(k, f))
                elif op == "cancel" and key in futures:
                    self.pool.cancel(futures[key])
        except (EOFError, OSError):
            for future in list(futures.values()):  # the client died: its work is not wanted
                self.pool.cancel(future)
        finally:
            conn.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()


class RemotePool(PoolClient):
    """A PoolClient whose evaluations run in the pool a PoolServer serves."""

    def __init__(self, address: str, authkey: bytes, connect_timeout_s: float = 120.0):
        self._conn = _connect(parse_address(address), authkey, connect_timeout_s)
        self._futures: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._reader = threading.Thread(target=self._read, name="remote-pool", daemon=True)
        self._reader.start()

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        future: Future = Future()
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._futures[key] = future
            self._conn.send(("submit", key, request))
        future.set_running_or_notify_cancel()
        future._remote_key = key  # type: ignore[attr-defined]
        return future

    def cancel(self, future: Future) -> bool:
        key = getattr(future, "_remote_key", None)
        if key is None or future.done():
            return False
        with self._lock:
            self._conn.send(("cancel", key, None))
        return True

    def _read(self) -> None:
        try:
            while True:
                key, result = self._conn.recv()
                with self._lock:
                    future = self._futures.pop(key, None)
                if future is not None:
                    future.set_result(result)
        except Exception as exc:  # EOF, a reset, or the connection closed under the reader
            with self._lock:
                pending, self._futures = list(self._futures.values()), {}
            for future in pending:
                future.set_exception(ConnectionError(f"the sandbox pool server went away: {exc}"))

    def close(self, cancel_pending: bool = False) -> None:
        if cancel_pending:
            with self._lock:
                keys = list(self._futures)
            for key in keys:
                try:
                    self._conn.send(("cancel", key, None))
                except OSError:
                    break
        self._conn.close()


def _connect(address: Any, authkey: bytes, timeout_s: float) -> Connection:
    """Connect, retrying while the serving process is still starting its pool; the key
    handshake is bounded by the same deadline (``Client``'s would wait forever on a server
    that took the connection but never answered)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = _open_socket(address)
            break
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            if time.monotonic() > deadline:
                raise ConnectionError(f"no sandbox pool server at {address} after {timeout_s:g} s: {exc}") from None
            time.sleep(0.2)
    # The server speaks first (its challenge); once it has, the rest of the exchange is immediate.
    if not conn.poll(max(0.0, deadline - time.monotonic())):
        conn.close()
        raise ConnectionError(f"the sandbox pool server at {address} took the connection but did not start the "
                              f"key handshake within {timeout_s:g} s")
    try:
        answer_challenge(conn, authkey)
        deliver_challenge(conn, authkey)
    except BaseException:
        conn.close()
        raise
    return conn


def _open_socket(address: Address) -> Connection:
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setblocking(True)
        sock.connect(address)
        return Connection(sock.detach())
