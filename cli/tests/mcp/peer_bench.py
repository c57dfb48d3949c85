"""Latency of one tool call running `true` through any MCP server, as the official MCP Python
SDK client sees it: the side-by-side figures of docs/benchmarks.md (`mcp-exec-warm`).

  python3 peer_bench.py SPEC N

SPEC is JSON: {"name", "cmd": [argv], "env": {...}, "tool", "args": {...}} plus, for a server
whose calls need a session first, either "session": MACHINE (remote-runner: session_create) or
"setup": {"tool", "args", "regex", "arg"} (call the tool once, take the session id from its
result with the regex's first group, pass it as "arg"). 20 warm-up calls, then N timed ones;
one JSON line with the median, p90 and minimum in ms, and every call's time (`times_ms`, in call
order; the benchmark crate's `mcp-exec-warm` takes its samples from there). Set "warmup" in SPEC
for another number of warm-up calls. The session made with "session" is destroyed at the end,
unless "keep_session" is true (the line then names it in "session_id", for the caller to destroy
later).
"""
import asyncio, sys, json, time, os
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
async def main():
    spec = json.loads(sys.argv[1])
    n = int(sys.argv[2])
    params = StdioServerParameters(command=spec["cmd"][0], args=spec["cmd"][1:], env=spec["env"])
    async with stdio_client(params, errlog=open(os.devnull, "w")) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            args = dict(spec["args"])
            if spec.get("session"):
                res = await s.call_tool("session_create", {"machine": spec["session"]})
                args["session_id"] = res.structured_content["session_id"]
            if spec.get("setup"):
                import re
                st = spec["setup"]
                res = await s.call_tool(st["tool"], st["args"])
                txt = json.dumps(res.structured_content) + " ".join(c.text for c in res.content if c.type == "text")
                m = re.search(st["regex"], txt)
                assert m, txt
                args[st["arg"]] = m.group(1)
                print("setup:", args, file=sys.stderr)
            for _ in range(spec.get("warmup", 20)):
                res = await s.call_tool(spec["tool"], args)
                assert not res.is_error, res
            times = []
            for _ in range(n):
                t = time.perf_counter()
                res = await s.call_tool(spec["tool"], args)
                times.append((time.perf_counter() - t) * 1000)
                assert not res.is_error, res
            if spec.get("session") and not spec.get("keep_session"):
                await s.call_tool("session_destroy", {"session_id": args["session_id"]})
    order = list(times)
    times.sort()
    print(json.dumps({"name": spec["name"], "session_id": args.get("session_id") if spec.get("keep_session") else None, "calls": n, "median_ms": round(times[n // 2], 2), "p90_ms": round(times[int(n * 0.9)], 2), "min_ms": round(times[0], 2), "times_ms": [round(t, 4) for t in order]}))
asyncio.run(main())
