# remote-runner code runtime: one run of a model-written program under python3
# (docs/code-runtime.md). The channel to the host is fd 4 (in) and fd 3 (out), JSON lines; fds
# 0-2 are the program's. In: the request {program, cap, maxDepth, bindings}, then
# {t:"resolve",id,value} and {t:"reject",id,message}. Out: {t:"call",id,global,function,args}
# and, last, {t:"result",result:{logs,value?,error?}}. The program is the body of an async
# function (top-level await and return). Values cross as lossless JSON: NaN, Infinity, sets,
# tuples, bytes, objects are refused with the path to them, never coerced.
import ast
import asyncio
import json
import math
import os
import sys
import traceback

IN = 4
OUT = 3
# The program's children do not inherit the channel.
for _fd in (IN, OUT):
    try:
        os.set_inheritable(_fd, False)
    except OSError:
        pass
# Integers of any size are JSON; the recursion limit leaves room for maxDepth levels.
if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)
sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
_NOVALUE = object()


def write_all(text):
    data = text.encode("utf-8", "surrogatepass")
    view = memoryview(data)
    while view:
        n = os.write(OUT, view)
        view = view[n:]


class Lossy(Exception):
    pass


def to_json(v, where, depth, stack):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is int:
        return str(v)
    if type(v) is float:
        if not math.isfinite(v):
            raise Lossy("%s is %r, which JSON cannot carry" % (where, v))
        return json.dumps(v)
    if type(v) is str:
        return json.dumps(v)
    if type(v) is list or type(v) is dict:
        if any(s is v for s in stack):
            raise Lossy("%s refers back to an enclosing value (a cycle)" % where)
        if len(stack) >= depth:
            raise Lossy("%s is nested deeper than %d levels, the most the runtime carries" % (where, depth))
        stack.append(v)
        try:
            if type(v) is list:
                return "[" + ",".join([to_json(x, "%s[%d]" % (where, i), depth, stack) for i, x in enumerate(v)]) + "]"
            parts = []
            for k, x in v.items():
                if type(k) is not str:
                    raise Lossy("%s has the key %r, which is not a string" % (where, k))
                parts.append(json.dumps(k) + ":" + to_json(x, "%s[%s]" % (where, json.dumps(k)), depth, stack))
            return "{" + ",".join(parts) + "}"
        finally:
            stack.pop()
    raise Lossy("%s is a value of type %s, which is not JSON" % (where, type(v).__name__))


def _int(text):
    """JSON's -0 as Python's -0.0 (an int has no sign of zero), so its sign survives."""
    return -0.0 if text == "-0" else int(text)


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


class Logs:
    """What the program printed, in order, split at newlines; the serialized array's bytes are
    counted against the cap."""

    def __init__(self, cap):
        self.cap = cap
        self.lines = []
        self.bytes = 2
        self.dropped = 0
        # The line still open, in pieces (joined only at a newline), and its length.
        self.partial = []
        self.partial_len = 0

    def add(self, line):
        n = len(json.dumps(line).encode("utf-8")) + (1 if self.lines else 0)
        if self.dropped or self.bytes + n > self.cap:
            self.dropped += 1
            return
        self.lines.append(line)
        self.bytes += n

    def emit(self, s):
        # Once over the cap nothing more is kept, only counted; an open line already longer
        # than the cap can never fit and is counted at once, not held (nor joined again on
        # every write: printing without newlines ends as `output-limit`, not `timeout`).
        if self.dropped:
            self.dropped += s.count("\n")
            return
        if "\n" in s:
            parts = ("".join(self.partial) + s).split("\n")
            tail = parts.pop()
            self.partial, self.partial_len = [tail], len(tail)
            for p in parts:
                self.add(p)
        else:
            self.partial.append(s)
            self.partial_len += len(s)
        if self.partial_len > self.cap:
            self.dropped += 1
            self.partial, self.partial_len = [], 0

    def flush_partial(self):
        if self.partial_len:
            self.add("".join(self.partial))
            self.partial, self.partial_len = [], 0


class _Buffer:
    def __init__(self, logs):
        self.logs = logs

    def write(self, b):
        self.logs.emit(bytes(b).decode("utf-8", "surrogateescape"))
        return len(b)

    def flush(self):
        pass


class Writer:
    """sys.stdout and sys.stderr: text and bytes written become logs."""

    encoding = "utf-8"

    def __init__(self, logs):
        self.logs = logs
        self.buffer = _Buffer(logs)

    def write(self, s):
        s = str(s)
        self.logs.emit(s)
        return len(s)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def isatty(self):
        return False


def finish(logs, value, error):
    cap = logs.cap
    logs.flush_partial()
    if logs.dropped:
        error = {"kind": "output-limit", "message": "the output exceeded the cap of %d bytes: %d more log line(s) did not fit; the logs hold the first %d and no value is returned" % (cap, logs.dropped, len(logs.lines))}
        value = None
    elif value is not None:
        vb = len(value.encode("utf-8"))
        if logs.bytes + vb > cap:
            error = {"kind": "output-limit", "message": "the output exceeded the cap of %d bytes (logs %d + value %d bytes); the value was dropped, never truncated" % (cap, logs.bytes, vb)}
            value = None
    elif error is not None:
        mb = len(json.dumps(error["message"]).encode("utf-8"))
        if logs.bytes + mb > cap:
            error = {"kind": "output-limit", "message": "the output exceeded the cap of %d bytes (logs %d + the %s message %d bytes); the message was dropped, never truncated" % (cap, logs.bytes, error["kind"], mb)}
    body = '{"logs":' + json.dumps(logs.lines, separators=(",", ":"))
    if value is not None:
        body += ',"value":' + value
    if error is not None:
        body += ',"error":' + json.dumps(error)
    body += "}"
    write_all('{"t":"result","result":' + body + "}\n")
    os._exit(0)


