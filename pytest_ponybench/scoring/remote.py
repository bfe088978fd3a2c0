"""The trust boundary between a check (trusted) and the agent's code (untrusted).

A check's own process runs the task author's check code and writes the verdict. The agent's
code never runs there: `checklib.load` forks a *host* process per tree (the delivered copy,
the reference copy, a non-ASCII copy), imports the agent's module in it and hands the check
a `Remote` proxy. Every use of the proxy (an attribute, a call, an item, iteration, a
comparison, len, bool, hash, str, repr, isinstance) is one request over a socketpair, and
only data crosses: JSON with a 4-byte length prefix, tagged for what JSON lacks (tuples,
sets, bytes, Decimal, dates, big ints, NaN, dataclass fields). Never a pickle: nothing the
host sends can make the check run code of its choosing.

Objects that are not data stay where they were made and cross as handles: an agent object
is a `Remote` in the check; a callable the check passes (a clock lambda, a spy, a fake
gateway) is a proxy in the host that calls back into the check, which serves such requests
while it waits for its own reply. The host may only call what the check handed it and read
its public attributes: it gets no `__globals__`, no module, no setattr on the check's side.

The host is forked from the check at its first load, so it starts with the check's state:
sys.path, the fake clock and time zone, the stdlib functions the check patched before
loading (which become call-backs into the check, so a counting spy counts where the check
reads it). Later changes of the working directory and of os.environ (TZ included) follow
each request. After the fork the host closes every fd but its socket and stdio, becomes
non-dumpable and, where `sandbox.py` exists, drops to an unprivileged user.

A host that dies, sends garbage, a message over MESSAGE_LIMIT or a value nested deeper
than DEPTH_LIMIT is killed and marks the check broken: `checks.run_here` then writes a
failing verdict, whatever the check code caught.
"""
from __future__ import annotations

import base64
import builtins
import ctypes
import dataclasses
import datetime as _dt
import importlib.util
import itertools
import json
import math
import os
import signal
import socket
import struct
import sys
import time
from decimal import Decimal
from pathlib import Path

from pytest_ponybench.processes import procs
from pytest_ponybench.scoring import check_clock, check_state

MESSAGE_LIMIT = 32 * 1024 * 1024  # bytes of one message from the host
DEPTH_LIMIT = 120  # nesting of one value
REPR_LIMIT = 100_000  # characters of a str() or repr() of an agent object
_HEADER = struct.Struct(">I")


class AgentProcessDied(BaseException):
    """The agent's process ended or broke the protocol during a call. A BaseException: a
    check's `except Exception` (a refusal is fine) must not read a dead host as a refusal."""


# Handles of the view without the good reference's copy (sandbox.agent_view), made by the
# check's process in the sandbox: the hosts of the agent's trees and its programs join it.
AGENT_VIEW: tuple[int, int] | None = None
_broken: list[str] = []
_reply_errors: list = []  # the last exception a reply carried (not an interruption of the wait)


def _is_reply_error(exc) -> bool:
    """Did `exc` come in a reply (the other side's error), rather than interrupt the wait?"""
    found = bool(_reply_errors) and _reply_errors[-1] is exc
    _reply_errors.clear()
    return found  # why the check must fail whatever its code caught (checks.run_here)


def broken() -> str | None:
    return _broken[0] if _broken else None


