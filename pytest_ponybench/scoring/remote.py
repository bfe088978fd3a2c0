"""The trust boundary between a check (trusted) and the agent's code (untrusted): the protocol
both sides speak. What a host process does (its operations, starting it, what the check
patched) is host.py's.

A check's own process runs the task author's check code and writes the verdict. The agent's
code never runs there: `checklib.load` forks a *host* process per tree (the delivered copy,
the reference copy, a non-ASCII copy; host.py), imports the agent's module in it and hands the
check a `Remote` proxy. Every use of the proxy (an attribute, a call, an item, iteration, a
comparison, len, bool, hash, str, repr, isinstance) is one request over a socketpair, and
only data crosses: JSON with a 4-byte length prefix, tagged for what JSON lacks (tuples,
sets, bytes, Decimal, dates, big ints, NaN, dataclass fields). Never a pickle: nothing the
host sends can make the check run code of its choosing.

Objects that are not data stay where they were made and cross as handles: an agent object
is a `Remote` in the check; a stub the check's code wrote (a clock lambda, a spy, a fake
gateway) is a proxy in the host (`CheckObject`) that calls back into the check, which serves
such requests while it waits for its own reply. Nothing else of the check's side crosses
(`may_cross_as_stub`): a path, a file, a module or a library's function would run its methods
in the check's process, which sees the reference's copy; the check fails with a sentence
naming it (`crossing_refusal`), whatever its code or the agent's catches. What each side may ask of the other is the
table of operations its `Endpoint` serves (host.HOST_OPS, host.TRUSTED_OPS), handed to it by
whoever makes it: the host may only call what the check handed it and read its public
attributes: it gets no `__globals__`, no module, no setattr on the check's side. Changes of the
check's working directory and of os.environ (TZ included) go with each request.

A host that dies, sends garbage, a message over MESSAGE_LIMIT or a value nested deeper
than DEPTH_LIMIT is killed and marks the check broken: `checks.run_here` then writes a
failing verdict, whatever the check code caught.

Whole at about 900 lines: the framing, the codec and the proxies are one protocol (decoding
makes proxies, every proxy use is a request, a request waits while serving the other side's),
and a part cut off would import the rest as the rest imports it.

Imports only the standard library: never host.py, which builds on this module (an import of
it here, even inside a function, would be a cycle).
"""
from __future__ import annotations

import base64
import builtins
import dataclasses
import datetime as _dt
import io
import json
import math
import os
import signal
import socket
import struct
import sys
import time
import types
from decimal import Decimal


MESSAGE_LIMIT = 32 * 1024 * 1024  # bytes of one message from the host
DEPTH_LIMIT = 120  # nesting of one value
REPR_LIMIT = 100_000  # characters of a str() or repr() of an agent object
_HEADER = struct.Struct(">I")


class AgentProcessDied(BaseException):
    """The agent's process ended or broke the protocol during a call. A BaseException: a
    check's `except Exception` (a refusal is fine) must not read a dead host as a refusal."""


class NotPlainData(TypeError):
    """A value of the check's side that may not cross to the agent's code (`crossing_refusal`)."""


_broken: list[str] = []
_reply_errors: list = []  # the last exception a reply carried (not an interruption of the wait)


def _is_reply_error(exc) -> bool:
    """Did `exc` come in a reply (the other side's error), rather than interrupt the wait?"""
    found = bool(_reply_errors) and _reply_errors[-1] is exc
    _reply_errors.clear()
    return found  # why the check must fail whatever its code caught (checks.run_here)


def broken() -> str | None:
    return _broken[0] if _broken else None


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

    def __init__(self, sock: socket.socket, trusted: bool, name: str = "agent", *, ops: dict, sync=None):
        self.sock = sock
        self.trusted = trusted  # the check's side: limits what arrives, refuses most requests
        # What this side does for the other's requests (host.TRUSTED_OPS on the check's side,
        # host.HOST_OPS in the host) and, on the check's side, how it forwards what the check
        # patched (host.sync_patches): handed in by whoever makes the endpoint (host.start_host)
        # because host.py builds on this module, which must not import it back.
        self.ops = ops
        self.sync = sync
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
        try:
            message = {"q": op, "t": target, "a": [self.encode(a) for a in args]}
        except NotPlainData as refused:
            _fail_check(str(refused))  # the check fails, whatever its code catches (a differential reads errors as refusals)
            raise
        if self.releases:
            message["free"], self.releases = self.releases, []
        if self.trusted:
            self.calls += 1
            if not self.syncing and _clock_points() != self.clock_seen:
                self.sync(self)
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
            handler = self.ops.get(op)
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
            if isinstance(exc, NotPlainData):
                _fail_check(str(exc))  # a stub gave back an object of the check's side: the agent's code may catch that
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
        if kind is _ByReference and not self.trusted:
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
        if self.trusted and not may_cross_as_stub(value):
            raise NotPlainData(crossing_refusal(value))
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


