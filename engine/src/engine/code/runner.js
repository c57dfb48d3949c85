// remote-runner code runtime: one run of a model-written program under node (docs/code-runtime.md).
// The channel to the host is fd 4 (in) and fd 3 (out), JSON lines; fds 0-2 are the program's.
// In: the request {program, cap, maxDepth, bindings}, then {t:"resolve",id,value} and
// {t:"reject",id,message} for binding calls. Out: {t:"call",id,global,function,args} and, last,
// {t:"result",result:{logs,value?,error?}}. Values are written losslessly (-0 stays -0); anything
// that is not lossless JSON is refused with the path to it.
'use strict';
const fs = require('fs');
const net = require('net');
const util = require('util');

// The channel's fds, reopened close-on-exec where the kernel allows (a pipe), so the program's
// children do not inherit them.
let IN = 4;
let OUT = 3;
for (const [fd, flags, set] of [[4, 'r', (f) => { IN = f; }], [3, 'w', (f) => { OUT = f; }]]) {
  try {
    const f = fs.openSync('/proc/self/fd/' + fd, flags);
    fs.closeSync(fd);
    set(f);
  } catch (e) { /* a socket: keep the inherited fd */ }
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));
function writeAll(text) {
  const buf = Buffer.from(text, 'utf8');
  let at = 0;
  while (at < buf.length) {
    try {
      at += fs.writeSync(OUT, buf, at, buf.length - at);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
      Atomics.wait(sleeper, 0, 0, 1);
    }
  }
}

function describe(v) {
  if (v === undefined) return 'undefined';
  if (typeof v === 'number') return String(v);
  if (typeof v === 'bigint') return 'a BigInt (' + v + 'n)';
  if (typeof v === 'function') return 'a function';
  if (typeof v === 'symbol') return 'a symbol';
  if (v && typeof v === 'object') {
    const name = v.constructor && v.constructor.name;
    return 'an object of class ' + (name || '?');
  }
  return typeof v;
}

class Lossy extends Error {}

// Lossless JSON text of v, or a Lossy error naming the path and what was found there.
function toJson(v, where, stack, maxDepth) {
  if (v === null) return 'null';
  switch (typeof v) {
    case 'boolean':
      return v ? 'true' : 'false';
    case 'string':
      return JSON.stringify(v);
    case 'number':
      if (!Number.isFinite(v)) throw new Lossy(where + ' is ' + v + ', which JSON cannot carry');
      return Object.is(v, -0) ? '-0' : JSON.stringify(v);
    case 'object':
      break;
    default:
      throw new Lossy(where + ' is ' + describe(v) + ', which is not JSON');
  }
  if (stack.includes(v)) throw new Lossy(where + ' refers back to an enclosing value (a cycle)');
  if (stack.length >= maxDepth) throw new Lossy(where + ' is nested deeper than ' + maxDepth + ' levels, the most the runtime carries');
  stack.push(v);
  try {
    if (Array.isArray(v)) {
      const parts = [];
      for (let i = 0; i < v.length; i++) {
        if (!(i in v) || v[i] === undefined) throw new Lossy(where + '[' + i + '] is undefined (a hole), which JSON cannot carry');
        parts.push(toJson(v[i], where + '[' + i + ']', stack, maxDepth));
      }
      return '[' + parts.join(',') + ']';
    }
    const proto = Object.getPrototypeOf(v);
    if (proto !== null && proto !== Object.prototype) {
      throw new Lossy(where + ' is ' + describe(v) + ', not a plain object');
    }
    if (Object.getOwnPropertySymbols(v).length) throw new Lossy(where + ' has symbol keys, which JSON cannot carry');
    const parts = [];
    for (const k of Object.keys(v)) {
      const item = v[k];
      if (item === undefined) throw new Lossy(where + '[' + JSON.stringify(k) + '] is undefined, which JSON cannot carry');
      parts.push(JSON.stringify(k) + ':' + toJson(item, where + '[' + JSON.stringify(k) + ']', stack, maxDepth));
    }
    return '{' + parts.join(',') + '}';
  } finally {
    stack.pop();
  }
}