def _set_non_dumpable() -> None:
    """PR_SET_DUMPABLE 0: no process of the same user may ptrace this one or read its memory."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def is_reference(path) -> bool:
    """Is `path` the good reference's copy, or in it (a tree the reference's host runs)?"""
    if check_state.REFERENCE is None or not path:
        return False
    reference = os.path.realpath(str(check_state.REFERENCE))
    real = os.path.realpath(str(path))
    return real == reference or real.startswith(reference.rstrip("/") + "/")


def enter_agent_view() -> None:
    """In a process that will run the agent's code: the view without the reference's copy,
    where the check made one (AGENT_VIEW); else nothing."""
    if AGENT_VIEW is not None:
        from pytest_ponybench.processes import sandbox

        sandbox.enter_agent_view(AGENT_VIEW)


def become_untrusted() -> None:
    """Drop to the sandbox's unprivileged user where sandbox.py provides it and this check
    runs in its sandbox (`sandbox.IN_SANDBOX`: its copies handed over to that user), unless
    this process already is that user; else nothing."""
    try:
        from pytest_ponybench.processes import sandbox  # type: ignore[attr-defined]
    except ImportError:
        return
    drop = getattr(sandbox, "become_untrusted", None)
    if drop is None or not getattr(sandbox, "IN_SANDBOX", False):
        return
    if os.geteuid() == getattr(sandbox, "UNTRUSTED_UID", None):
        return
    drop()


# Values ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _ExportInfo:
    id: int
    kind: str  # "callable", "class", "module", "object", "exception"
    name: str


class Record:
    """A dataclass instance of the agent's, by value: its class name and fields (`r.field`),
    equal to another Record of the same class name and fields. Its original stays in the host
    (`method` calls go there) and is what the host gets back when the record is passed in."""

    __slots__ = ("_name", "_fields", "_remote")

    def __init__(self, name: str, fields: dict, remote=None):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_remote", remote)

    def __getattr__(self, name):
        fields = object.__getattribute__(self, "_fields")
        if name in fields:
            return fields[name]
        remote = object.__getattribute__(self, "_remote")
        if remote is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(remote, name)

    def __setattr__(self, name, value):
        raise AttributeError(f"a {self._name} record from the agent's code is read-only")

    def __eq__(self, other):
        if isinstance(other, Record):
            return self._name == other._name and self._fields == other._fields
        return NotImplemented

    def __hash__(self):
        return hash((self._name, tuple(self._fields.items())))

    def __repr__(self):
        return f"{self._name}({', '.join(f'{k}={v!r}' for k, v in self._fields.items())})"

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self


class Endpoint:
    """One side of the socket: its own exported objects, proxies of the other side's, and the
    request loop that serves the other side's requests while waiting for its own reply."""

    def __init__(self, sock: socket.socket, trusted: bool, name: str = "agent"):
        self.sock = sock
        self.trusted = trusted  # the check's side: limits what arrives, refuses most requests
        self.name = name
        self.objects: dict[int, object] = {}
        self.next_id = 1
        self.releases: list[int] = []
        self.pid = 0
        self.cwd = None
        self.environ: dict | None = None
        self.dead = False
        self.calls = 0
        self.skip_roots: list[str] = []  # trees whose modules are the agent's, not patched stdlib
        self.forwarded: set[tuple[str, str]] = set()  # stdlib functions the host calls back here
        self.fake_datetime = False
        self.clock_seen = None
        self.syncing = False
        self.exception_ids: dict[int, int] = {}  # id() of an exception of ours -> its handle
        self.mirrors: dict[int, BaseException] = {}  # handle of the other side's exception -> its mirror

    # wire -------------------------------------------------------------------------------
    def _send(self, message) -> None:
        self._send_raw(json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8"))

    def _send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(_HEADER.pack(len(data)) + data)
        except OSError as exc:
            self._die(f"the agent's process closed its end ({exc.strerror or exc})")

    def _recv_exact(self, size: int) -> bytes:
        chunks, got = [], 0
        while got < size:
            try:
                chunk = self.sock.recv(min(size - got, 1 << 20))
            except (ConnectionError, OSError) as exc:  # an alarm's TimeoutError is no end of the host
                if not isinstance(exc, ConnectionError) or not self.trusted:
                    raise
                chunk = b""
            if not chunk:
                if not self.trusted:
                    os._exit(0)  # the check went away: nothing left to serve
                self._die(self._exit_reason())
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _recv(self):
        (size,) = _HEADER.unpack(self._recv_exact(_HEADER.size))
        if self.trusted and size > MESSAGE_LIMIT:
            self._die(f"the agent's code sent a value of {size} bytes, over the boundary's limit of {MESSAGE_LIMIT}")
        data = self._recv_exact(size)
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            self._die("the agent's process sent something that is not a message of the boundary (or nested too deep)")
        if not isinstance(message, dict):
            self._die("the agent's process sent something that is not a message of the boundary")
        return message

    def _exit_reason(self) -> str:
        code = None
        if self.pid:
            try:
                for _ in range(200):  # it closed its socket: it is ending, or about to be ended
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                    if pid:
                        break
                    time.sleep(0.005)
                else:
                    os.kill(self.pid, signal.SIGKILL)
                    pid, status = os.waitpid(self.pid, 0)
                code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                pass
            self.pid = 0
        said = f" (exit code {code})" if code is not None and code >= 0 else (
            f" (signal {-code})" if code is not None else "")
        return f"the code under test ended its own process{said} during a call from the check"

    def _stop(self, reason: str) -> None:
        """End the host without failing the check for it (the check's own choice)."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0
        self.dead = True
        self.stopped = reason
        try:
            self.sock.close()
        except OSError:
            pass

    def _die(self, reason: str):
        """The host broke the boundary: kill it, mark the check failed, stop the check's call."""
        if not self.dead:
            self.dead = True
            if not _broken:
                _broken.append(reason)
            if self.pid:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
                self.pid = 0
            try:
                self.sock.close()
            except OSError:
                pass
        raise AgentProcessDied(_broken[0] if _broken else reason)

    # requests ---------------------------------------------------------------------------
    def request(self, op: str, target=None, *args):
        if self.dead:
            raise AgentProcessDied(_broken[0] if _broken else getattr(self, "stopped", "the agent's process is gone"))
        message = {"q": op, "t": target, "a": [self.encode(a) for a in args]}
        if self.releases:
            message["free"], self.releases = self.releases, []
        if self.trusted:
            self.calls += 1
            if not self.syncing and _clock_points() != self.clock_seen:
                self.sync_patches()
            cwd = os.getcwd()
            if cwd != self.cwd:
                message["cwd"] = self.cwd = cwd
            raw = os.environ._data  # compared as is: a copy of os.environ each call costs more than the call
            if raw != self.environ:
                self.environ = dict(raw)
                message["env"] = dict(os.environ)
        self._send(message)
        try:
            return self.wait()
        except (AgentProcessDied, GeneratorExit):
            raise
        except BaseException as exc:
            if not self.trusted or _is_reply_error(exc):
                raise
            # The check stopped waiting (its own alarm, a KeyboardInterrupt): the reply would
            # come to its next request. The host is ended; later uses of it fail.
            self._stop(f"the check stopped waiting for a call ({type(exc).__name__}); the agent's process was ended")
            raise

    def wait(self):
        while True:
            message = self._recv()
            if "q" in message:
                self.serve(message)
                continue
            if "e" in message:
                exc = self.decode_exception(message["e"])
                _reply_errors.append(exc)
                raise exc
            if "r" not in message:
                self._die("the agent's process sent a reply without a value")
            return self.decode(message["r"])

    def serve(self, message) -> None:
        for handle in message.get("free") or ():
            self.objects.pop(handle, None)
        try:
            if not self.trusted:
                if "cwd" in message:
                    os.chdir(message["cwd"])
                if "env" in message:
                    _apply_environ(message["env"])
            op = message["q"]
            handler = (TRUSTED_OPS if self.trusted else HOST_OPS).get(op)
            if handler is None:
                raise PermissionError(f"the boundary does not let the agent's code {op!r} the check's objects")
            target = None
            if message.get("t") is not None:
                if message["t"] not in self.objects:
                    raise LookupError("the boundary knows no such object")
                target = self.objects[message["t"]]
            args = [self.decode(a) for a in message.get("a") or ()]
            value = handler(self, target, *args)
            reply = {"r": self.encode(value, depth=0)}
        except AgentProcessDied:
            raise
        except BaseException as exc:  # the other side's call failed: it gets the exception
            reply = {"e": self.encode_exception(exc)}
        try:
            data = json.dumps(reply, separators=(",", ":"), allow_nan=False).encode("utf-8")
        except (ValueError, TypeError, RecursionError) as exc:
            error = ValueError(f"the value could not cross the boundary: {_safe_str(exc)[:300]}")
            data = json.dumps({"e": self.encode_exception(error)}).encode("utf-8")
        self._send_raw(data)

    def serve_forever(self) -> None:
        while True:
            message = self._recv()
            if "q" not in message:
                continue
            self.serve(message)

    def sync_patches(self) -> None:
        """Make the stdlib functions the check patched (a spy, the fake clock) call back into
        the check from the host, and the host's datetime classes follow the fake clock's."""
        self.syncing = True
        try:
            self.clock_seen = _clock_points()
            new = [[module, attr] for module, attr, _ in _patched_functions(self.skip_roots)
                   if (module, attr) not in self.forwarded]
            fake = sys.modules["datetime"].datetime is check_clock.FakeDatetime
            if new or fake != self.fake_datetime:
                self.forwarded.update((module, attr) for module, attr in new)
                self.fake_datetime = fake
                self.request("patch", None, new, fake)
        finally:
            self.syncing = False

    # exports ----------------------------------------------------------------------------
    def export(self, value) -> dict:
        handle = self.next_id
        self.next_id += 1
        self.objects[handle] = value
        if isinstance(value, BaseException):
            kind = "exception"
        elif isinstance(value, type):
            kind = "class"
        elif type(value).__name__ == "module":
            kind = "module"
        elif callable(value):
            kind = "callable"
        else:
            kind = "object"
        name = getattr(value, "__name__", None) if kind != "object" else None
        if not isinstance(name, str):
            name = type(value).__name__
        return {"$": "obj", "id": handle, "kind": kind, "name": str(name)[:200]}

    # encoding ---------------------------------------------------------------------------
    def encode(self, value, depth: int = 0):
        if depth > DEPTH_LIMIT:
            raise ValueError(f"a value nested deeper than {DEPTH_LIMIT} levels cannot cross the boundary")
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int:
            return value if -(2 ** 53) < value < 2 ** 53 else {"$": "int", "v": str(value)}
        if kind is float:
            return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
        if isinstance(value, Proxy) and value._endpoint is self:
            return {"$": "ref", "id": value._id}
        if isinstance(value, Record) and value._remote is not None and value._remote._endpoint is self:
            return {"$": "ref", "id": value._remote._id}
        inner = depth + 1
        if kind is _ByReference:
            return self.export(value.value)
        if isinstance(value, BaseException):
            return {"$": "exc", "v": self.encode_exception(value)}
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int) and not hasattr(value, "_value_"):  # an IntEnum stays an object
            return self.encode(int.__int__(value), depth)
        if isinstance(value, float):
            return self.encode(float.__float__(value), depth)
        if isinstance(value, str) and not hasattr(value, "_value_"):
            return str.__str__(value)
        if isinstance(value, (bytes, bytearray)):
            return {"$": "bytes" if isinstance(value, bytes) else "bytearray",
                    "v": base64.b64encode(bytes(memoryview(value))).decode("ascii")}
        if isinstance(value, Decimal):
            return {"$": "dec", "v": Decimal.__str__(value)}
        if isinstance(value, list):
            return [self.encode(item, inner) for item in list.__iter__(value)]
        if isinstance(value, tuple):
            return {"$": "tuple", "v": [self.encode(item, inner) for item in tuple.__iter__(value)]}
        if isinstance(value, dict):
            return {"$": "dict", "v": [[self.encode(k, inner), self.encode(v, inner)] for k, v in dict.items(value)]}
        if isinstance(value, (set, frozenset)):
            items = set.__iter__(value) if isinstance(value, set) else frozenset.__iter__(value)
            return {"$": "set" if isinstance(value, set) else "frozenset", "v": [self.encode(i, inner) for i in items]}
        if isinstance(value, _dt.datetime):
            return {"$": "datetime", "v": _dt.datetime.isoformat(value), "tz": self._zone(value.tzinfo)}
        if isinstance(value, _dt.date):
            return {"$": "date", "v": _dt.date.isoformat(value)}
        if isinstance(value, _dt.time):
            return {"$": "time", "v": _dt.time.isoformat(value), "tz": self._zone(value.tzinfo)}
        if isinstance(value, _dt.timedelta):
            return {"$": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
        if kind is slice:
            return {"$": "slice", "v": [self.encode(value.start, inner), self.encode(value.stop, inner),
                                        self.encode(value.step, inner)]}
        if not self.trusted and dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = [[f.name, self.encode(getattr(value, f.name), inner)] for f in dataclasses.fields(value)]
            return {"$": "record", "name": type(value).__name__, "v": fields, "obj": self.export(value)}
        return self.export(value)

    @staticmethod
    def _zone(tz):
        if tz is None:
            return None
        key = getattr(tz, "key", None)
        if isinstance(key, str):
            return key
        return None  # the offset is in the isoformat

    def decode(self, value, depth: int = 0):
        if depth > DEPTH_LIMIT:
            self._die(f"the agent's code sent a value nested deeper than {DEPTH_LIMIT} levels")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        inner = depth + 1
        if isinstance(value, list):
            return [self.decode(item, inner) for item in value]
        if not isinstance(value, dict):
            self._die("the agent's process sent a value the boundary does not know")
        tag = value.get("$")
        data = value.get("v")
        try:
            if tag == "tuple":
                return tuple(self.decode(item, inner) for item in data)
            if tag == "dict":
                return {self.decode(k, inner): self.decode(v, inner) for k, v in data}
            if tag == "set":
                return {self.decode(item, inner) for item in data}
            if tag == "frozenset":
                return frozenset(self.decode(item, inner) for item in data)
            if tag == "bytes":
                return base64.b64decode(data, validate=True)
            if tag == "bytearray":
                return bytearray(base64.b64decode(data, validate=True))
            if tag == "dec":
                return Decimal(data)
            if tag == "int":
                if not isinstance(data, str) or len(data) > 5000:
                    raise ValueError("int too long")
                return int(data)
            if tag == "float":
                if data not in ("nan", "inf", "-inf"):
                    raise ValueError("not a non-finite float")
                return float(data)
            if tag == "datetime":
                moment = _dt.datetime.fromisoformat(data)
                return moment.replace(tzinfo=_zone_info(value.get("tz"))) if value.get("tz") else moment
            if tag == "date":
                return _dt.date.fromisoformat(data)
            if tag == "time":
                moment = _dt.time.fromisoformat(data)
                return moment.replace(tzinfo=_zone_info(value.get("tz"))) if value.get("tz") else moment
            if tag == "timedelta":
                return _dt.timedelta(*data)
            if tag == "exc":
                return self.decode_exception(data)
            if tag == "slice":
                return slice(*(self.decode(part, inner) for part in data))
            if tag == "ref":
                return self.objects[value["id"]]
            if tag == "obj":
                return make_proxy(self, int(value["id"]), str(value["kind"]), str(value["name"]))
            if tag == "record":
                fields = {str(k): self.decode(v, inner) for k, v in data}
                obj = value["obj"]
                return Record(str(value["name"]), fields, make_proxy(self, int(obj["id"]), "object", str(obj["name"])))
        except AgentProcessDied:
            raise
        except (TypeError, ValueError, KeyError, LookupError, ArithmeticError, AttributeError, RecursionError) as exc:
            self._die(f"the agent's process sent a malformed {tag} value ({type(exc).__name__})")
        self._die(f"the agent's process sent a value the boundary does not know ({str(tag)[:40]!r})")

    # exceptions -------------------------------------------------------------------------
    def encode_exception(self, exc: BaseException) -> dict:
        """An exception as data: its class's name, builtin bases, module and args, and a handle,
        so the same exception coming back is the same object (`got is error` in a check)."""
        origin = getattr(exc, ORIGIN, None) if type(exc).__dict__.get(ORIGIN) is None else None
        if isinstance(origin, Proxy) and origin._endpoint is self:
            return {"ref": origin._id}
        handle = self.exception_ids.get(id(exc))
        if handle is None or self.objects.get(handle) is not exc:
            handle = self.export(exc)["id"]
            self.exception_ids[id(exc)] = handle
        cls = type(exc)
        bases = [c.__name__ for c in cls.__mro__ if getattr(builtins, c.__name__, None) is c]
        try:
            args = self.encode(tuple(exc.args))
            json.dumps(args, allow_nan=False)
        except BaseException:
            args = {"$": "tuple", "v": [_safe_str(exc)]}
        try:
            text = _safe_str(exc)
        except BaseException:
            text = ""
        return {"name": str(getattr(cls, "__name__", "Exception"))[:200], "bases": bases, "args": args, "id": handle,
                "module": str(getattr(cls, "__module__", ""))[:200], "qualname": str(getattr(cls, "__qualname__", ""))[:200],
                "str": text[:REPR_LIMIT], "code": self.encode(exc.code) if isinstance(exc, SystemExit)
                and isinstance(exc.code, (int, str, type(None))) else None}

    def decode_exception(self, data) -> BaseException:
        if not isinstance(data, dict):
            self._die("the agent's process sent a malformed exception")
        if "ref" in data:  # one of ours, back
            exc = self.objects.get(data["ref"])
            if not isinstance(exc, BaseException):
                self._die("the agent's process sent a malformed exception")
            return exc
        handle = data.get("id")
        if isinstance(handle, int) and handle in self.mirrors:
            return self.mirrors[handle]
        name, bases = str(data.get("name") or "Exception"), data.get("bases") or []
        builtin = getattr(builtins, name, None)
        known = _known_class(str(data.get("module") or ""), str(data.get("qualname") or ""))
        if isinstance(builtin, type) and issubclass(builtin, BaseException) and name in bases:
            cls = builtin
        elif known is not None:
            cls = known
        else:
            base = next((getattr(builtins, b) for b in bases if isinstance(getattr(builtins, b, None), type)
                         and issubclass(getattr(builtins, b), BaseException)), Exception)
            cls = _mirror_class(name, base)
        if issubclass(cls, AgentProcessDied):
            cls = _mirror_class(name, Exception)
        args = self.decode(data.get("args")) if data.get("args") is not None else ()
        if not isinstance(args, tuple):
            args = (args,)
        if cls is SystemExit:
            exc = SystemExit(self.decode(data.get("code")))
        else:
            try:
                exc = cls(*args)
            except Exception:
                exc = cls.__new__(cls)
                exc.args = args
            if cls not in (KeyError,) and str(data.get("str") or "") and _safe_str(exc) != data.get("str"):
                exc.args = (str(data.get("str")),)
        if isinstance(handle, int):
            try:
                setattr(exc, ORIGIN, make_proxy(self, handle, "object", name))
            except AttributeError:
                pass
            self.mirrors[handle] = exc
        return exc


ORIGIN = "_ponybench_origin"  # on a mirrored exception: the proxy of the other side's original


def _safe_str(exc) -> str:
    try:
        text = BaseException.__str__(exc) if type(exc).__str__ is not BaseException.__str__ else str(exc)
        return text if type(text) is str else ""
    except BaseException:
        return ""


def _known_class(module: str, qualname: str):
    """The check's own class of an exception from a module it has imported itself (sqlite3's
    OperationalError): `except sqlite3.Error` then works. Never imports anything: the check's
    process holds no module of the agent's."""
    if not module or module.split(".")[0] in _NOT_MIRRORED:
        return None  # the harness's and Hypothesis's own exceptions steer the check: never the agent's
    owner = sys.modules.get(module)
    if owner is None or getattr(owner, "__file__", None) is None and module not in sys.builtin_module_names:
        return None
    value = owner
    for part in qualname.split("."):
        if not part.isidentifier():
            return None
        value = getattr(value, part, None)
    if isinstance(value, type) and issubclass(value, Exception) and not issubclass(value, AgentProcessDied):
        return value
    return None


_NOT_MIRRORED = {"builtins", "__main__", "pytest_ponybench", "hypothesis", "_pytest", "pytest", "_hypothesis_ftz_detector"}

_mirrors: dict = {}


def _mirror_class(name: str, base: type) -> type:
    """A local exception class standing for one of the agent's: the same name, the builtin base."""
    key = (name, base)
    if key not in _mirrors:
        _mirrors[key] = type(name if name.isidentifier() else "AgentError", (base,), {"__module__": "agent"})
    return _mirrors[key]


def _zone_info(key):
    from zoneinfo import ZoneInfo
    return ZoneInfo(key)


def _apply_environ(environ: dict) -> None:
    tz_before = os.environ.get("TZ")
    for key in list(os.environ):
        if key not in environ:
            del os.environ[key]
    for key, value in environ.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    if os.environ.get("TZ") != tz_before:
        time.tzset()


# Proxies --------------------------------------------------------------------------------------

class Proxy:
    """An object of the other side: every use is a request to it."""

    __slots__ = ("_endpoint", "_id", "_kind", "_name", "__weakref__")

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name not in _REMOTE_DUNDERS:
            raise AttributeError(name)
        return self._endpoint.request("getattr", self._id, name)

    def __setattr__(self, name, value):
        if name in Proxy.__slots__:
            object.__setattr__(self, name, value)
        else:
            self._endpoint.request("setattr", self._id, name, value)

    def __delattr__(self, name):
        self._endpoint.request("delattr", self._id, name)

    def __del__(self):
        try:
            if not self._endpoint.dead:
                self._endpoint.releases.append(self._id)
        except Exception:
            pass

    def __getitem__(self, key):
        return self._endpoint.request("getitem", self._id, key)

    def __setitem__(self, key, value):
        self._endpoint.request("setitem", self._id, key, value)

    def __delitem__(self, key):
        self._endpoint.request("delitem", self._id, key)

    def __contains__(self, item):
        return self._endpoint.request("contains", self._id, item)

    def __len__(self):
        return self._endpoint.request("len", self._id)

    def __iter__(self):
        return self._endpoint.request("iter", self._id)

    def __next__(self):
        return self._endpoint.request("next", self._id)

    def __bool__(self):
        return self._endpoint.request("bool", self._id)

    def __hash__(self):
        return self._endpoint.request("hash", self._id)

    def __str__(self):
        return self._endpoint.request("str", self._id)

    def __repr__(self):
        return self._endpoint.request("repr", self._id)

    def __format__(self, spec):
        return self._endpoint.request("format", self._id, spec)

    def __int__(self):
        return self._endpoint.request("int", self._id)

    def __float__(self):
        return self._endpoint.request("float", self._id)

    def __index__(self):
        return self._endpoint.request("index", self._id)

    def __enter__(self):
        return self._endpoint.request("enter", self._id)

    def __exit__(self, *exc):
        return self._endpoint.request("exit", self._id)

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def _compare(self, op, other):
        # Against one of its own side's objects the host compares; against plain data an agent
        # object is never equal (its own __eq__ could say anything), as for object().
        if isinstance(other, Proxy) and other._endpoint is self._endpoint:
            return self._endpoint.request("compare", self._id, op, other)
        if op in ("eq", "ne"):
            return (op == "ne") if not (isinstance(other, Proxy) and other._id == self._id) else (op == "eq")
        return NotImplemented

    def __eq__(self, other):
        return self._compare("eq", other)

    def __ne__(self, other):
        return self._compare("ne", other)

    def __lt__(self, other):
        return self._compare("lt", other)

    def __le__(self, other):
        return self._compare("le", other)

    def __gt__(self, other):
        return self._compare("gt", other)

    def __ge__(self, other):
        return self._compare("ge", other)

    def __instancecheck__(self, instance):
        return self._endpoint.request("isinstance", self._id, instance)

    def __subclasscheck__(self, subclass):
        return self._endpoint.request("issubclass", self._id, subclass)


_REMOTE_DUNDERS = {"__name__", "__file__", "__qualname__", "__module__", "__doc__", "__dict__", "__all__",
                   "__version__", "__dataclass_fields__", "__annotations__", "__path__", "__mro__", "__bases__",
                   "__wrapped__", "__self__", "__func__", "__code__", "__defaults__", "__kwdefaults__", "__signature__",
                   "__text_signature__", "__members__", "__slots__"}


class CallableProxy(Proxy):
    __slots__ = ()

    def __call__(self, *args, **kwargs):
        return self._endpoint.request("call", self._id, list(args), kwargs)


class Remote(Proxy):
    """An object of the agent's code, living in its host (what `load` and every call return
    when the value is not data)."""

    __slots__ = ()


class RemoteCallable(Remote, CallableProxy):
    __slots__ = ()


def make_proxy(endpoint: Endpoint, handle: int, kind: str, name: str) -> Proxy:
    if endpoint.trusted:
        cls = RemoteCallable if kind in ("callable", "class") else Remote
    else:
        cls = CheckCallable if kind in ("callable", "class") else CheckObject
    proxy = object.__new__(cls)
    object.__setattr__(proxy, "_endpoint", endpoint)
    object.__setattr__(proxy, "_id", handle)
    object.__setattr__(proxy, "_kind", kind)
    object.__setattr__(proxy, "_name", name)
    return proxy


class CheckObject(Proxy):
    """In the host: an object the check handed the agent's code (a callback, a fake)."""

    __slots__ = ()

    @property
    def __name__(self):
        return self._name


class CheckCallable(CheckObject, CallableProxy):
    __slots__ = ()


@dataclasses.dataclass(frozen=True)
class _ByReference:
    """A value to cross as a handle even when it is data (checklib.by_reference)."""
    value: object


# What each side does for the other -----------------------------------------------------------

def _compare(endpoint, target, op, other):
    import operator
    return bool(getattr(operator, op)(target, other))


def _exact_str(value) -> str:
    if type(value) is not str:
        raise TypeError(f"__str__ returned {type(value).__name__}, not str")
    return value[:REPR_LIMIT]


def _exact_int(value) -> int:
    if type(value) is bool:
        return value
    if not isinstance(value, int):
        raise TypeError(f"returned {type(value).__name__}, not int")
    return int.__int__(value)


def _find_function(endpoint, module, *names):
    for name in names:
        candidate = getattr(module, name, None)
        if callable(candidate):
            return candidate
    raise AssertionError(f"no function named any of {', '.join(names)}")


def _find_class(endpoint, module, method, *names):
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, type) and callable(getattr(value, method, None)):
            return value
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__ and callable(getattr(value, method, None)):
            return value
    raise AssertionError(f"no class {'named ' + ' or '.join(names) + ' ' if names else ''}with a method {method}()")


