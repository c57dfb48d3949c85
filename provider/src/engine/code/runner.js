// remote-runner code runtime: one run of a model-written program under node (issue 17).
// stdin: one JSON request {program, nonce, cap, bindings, callDir}. stdout: the program's own
// stray writes, then one line "<nonce><result JSON>" where the result is {logs, value?, error?}.
// The value is serialized losslessly (-0 stays -0); anything not lossless JSON is refused.
'use strict';
const fs = require('fs');
const path = require('path');
const util = require('util');

const out = (s) => fs.writeSync(1, s);

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
function toJson(v, where, stack) {
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
  stack.push(v);
  try {
    if (Array.isArray(v)) {
      const parts = [];
      for (let i = 0; i < v.length; i++) {
        if (!(i in v) || v[i] === undefined) throw new Lossy(where + '[' + i + '] is undefined (a hole), which JSON cannot carry');
        parts.push(toJson(v[i], where + '[' + i + ']', stack));
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
      parts.push(JSON.stringify(k) + ':' + toJson(item, where + '[' + JSON.stringify(k) + ']', stack));
    }
    return '{' + parts.join(',') + '}';
  } finally {
    stack.pop();
  }
}

// JSON text to a value: objects get a null prototype so member names are data.
function fromJson(text) {
  const fix = (v) => {
    if (Array.isArray(v)) return v.map(fix);
    if (v && typeof v === 'object') {
      const o = Object.create(null);
      for (const k of Object.keys(v)) o[k] = fix(v[k]);
      return o;
    }
    return v;
  };
  // JSON.parse turns "__proto__" into an own property; -0 parses as -0.
  return fix(JSON.parse(text));
}

function main(req) {
  const cap = req.cap;
  const logs = [];
  let logBytes = 2; // "[]"
  let dropped = 0;
  const log = (...args) => {
    const line = util.format(...args);
    for (const l of line.split('\n')) {
      const n = Buffer.byteLength(JSON.stringify(l)) + 1;
      if (dropped || logBytes + n > cap + 1) {
        dropped++;
        continue;
      }
      logs.push(l);
      logBytes += n;
    }
  };
  for (const m of ['log', 'info', 'warn', 'error', 'debug', 'trace']) console[m] = log;

  let done = false;
  const finish = (value, error) => {
    if (done) return;
    done = true;
    let logsText = JSON.stringify(logs);
    let body;
    if (dropped) {
      error = { kind: 'output-limit', message: 'the output exceeded the cap of ' + cap + ' bytes: ' + dropped + ' more log line(s) did not fit; the logs hold the first ' + logs.length + ' and no value is returned' };
      value = undefined;
    } else if (value !== undefined) {
      const total = logBytes + Buffer.byteLength(value);
      if (total > cap) {
        error = { kind: 'output-limit', message: 'the output exceeded the cap of ' + cap + ' bytes (logs ' + logBytes + ' + value ' + Buffer.byteLength(value) + ' bytes); the value was dropped, never truncated' };
        value = undefined;
      }
    }
    body = '{"logs":' + logsText;
    if (value !== undefined) body += ',"value":' + value;
    if (error) body += ',"error":' + JSON.stringify(error);
    body += '}';
    out('\n' + req.nonce + body + '\n');
    process.exit(0);
  };

  // Bindings: each call is a file in callDir; the host answers with a reply file.
  let nextCall = 0;
  const pending = new Map();
  let polling = null;
  const poll = () => {
    for (const [id, p] of pending) {
      const f = path.join(req.callDir, id + '.reply');
      let text;
      try {
        text = fs.readFileSync(f, 'utf8');
      } catch (e) {
        continue;
      }
      pending.delete(id);
      try { fs.unlinkSync(f); } catch (e) { /* gone */ }
      const reply = JSON.parse(text);
      if (reply.ok) p.resolve(fromJson(JSON.stringify(reply.value)));
      else p.reject(reply.message);
    }
    if (pending.size === 0) {
      clearInterval(polling);
      polling = null;
    }
  };
  const call = (ns, fn, args) => {
    let argsText;
    try {
      argsText = toJson(args, 'the argument of ' + ns.global + '.' + fn, []);
    } catch (e) {
      return Promise.reject(new TypeError(e.message));
    }
    const id = 'c' + nextCall++;
    const tmp = path.join(req.callDir, id + '.tmp');
    fs.writeFileSync(tmp, '{"callId":' + JSON.stringify(id) + ',"global":' + JSON.stringify(ns.global) + ',"function":' + JSON.stringify(fn) + ',"args":' + argsText + '}');
    fs.renameSync(tmp, path.join(req.callDir, id + '.call'));
    return new Promise((resolve, reject) => {
      pending.set(id, {
        resolve,
        reject: (message) => {
          if (ns.errorClass) {
            const Cls = globalThis[ns.errorClass.name];
            const err = new Cls(message);
            err[ns.errorClass.memberNameProperty] = fn;
            reject(err);
          } else {
            reject(new Error(message));
          }
        },
      });
      if (!polling) polling = setInterval(poll, 20);
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
        text = toJson(v, 'the completion value', []);
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

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => main(JSON.parse(input)));