def _fail_check(reason: str) -> None:
    if not _broken:
        _broken.append(reason)


# What of the check's side crosses as a handle ---------------------------------------------------

CHECK_MODULE = "__ponybench_check__"  # the __name__ of a check's namespace (checklib.namespace)
CHECK_CODE = "<check>"  # the file name a check's code is compiled under (checks.run_here)
FUNCTION_TYPE = types.FunctionType
METHOD_TYPE = types.MethodType

# Iterators over data: a check's stub may hand one back from __iter__; each item then crosses
# (or is refused) on its own at `next`.
_DATA_ITERATORS = frozenset(type(iter(empty)) for empty in ([], (), {}, set(), "", "\u00e9", b"", range(0), {}.values(), {}.items()))


def made_by_check(value) -> bool:
    """Is `value` a callable the check made (a function of its code, an instance of a class of
    its code, a method of either, or a function a helper marks as the check's: fake_clock's)?
    Cheap: a host's start asks it of every attribute of every module the check names."""
    kind = type(value)
    if kind is FUNCTION_TYPE:
        return value.__code__.co_filename == CHECK_CODE or value.__dict__.get("_ponybench_check_side") is True
    if kind is METHOD_TYPE:
        return made_by_check(value.__func__)
    return getattr(kind, "__module__", None) == CHECK_MODULE and callable(value)


def may_cross_as_stub(value) -> bool:
    """May this object of the check's side cross to the agent's code as a handle, whose every
    use runs back in the check's process (which sees the reference)? Only the stubs a ticket's
    interface needs, written in the check's code: its functions and lambdas (a clock), its
    classes and their instances (a fake gateway) and their methods and generators, a helper's
    function or class marked `_ponybench_check_side` (fake_clock's, regressions' clock), plus
    iterators over data. Whatever they give back crosses by the same rule. A path, a file, a
    module, a function or object of the standard library or of the harness never does: its
    methods would read and write with the check's view."""
    if made_by_check(value):
        return True
    if isinstance(value, type):
        return value.__module__ == CHECK_MODULE
    kind = type(value)
    if kind.__module__ == CHECK_MODULE or vars(kind).get("_ponybench_check_side") is True:  # a helper's stub class
        return True
    if kind is types.GeneratorType:
        return value.gi_code.co_filename == CHECK_CODE
    return kind in _DATA_ITERATORS


def crossing_refusal(value) -> str:
    """The sentence a check fails with when it hands the agent's code something of its own side."""
    try:
        shown = repr(value)
    except BaseException:
        shown = object.__repr__(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    if isinstance(value, Proxy):
        instead = "pass its value (what a call returned), not the object: one tree's code must not run another's"
    elif isinstance(value, os.PathLike):
        instead = "pass str(path) and read the file inside the check"
    elif isinstance(value, io.IOBase):
        instead = "pass its contents (data = file.read()) and keep the file in the check"
    elif isinstance(value, types.ModuleType):
        instead = "pass the values the agent's code needs, or a stub function or class written in the check's code"
    elif callable(value):
        instead = ("pass a function written in the check's code that takes and returns plain data "
                   "(def stub(...): ... around what it does)")
    else:
        instead = "pass its data (its fields as a dict or tuple), or an instance of a stub class written in the check's code"
    return (f"the check handed the agent's code a {type(value).__name__} ({shown}), an object of the check's side "
            f"whose methods would run in the check's process, which sees the reference; only plain data (None, bool, "
            f"int, float, str, bytes, and lists, tuples, dicts and sets of them) and stubs written in the check's "
            f"code cross the trust boundary: {instead}")


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


_CLOCK_POINTS = (("time", "time"), ("time", "monotonic"), ("time", "time_ns"), ("time", "monotonic_ns"),
                 ("datetime", "datetime"), ("datetime", "date"))


def _clock_points() -> tuple:
    """What the fake clock patches, cheaply compared on every request: a change means a sync."""
    return tuple(id(getattr(sys.modules.get(module), attr, None)) for module, attr in _CLOCK_POINTS)