_counter = itertools.count()  # the new module name of each load_here


def load_here(path, name=None, root=None):
    """The module at `path` (of the workspace, or of `root`) imported for real, in this
    process, under a new name each call (two loads never share state): what a host does for
    the check's `load`, and what `load` does itself when the check is not behind the boundary."""
    target = (Path(root or check_state.WORKSPACE) / path).resolve()
    assert target.is_file(), f"{path} was not written"
    module_name = name or f"_pony_{target.stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, target)
    assert spec is not None and spec.loader is not None, f"{path} is not importable Python"
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


def _load(endpoint, target, path, name, root):
    return load_here(path, name=name, root=root)


def _module(endpoint, target, name):
    import importlib
    return importlib.import_module(name)


def _drop_module(endpoint, target, name):
    return sys.modules.pop(name, None) is not None


def _set_module(endpoint, target, name, value):
    sys.modules[name] = value
    return None


def _patch(endpoint, target, points, fake_datetime):
    """In the host: forward each patched function to the check's current one."""
    import importlib

    for module, attr in points:
        def forward(*args, _module=module, _attr=attr, **kwargs):
            return endpoint.request("patched", None, _module, _attr, list(args), kwargs)
        forward.__name__ = str(attr)
        setattr(importlib.import_module(module), attr, forward)
    if fake_datetime:
        sys.modules["datetime"].datetime, sys.modules["datetime"].date = check_clock.FakeDatetime, check_clock.FakeDate
    else:
        sys.modules["datetime"].datetime, sys.modules["datetime"].date = check_clock._REAL_DATETIME, check_clock._REAL_DATE
    return None


