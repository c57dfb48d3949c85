# remote-runner code runtime: one run of a model-written program under python3 (issue 17).
# stdin: one JSON request {program, nonce, cap, bindings, callDir}. stdout: the program's own
# stray writes, then one line "<nonce><result JSON>" where the result is {logs, value?, error?}.
# The program is the body of an async function (top-level await and return). Values cross
# as lossless JSON: NaN, Infinity, sets, tuples, bytes, objects are refused, never coerced.
import ast
import asyncio
import json
import math
import os
import sys
import traceback

_real_out = os.dup(1)
_NOVALUE = object()


class Lossy(Exception):
    pass


def to_json(v, where, stack):
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
        stack.append(v)
        try:
            if type(v) is list:
                return "[" + ",".join(to_json(x, "%s[%d]" % (where, i), stack) for i, x in enumerate(v)) + "]"
            parts = []
            for k, x in v.items():
                if type(k) is not str:
                    raise Lossy("%s has the key %r, which is not a string" % (where, k))
                parts.append(json.dumps(k) + ":" + to_json(x, "%s[%s]" % (where, json.dumps(k)), stack))
            return "{" + ",".join(parts) + "}"
        finally:
            stack.pop()
    raise Lossy("%s is a value of type %s, which is not JSON" % (where, type(v).__name__))


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


def from_json(text):
    return json.loads(text, parse_constant=_no_constant)


class Logs:
    def __init__(self, cap):
        self.cap = cap
        self.lines = []
        self.bytes = 2
        self.dropped = 0
        self.partial = ""

    def add(self, line):
        n = len(json.dumps(line).encode("utf-8", "surrogatepass")) + 1
        if self.dropped or self.bytes + n > self.cap + 1:
            self.dropped += 1
            return
        self.lines.append(line)
        self.bytes += n

    def flush_partial(self):
        if self.partial:
            self.add(self.partial)
            self.partial = ""


class Writer:
    def __init__(self, logs):
        self.logs = logs

    def write(self, s):
        s = str(s)
        text = self.logs.partial + s
        parts = text.split("\n")
        self.logs.partial = parts.pop()
        for p in parts:
            self.logs.add(p)
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False


def finish(req, logs, value, error):
    cap = req["cap"]
    logs.flush_partial()
    if logs.dropped:
        error = {"kind": "output-limit", "message": "the output exceeded the cap of %d bytes: %d more log line(s) did not fit; the logs hold the first %d and no value is returned" % (cap, logs.dropped, len(logs.lines))}
        value = None
    elif value is not None:
        vb = len(value.encode("utf-8", "surrogatepass"))
        if logs.bytes + vb > cap:
            error = {"kind": "output-limit", "message": "the output exceeded the cap of %d bytes (logs %d + value %d bytes); the value was dropped, never truncated" % (cap, logs.bytes, vb)}
            value = None
    body = '{"logs":' + json.dumps(logs.lines)
    if value is not None:
        body += ',"value":' + value
    if error is not None:
        body += ',"error":' + json.dumps(error)
    body += "}"
    os.write(_real_out, ("\n" + req["nonce"] + body + "\n").encode("utf-8", "surrogatepass"))
    os._exit(0)


def make_error_class(name):
    return type(name, (Exception,), {})


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


async def call(req, ns, fn, args, counter):
    try:
        args_text = to_json(args, "the argument of %s.%s" % (ns["global"], fn), [])
    except Lossy as e:
        raise TypeError(str(e))
    cid = "c%d" % counter[0]
    counter[0] += 1
    d = req["callDir"]
    tmp = os.path.join(d, cid + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write('{"callId":%s,"global":%s,"function":%s,"args":%s}' % (json.dumps(cid), json.dumps(ns["global"]), json.dumps(fn), args_text))
    os.rename(tmp, os.path.join(d, cid + ".call"))
    reply_path = os.path.join(d, cid + ".reply")
    while True:
        try:
            with open(reply_path, encoding="utf-8") as f:
                text = f.read()
            break
        except FileNotFoundError:
            await asyncio.sleep(0.02)
    try:
        os.unlink(reply_path)
    except OSError:
        pass
    reply = json.loads(text)
    if reply.get("ok"):
        return from_json(json.dumps(reply["value"]))
    ec = ns.get("errorClass")
    if ec:
        err = req["_classes"][ec["name"]](reply["message"])
        setattr(err, ec["memberNameProperty"], fn)
        raise err
    raise Exception(reply["message"])


def main():
    req = json.loads(sys.stdin.read())
    logs = Logs(req["cap"])
    sys.stdout = Writer(logs)
    sys.stderr = Writer(logs)
    g = {"__name__": "__main__", "__builtins__": __builtins__, "__rr_NOVALUE": _NOVALUE}
    req["_classes"] = {}
    counter = [0]
    for ns in req.get("bindings") or []:
        members = {}
        for fn in ns["functions"]:
            def member(args=None, _ns=ns, _fn=fn):
                return call(req, _ns, _fn, args, counter)
            members[fn] = member
        obj = Namespace(members)
        ec = ns.get("errorClass")
        if ec:
            cls = make_error_class(ec["name"])
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
        return finish(req, logs, None, {"kind": "exception", "message": traceback.format_exc(limit=0)})
    try:
        v = asyncio.run(g["__rr_main"]())
    except BaseException:
        return finish(req, logs, None, {"kind": "exception", "message": traceback.format_exc()})
    if v is _NOVALUE:
        return finish(req, logs, None, None)
    try:
        text = to_json(v, "the completion value", [])
    except Lossy as e:
        return finish(req, logs, None, {"kind": "invalid-output", "message": str(e) + "; return plain JSON (None, bools, ints, finite floats, strings, lists, dicts with string keys)"})
    except RecursionError:
        return finish(req, logs, None, {"kind": "invalid-output", "message": "the completion value is nested too deeply"})
    finish(req, logs, text, None)


main()