// A parsed JSON value made program-ready: objects get a null prototype so member names are data.
function fix(v) {
  if (Array.isArray(v)) return v.map(fix);
  if (v && typeof v === 'object') {
    const o = Object.create(null);
    for (const k of Object.keys(v)) o[k] = fix(v[k]);
    return o;
  }
  return v;
}

const bytes = (s) => Buffer.byteLength(s, 'utf8');

function main(req, channel) {
  const cap = req.cap;
  const maxDepth = req.maxDepth;
  const logs = [];
  let logBytes = 2; // the serialized array: "[]", one comma between lines
  let dropped = 0;
  let partial = '';
  const addLine = (l) => {
    const n = bytes(JSON.stringify(l)) + (logs.length ? 1 : 0);
    if (dropped || logBytes + n > cap) {
      dropped++;
      return;
    }
    logs.push(l);
    logBytes += n;
  };
  // Everything the program prints, console or stream, in order, split at newlines.
  // Once over the cap nothing more is kept, only counted; a line still open that is already
  // longer than the cap can never fit and is counted at once, not held (nor re-split on every
  // write: a program printing without newlines ends as `output-limit`, not `timeout`).
  const emit = (text) => {
    if (dropped) {
      dropped += text.split('\n').length - 1;
      return;
    }
    if (text.indexOf('\n') < 0) {
      partial += text;
    } else {
      const parts = (partial + text).split('\n');
      partial = parts.pop();
      for (const p of parts) addLine(p);
    }
    if (partial.length > cap) {
      dropped++;
      partial = '';
    }
  };
  const log = (...args) => emit(util.format(...args) + '\n');
  for (const m of ['log', 'info', 'warn', 'error', 'debug', 'trace']) console[m] = log;
  for (const stream of [process.stdout, process.stderr]) {
    stream.write = (chunk, encoding, cb) => {
      if (typeof encoding === 'function') cb = encoding;
      emit(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'));
      if (typeof cb === 'function') process.nextTick(cb);
      return true;
    };
  }

  let done = false;
  const finish = (value, error) => {
    if (done) return;
    done = true;
    if (partial) {
      addLine(partial);
      partial = '';
    }
    if (dropped) {
      error = { kind: 'output-limit', message: 'the output exceeded the cap of ' + cap + ' bytes: ' + dropped + ' more log line(s) did not fit; the logs hold the first ' + logs.length + ' and no value is returned' };
      value = undefined;
    } else if (value !== undefined) {
      if (logBytes + bytes(value) > cap) {
        error = { kind: 'output-limit', message: 'the output exceeded the cap of ' + cap + ' bytes (logs ' + logBytes + ' + value ' + bytes(value) + ' bytes); the value was dropped, never truncated' };
        value = undefined;
      }
    } else if (error) {
      const m = bytes(JSON.stringify(error.message));
      if (logBytes + m > cap) {
        error = { kind: 'output-limit', message: 'the output exceeded the cap of ' + cap + ' bytes (logs ' + logBytes + ' + the ' + error.kind + ' message ' + m + ' bytes); the message was dropped, never truncated' };
      }
    }
    let body = '{"logs":' + JSON.stringify(logs);
    if (value !== undefined) body += ',"value":' + value;
    if (error) body += ',"error":' + JSON.stringify(error);
    body += '}';
    writeAll('{"t":"result","result":' + body + '}\n');
    process.exit(0);
  };

  // Bindings: a call is a line out; its settlement a line in, matched by id.
  let nextCall = 0;
  const pending = new Map();
  channel.settle = (msg) => {
    const p = pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (pending.size === 0) channel.socket.unref();
    if (msg.t === 'resolve') p.resolve(fix(msg.value));
    else p.reject(String(msg.message));
  };
  const call = (ns, fn, args) => {
    let argsText;
    try {
      argsText = toJson(args, 'the argument of ' + ns.global + '.' + fn, [], maxDepth);
    } catch (e) {
      if (e instanceof Lossy) return Promise.reject(new TypeError(e.message));
      return Promise.reject(e);
    }
    const id = nextCall++;
    writeAll('{"t":"call","id":' + id + ',"global":' + JSON.stringify(ns.global) + ',"function":' + JSON.stringify(fn) + ',"args":' + argsText + '}\n');
    return new Promise((resolve, reject) => {
      pending.set(id, {
        resolve,
        reject: (message) => {
          if (ns.errorClass) {
            const Cls = globalThis[ns.errorClass.name];
            const err = new Cls(message);
            // An own property whatever its name (`__proto__` included), never a setter's call.
            Object.defineProperty(err, ns.errorClass.memberNameProperty, { value: fn, enumerable: true, writable: true, configurable: true });
            reject(err);
          } else {
            reject(new Error(message));
          }
        },
      });
      channel.socket.ref();
    });
  };
  for (const ns of req.bindings || []) {
    const obj = Object.create(null);
    for (const fn of ns.functions) {
      Object.defineProperty(obj, fn, { value: (args) => call(ns, fn, args), enumerable: true });
    }
    if (ns.errorClass) {
      const ec = ns.errorClass;
      const Cls = { [ec.name]: class extends Error {
        constructor(message) {
          super(message);
          this.name = ec.name;
        }
      } }[ec.name];
      globalThis[ec.name] = Cls;
    }
    globalThis[ns.global] = obj;
  }

  // Node's modules, as a script would have them.
  globalThis.require = require;
  const AsyncFunction = (async function () {}).constructor;
  let fn;
  try {
    fn = new AsyncFunction(req.program);
  } catch (e) {
    return finish(undefined, { kind: 'exception', message: String(e && e.stack || e) });
  }
  process.on('unhandledRejection', (e) => {
    finish(undefined, { kind: 'exception', message: 'unhandled rejection: ' + String(e && e.stack || e) });
  });
  fn().then(
    (v) => {
      if (v === undefined) return finish(undefined, null);
      let text;
      try {
        text = toJson(v, 'the completion value', [], maxDepth);
      } catch (e) {
        if (e instanceof Lossy) return finish(undefined, { kind: 'invalid-output', message: e.message + '; return plain JSON (null, booleans, finite numbers, strings, arrays, plain objects)' });
        return finish(undefined, { kind: 'exception', message: String(e && e.stack || e) });
      }
      finish(text, null);
    },
    (e) => {
      let message;
      try {
        message = e instanceof Error ? (e.stack || String(e)) : 'thrown value: ' + util.inspect(e);
      } catch (x) {
        message = 'a value was thrown that cannot be printed';
      }
      finish(undefined, { kind: 'exception', message });
    },
  );
}

// The channel in: the request line starts the run; later lines settle binding calls. The
// socket holds the process open only while a call waits (so a program that is done ends).
const channel = { settle: null, socket: new net.Socket({ fd: IN, readable: true, writable: false }) };
let input = '';
let started = false;
channel.socket.setEncoding('utf8');
channel.socket.on('data', (d) => {
  input += d;
  if (d.indexOf('\n') < 0) return;
  let at;
  while ((at = input.indexOf('\n')) >= 0) {
    const line = input.slice(0, at);
    input = input.slice(at + 1);
    const msg = JSON.parse(line);
    if (!started) {
      started = true;
      channel.socket.unref();
      main(msg, channel);
    } else if (channel.settle) {
      channel.settle(msg);
    }
  }
});
// The host closed the channel: nobody will settle anything or read a result.
channel.socket.on('end', () => process.exit(0));
channel.socket.on('error', () => process.exit(0));