def _resolve(dotted: str):
    """(owner, attribute name) of a dotted name: the longest importable module, then attributes."""
    import importlib
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    raise LookupError(f"record_calls: {dotted} names no importable module's attribute")


_recording: list = []


def _record_start(endpoint, target, names):
    """In the host: wrap each named function so its calls are logged, arguments and all."""
    log: dict = {name: [] for name in names}
    saved = []
    for name in names:
        owner, attr = _resolve(name)
        original = getattr(owner, attr)

        def wrapper(*args, _log=log[name], _original=original, **kwargs):
            _log.append((args, kwargs))
            return _original(*args, **kwargs)
        saved.append((owner, attr, original))
        setattr(owner, attr, wrapper)
    _recording.append((log, saved))
    return len(_recording) - 1


def _record_stop(endpoint, target, index):
    log, saved = _recording[index]
    for owner, attr, original in reversed(saved):
        setattr(owner, attr, original)
    return {name: [[list(args), kwargs] for args, kwargs in calls] for name, calls in log.items()}


def _patched_call(endpoint, target, module, attr, args, kwargs):
    """In the check: the host's call of a function the check patched, run as the check has it now."""
    if (module, attr) not in endpoint.forwarded:
        raise PermissionError(f"{module}.{attr} is no function the check patched")
    return getattr(sys.modules[module], attr)(*args, **kwargs)