class Namespace:
    """A binding namespace. Member names are data: any string, even `__class__` or `__dict__`,
    is a member, reachable as an attribute (getattr for names that are not identifiers) or
    as an item."""

    __slots__ = ("_members",)

    def __init__(self, members):
        object.__setattr__(self, "_members", members)

    def __getattribute__(self, name):
        members = object.__getattribute__(self, "_members")
        if name in members:
            return members[name]
        return object.__getattribute__(self, name)

    def __getitem__(self, name):
        return object.__getattribute__(self, "_members")[name]


class Channel:
    """Binding calls: a line out per call; settlements come back on fd 4, read by the event
    loop while a call waits."""

    def __init__(self, req, rest):
        self.req = req
        self.buf = rest
        self.pending = {}
        self.next_id = 0
        self.loop = None

    def _readable(self):
        data = os.read(IN, 1 << 20)
        if not data:
            os._exit(0)  # the host closed the channel: nobody will read a result
        self.buf += data
        self._drain()
        if not self.pending and self.loop is not None:
            self.loop.remove_reader(IN)
            self.loop = None

    async def call(self, ns, fn, args):
        try:
            args_text = to_json(args, "the argument of %s.%s" % (ns["global"], fn), self.req["maxDepth"], [])
        except Lossy as e:
            raise TypeError(str(e)) from None
        cid = self.next_id
        self.next_id += 1
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.pending[cid] = fut
        if self.loop is not loop:
            if self.loop is not None:
                self.loop.remove_reader(IN)
            self.loop = loop
            loop.add_reader(IN, self._readable)
        write_all('{"t":"call","id":%d,"global":%s,"function":%s,"args":%s}\n' % (cid, json.dumps(ns["global"]), json.dumps(fn), args_text))
        if b"\n" in self.buf:
            loop.call_soon(self._drain)
        msg = await fut
        if msg.get("t") == "resolve":
            return msg.get("value")
        message = str(msg.get("message"))
        ec = ns.get("errorClass")
        if ec:
            err = self.req["_classes"][ec["name"]](message)
            setattr(err, ec["memberNameProperty"], fn)
            raise err
        raise Exception(message)

    def _drain(self):
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            msg = json.loads(line, parse_constant=_no_constant, parse_int=_int)
            fut = self.pending.pop(msg.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)


def read_request():
    buf = b""
    while b"\n" not in buf:
        data = os.read(IN, 1 << 20)
        if not data:
            os._exit(0)
        buf += data
    line, rest = buf.split(b"\n", 1)
    return json.loads(line, parse_constant=_no_constant, parse_int=_int), rest


def main():
    req, rest = read_request()
    logs = Logs(req["cap"])
    sys.stdout = Writer(logs)
    sys.stderr = Writer(logs)
    g = {"__name__": "__main__", "__builtins__": __builtins__, "__rr_NOVALUE": _NOVALUE}
    req["_classes"] = {}
    channel = Channel(req, rest)
    for ns in req.get("bindings") or []:
        members = {}
        for fn in ns["functions"]:
            def member(args=None, _ns=ns, _fn=fn):
                return channel.call(_ns, _fn, args)
            members[fn] = member
        obj = Namespace(members)
        ec = ns.get("errorClass")
        if ec:
            cls = type(ec["name"], (Exception,), {})
            req["_classes"][ec["name"]] = cls
            g[ec["name"]] = cls
        g[ns["global"]] = obj
    try:
        tree = ast.parse(req["program"], "<program>", "exec")
        wrapper = ast.parse("async def __rr_main():\n    pass\n")
        body = tree.body + ast.parse("return __rr_NOVALUE").body
        wrapper.body[0].body = body
        ast.fix_missing_locations(wrapper)
        code = compile(wrapper, "<program>", "exec")
        exec(code, g)
    except BaseException:
        return finish(logs, None, {"kind": "exception", "message": traceback.format_exc(limit=0)})
    try:
        v = asyncio.run(g["__rr_main"]())
    except BaseException:
        return finish(logs, None, {"kind": "exception", "message": traceback.format_exc()})
    if v is _NOVALUE:
        return finish(logs, None, None)
    try:
        text = to_json(v, "the completion value", req["maxDepth"], [])
    except Lossy as e:
        return finish(logs, None, {"kind": "invalid-output", "message": str(e) + "; return plain JSON (None, bools, ints, finite floats, strings, lists, dicts with string keys)"})
    except RecursionError:
        return finish(logs, None, {"kind": "invalid-output", "message": "the completion value is nested too deeply for this Python"})
    finish(logs, text, None)


main()