_CLOCK_POINTS = (("time", "time"), ("time", "monotonic"), ("time", "time_ns"), ("time", "monotonic_ns"),
                 ("datetime", "datetime"), ("datetime", "date"))


def _clock_points() -> tuple:
    """What the fake clock patches, cheaply compared on every request: a change means a sync."""
    return tuple(id(getattr(sys.modules.get(module), attr, None)) for module, attr in _CLOCK_POINTS)


HOST_OPS = {
    "getattr": lambda ep, t, name: getattr(t, name),
    "getref": lambda ep, t, name: _ByReference(getattr(t, name)),
    "subclass": lambda ep, t, name: type(name, (t,), {"__module__": getattr(t, "__module__", "agent")}),
    "setattr": lambda ep, t, name, value: setattr(t, name, value),
    "delattr": lambda ep, t, name: delattr(t, name),
    "call": lambda ep, t, args, kwargs: t(*args, **kwargs),
    "getitem": lambda ep, t, key: t[key],
    "setitem": lambda ep, t, key, value: t.__setitem__(key, value),
    "delitem": lambda ep, t, key: t.__delitem__(key),
    "contains": lambda ep, t, item: bool(item in t) is True,
    "len": lambda ep, t: _exact_int(len(t)),
    "iter": lambda ep, t: iter(t),
    "next": lambda ep, t: next(t),
    "bool": lambda ep, t: bool(t) is True,
    "hash": lambda ep, t: _exact_int(hash(t)),
    "str": lambda ep, t: _exact_str(str(t)),
    "repr": lambda ep, t: _exact_str(repr(t)),
    "format": lambda ep, t, spec: _exact_str(format(t, spec)),
    "int": lambda ep, t: _exact_int(int(t)),
    "float": lambda ep, t: float.__float__(float(t)),
    "index": lambda ep, t: _exact_int(t.__index__()),
    "enter": lambda ep, t: t.__enter__(),
    "exit": lambda ep, t: bool(t.__exit__(None, None, None)) is True,
    "compare": lambda ep, t, op, other: bool(_compare(ep, t, op, other)) is True,
    "isinstance": lambda ep, t, value: isinstance(value, t) is True,
    "issubclass": lambda ep, t, value: issubclass(value, t) is True,
    "find_function": lambda ep, t, *names: _find_function(ep, t, *names),
    "find_class": lambda ep, t, method, *names: _find_class(ep, t, method, *names),
    "load": _load,
    "module": _module,
    "drop_module": _drop_module,
    "set_module": _set_module,
    "patch": _patch,
    "record_start": _record_start,
    "record_stop": _record_stop,
    "ping": lambda ep, t: None,
}


def _public(name: str) -> str:
    if not isinstance(name, str) or name.startswith("_"):
        raise PermissionError(f"the agent's code may not read {name!r} of the check's objects")
    return name


def _check_attribute(endpoint, target, name):
    value = getattr(target, _public(name))
    if type(value).__name__ == "module" or isinstance(value, type(sys._getframe())):
        raise PermissionError(f"the agent's code may not reach the check's {name!r}")
    return value


# What the agent's code may do with an object the check handed it: use it, not reach past it.
TRUSTED_OPS = {
    "call": lambda ep, t, args, kwargs: t(*args, **kwargs),
    "getattr": _check_attribute,
    "getitem": lambda ep, t, key: t[key],
    "contains": lambda ep, t, item: item in t,
    "len": lambda ep, t: len(t),
    "iter": lambda ep, t: iter(t),
    "next": lambda ep, t: next(t),
    "bool": lambda ep, t: bool(t),
    "hash": lambda ep, t: hash(t),
    "str": lambda ep, t: str(t),
    "repr": lambda ep, t: repr(t),
    "format": lambda ep, t, spec: format(t, spec),
    "enter": lambda ep, t: t.__enter__(),
    "exit": lambda ep, t: bool(t.__exit__(None, None, None)),
    "compare": lambda ep, t, op, other: _compare(ep, t, op, other),
    "patched": _patched_call,
}


# Hosts ----------------------------------------------------------------------------------------

_hosts: dict[str, Endpoint] = {}


_FUNCTION_TYPE = type(lambda: None)
_METHOD_TYPE = type(Record.__init__.__get__(object()))


def _check_side(value) -> bool:
    """Was `value` made by the check (its code, or a helper marking it so)? Patched into the
    stdlib, the host calls it back instead of running its own copy. Cheap: it is asked of
    every attribute of every module at each load."""
    kind = type(value)
    if kind is _FUNCTION_TYPE:
        return value.__code__.co_filename == "<check>" or value.__dict__.get("_ponybench_check_side") is True
    if kind is _METHOD_TYPE:
        return _check_side(value.__func__)
    return getattr(kind, "__module__", None) == CHECK_MODULE and callable(value)


CHECK_MODULE = "__ponybench_check__"  # the __name__ of a check's namespace (checklib.namespace)


# The harness's own packages: a check patches what the agent's code uses, never these.
_NEVER_PATCHED = {"hypothesis", "pytest_ponybench", "_pytest", "pytest", "pluggy", "typing_extensions", "_hypothesis_globals",
                  "_hypothesis_ftz_detector", "yaml", "encodings"}


def _candidate_modules() -> list:
    """The modules a check can have patched: those its code names (`import hmac` then
    `hmac.compare_digest = spy`), their submodules, and what the helpers patch (time,
    datetime, builtins). Not all of sys.modules: looking at every attribute of every module
    costs a check tens of ms after a fork (each look writes a reference count, so the page is
    copied)."""
    names = {"time", "datetime", "builtins"}
    scope = check_state.CHECK_GLOBALS
    if scope is None:
        return list(sys.modules.items())
    module_type = type(sys)
    for value in list(scope.values()):
        if type(value) is module_type:
            names.add(value.__name__)
            names.update(v.__name__ for v in list(vars(value).values()) if type(v) is module_type)
        else:
            owner = getattr(value, "__module__", None)  # `from hmac import compare_digest`: hmac
            if isinstance(owner, str):
                names.add(owner)
    return [(name, sys.modules[name]) for name in names if name in sys.modules]


def _patched_functions(skip_roots) -> list[tuple[str, str, object]]:
    """Every module attribute the check set to one of its own callables (`_check_side`),
    inlined: this looks at every attribute of every module at each load."""
    found = []
    function, method = _FUNCTION_TYPE, _METHOD_TYPE
    for module_name, module in _candidate_modules():
        if module_name.partition(".")[0] in _NEVER_PATCHED:
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            kind = type(value)
            if kind is function:
                if value.__code__.co_filename != "<check>" and "_ponybench_check_side" not in value.__dict__:
                    continue
            elif kind is method:
                if not _check_side(value.__func__):
                    continue
            elif kind.__module__ != CHECK_MODULE or not callable(value):
                continue
            file = getattr(module, "__file__", None) or ""
            if not any(file.startswith(root) for root in skip_roots):
                found.append((module_name, attr, value))
    return found


def host(root) -> Endpoint:
    """The host process of one tree (forked on first use), its patches synced with the check's
    (a load or agent_module: what the check patched since is what the agent's code sees)."""
    key = str(root)
    endpoint = _hosts.get(key)
    if endpoint is None or endpoint.dead:
        if endpoint is not None and endpoint.dead:
            raise AgentProcessDied(_broken[0] if _broken else "the agent's process is gone")
        endpoint = _hosts[key] = start_host(key)
    endpoint.sync_patches()
    return endpoint


def start_host(root: str) -> Endpoint:
    ours, theirs = socket.socketpair()
    endpoint = Endpoint(ours, trusted=True, name=root)
    endpoint.skip_roots = [str(check_state.WORKSPACE), str(root)] + ([str(check_state.REFERENCE)] if check_state.REFERENCE else [])
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the host: the agent's code runs here and nowhere else
        code = 0
        try:
            ours.close()
            if not is_reference(root):  # the agent's code: it must not see the answer key
                enter_agent_view()
            keep = theirs.fileno()
            os.closerange(3, keep)
            os.closerange(keep + 1, 1 << 16)
            _set_non_dumpable()
            become_untrusted()
            _hosts.clear()
            side = Endpoint(theirs, trusted=False, name="host")
            if root not in sys.path:
                sys.path.insert(0, root)
            check_state.BEHIND_BOUNDARY = False  # in here, load() imports for real
            side.serve_forever()
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    theirs.close()
    endpoint.pid = pid
    return endpoint


def adopt_orphans() -> None:
    """PR_SET_CHILD_SUBREAPER: a process a host forks and orphans (a daemon, a pid hopper)
    becomes this process's child, not init's, so kill_descendants finds it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER = 36
    except (OSError, AttributeError):
        pass


def kill_descendants(rounds: int = 200) -> None:
    """SIGKILL every process under this one, orphans adopted included, until none is left."""
    me = os.getpid()
    for _ in range(rounds):
        children = procs.descendants(me) if os.path.isdir("/proc") else []
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
        while True:  # reap what died; what was adopted meanwhile is the next round's
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def close_hosts() -> None:
    """End every host (the check is over); a host that already died is reaped."""
    for endpoint in list(_hosts.values()):
        if endpoint.pid:
            try:
                os.kill(endpoint.pid, signal.SIGKILL)
                os.waitpid(endpoint.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            endpoint.pid = 0
        endpoint.dead = True
    _hosts.clear()


def round_trips() -> int:
    return sum(e.calls for e in _hosts.values())
