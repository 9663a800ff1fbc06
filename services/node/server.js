'use strict';
// Node serving path: GET|HEAD /files/<name> streams the newest GridFS
// revision of <name> chunk by chunk, with the HTTP semantics of nginx's
// static module (validators, Range, 304/412/416); same rules as the Flask path.
//
// Hot path per request: one find on <bucket>.files, then one cursor on
// <bucket>.chunks limited to the chunks the answer needs, in batches of at
// most 1.25 MiB (a file up to that size: one round trip). (The driver's
// openDownloadStream would look the file document up a second time.)
const { Readable, pipeline } = require('node:stream');
const express = require('express');
const { MongoClient, MongoError } = require('mongodb');
const { Admission } = require('./admission');
const { CorruptFile, checkedFile, chunksPerRead, storedSize } = require('./stored-file');

const PORT = Number(process.env.PORT || 8080);
const MONGO_URI = process.env.MONGO_URI || 'mongodb://mongo:27017';
const GRIDFS_DB = process.env.GRIDFS_DB || 'lab';
const GRIDFS_BUCKET = process.env.GRIDFS_BUCKET || 'fs';

function log(message) {
  process.stderr.write(`${new Date().toISOString()} gridfs-lab-node: ${message}\n`);
}

// A positive integer up to max from the environment variable `name` (unset
// or empty: the fallback); anything else stops the process before it starts.
function positiveIntegerFromEnv(name, fallback, max = Number.MAX_SAFE_INTEGER) {
  const text = process.env[name];
  if (text === undefined || text === '') return fallback;
  const value = /^[0-9]+$/.test(text) ? Number(text) : NaN;
  if (!(value >= 1 && value <= max)) {
    const limit = max < Number.MAX_SAFE_INTEGER ? ` up to ${max}` : '';
    log(`${name} must be a positive integer${limit}, got ${JSON.stringify(text)}`);
    process.exit(2);
  }
  return value;
}

// Bounded waits, so that a missing MongoDB turns into a 503 within about two
// seconds instead of a hung request; once connected, the driver reconnects
// by itself after an outage (and the watchdog below replaces it when it
// does not).
const CLIENT_OPTIONS = {
  appName: 'gridfs-lab-node',
  serverSelectionTimeoutMS: 2000,
  connectTimeoutMS: 2000,
  socketTimeoutMS: 5000,
};

// One MongoClient and what is known of how it fares. A request uses the
// store current at its start throughout, even if the watchdog replaces it.
function openStore() {
  const client = new MongoClient(MONGO_URI, CLIENT_OPTIONS);
  const db = client.db(GRIDFS_DB);
  const current = {
    client,
    files: db.collection(`${GRIDFS_BUCKET}.files`),
    chunks: db.collection(`${GRIDFS_BUCKET}.chunks`),
    connected: false,
    connecting: null,
    serverKnown: false, // whether the driver sees a server it could select
    lostSince: Date.now(), // when it last stopped seeing one
    lastError: null, // the driver's error for the server it cannot see
    lastUsedAt: 0,
  };
  client.on('topologyDescriptionChanged', ({ newDescription }) => {
    const known = newDescription.hasKnownServers;
    if (!known && current.serverKnown) current.lostSince = Date.now();
    current.serverKnown = known;
    current.lastError = newDescription.error;
    if (!known) watch(current);
  });
  return current;
}
let store = openStore();

// A failed first connect() leaves the client on a closed topology that
// every later operation would fail on (driver 6 auto-connect does not
// retry), so connecting is ours: retried by the next request until it works.
function ensureConnected(current) {
  if (current.connected) return null;
  if (current.connecting === null) {
    current.connecting = current.client.connect()
      .then(() => { current.connected = true; })
      .finally(() => { current.connecting = null; });
  }
  return current.connecting;
}

// Watchdog. On FerretDB (no topologyVersion: the driver polls it) the driver
// once failed every operation for minutes after a restart with the same
// server-selection error, "connection 15 to ...:27017 closed", while a new
// client in the same process pinged at once. Any heartbeat's outcome,
// failed or not, would have replaced that error: the server's monitor had
// stopped completing checks, and nothing in the driver restarts it (issue
// 24). So while the current client sees no server and requests come, a
// short-lived client pings MongoDB every PROBE_INTERVAL_MS; once that
// answers, if the current client still sees no server REPLACE_GRACE_MS
// later (a working driver checks again within minHeartbeatFrequencyMS,
// 500 ms, while operations wait), it is replaced: within about 1.5 s of
// MongoDB's return.
const PROBE_TIMEOUT_MS = 500;
const PROBE_INTERVAL_MS = 500;
const REPLACE_GRACE_MS = 750;
const PROBE_IDLE_MS = 5000; // no request for this long: no more probes until the next one
let watching = false;
let lastProbeAt = 0;

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, Math.max(0, ms)); });

// Whether a new client can ping MongoDB.
async function pingsAnew() {
  const probe = new MongoClient(MONGO_URI, {
    appName: 'gridfs-lab-node-probe',
    serverSelectionTimeoutMS: PROBE_TIMEOUT_MS,
    connectTimeoutMS: PROBE_TIMEOUT_MS,
    socketTimeoutMS: PROBE_TIMEOUT_MS,
  });
  try {
    await probe.connect();
    await probe.db('admin').command({ ping: 1 });
    return true;
  } catch {
    return false;
  } finally {
    probe.close().catch(() => {});
  }
}

// Probes while `current` is the client, sees no server and is in use; replaces it when it is stuck.
function watch(current) {
  if (watching) return;
  watching = true;
  const inNeed = () => current === store && !current.serverKnown && Date.now() - current.lastUsedAt < PROBE_IDLE_MS;
  (async () => {
    for (;;) {
      await sleep(lastProbeAt + PROBE_INTERVAL_MS - Date.now());
      if (!inNeed()) return;
      lastProbeAt = Date.now();
      if (await pingsAnew()) {
        await sleep(REPLACE_GRACE_MS);
        if (inNeed()) break;
      }
    }
    const { lastError, lostSince } = current;
    store = openStore();
    store.lastUsedAt = Date.now();
    ensureConnected(store).catch(() => {}); // a failure is retried by the next request
    log(`MongoDB client replaced: it has seen no server for ${((Date.now() - lostSince) / 1000).toFixed(1)} s `
      + `(${lastError ? `${lastError.name}: ${lastError.message}` : 'no error'}) while a new client's ping answered`);
    // Not waited on: closing fails what still waits on the stuck client (503s) at once.
    current.client.close().catch(() => {});
  })()
    .catch((error) => log(`MongoDB watchdog failed: ${error.name}: ${error.message}`))
    .finally(() => { watching = false; });
}

const FILE_PROJECTION = { length: 1, chunkSize: 1, uploadDate: 1, 'metadata.contentType': 1 };
// Requests using MongoDB at once (a lookup and the first chunk batch, then
// each later batch's round trip: a slot is held for database reads only,
// never while a client takes its time), so that the driver's pool and the
// replies being read are bounded whatever the number of clients. A reply
// is up to READ_BUFFER_BYTES (1.25 MiB): 32 x 1.25 MiB ~ 40 MiB in flight.
// A stream between reads holds what is left of its batch plus one chunk in
// the pipeline, for as long as its client reads, or one to two
// SEND_TIMEOUT_MS when it stops: 1.5 to 1.6 MiB of resident memory per
// stalled client measured (tests/test_slow_readers.py); MAX_OPEN_STREAMS
// bounds how many there are.
const MAX_STREAMS = positiveIntegerFromEnv('NODE_MAX_STREAMS', 32);
// Responses under way at once, from the lookup to the body's end, whether
// their clients read or stall: 200 x 1.6 MiB = 320 MiB, inside TARGET_MEM's
// 512 MiB with node's own ~60 MiB, where clients left uncounted would not be
// (gevent's workers cap their connections alike). A request past it waits
// its turn within its deadline, then gets the 503.
const MAX_OPEN_STREAMS = positiveIntegerFromEnv('NODE_MAX_OPEN_STREAMS', 200);
// How long a request waits for a slot before its 503: nginx-gridfs's
// gridfs_queue_timeout, so that both paths shed load alike, and well below
// the load generators' 30 s client timeout. (2^31 - 1: setTimeout's limit.)
const STREAM_WAIT_MS = positiveIntegerFromEnv('NODE_STREAM_WAIT_MS', 10_000, 2 ** 31 - 1);
// One deadline per request, from its arrival: the wait for a slot, the
// connect, the lookup and the first chunk batch all fit in it, or the answer
// is the 503 with Retry-After (before, a request could wait 10 s for a slot
// and then 5 s on the socket). The body, once its head is out, is not
// bounded by it: a large file takes its time.
const REQUEST_DEADLINE_MS = positiveIntegerFromEnv('REQUEST_DEADLINE_MS', 3000, 2 ** 31 - 1);
// nginx's send_timeout (60 s, its default): a response whose client takes
// nothing for this long is closed (see serveFile). The timer runs between
// two writes that went out, not over the whole body. Shorter only for tests.
const SEND_TIMEOUT_MS = positiveIntegerFromEnv('SEND_TIMEOUT_MS', 60_000, 2 ** 31 - 1);
const MAX_NAME_BYTES = 255;
const MAX_OFFSET_DIGITS = '9223372036854775807'; // nginx's off_t limit for Range values

// A subset of nginx's mime.types, identical in the Flask path, for files
// stored without metadata.contentType.
const CONTENT_TYPES = {
  html: 'text/html', htm: 'text/html', css: 'text/css', xml: 'text/xml',
  txt: 'text/plain', js: 'application/javascript', json: 'application/json',
  gif: 'image/gif', jpeg: 'image/jpeg', jpg: 'image/jpeg', png: 'image/png',
  svg: 'image/svg+xml', webp: 'image/webp', ico: 'image/x-icon',
  woff2: 'font/woff2', pdf: 'application/pdf', zip: 'application/zip',
  wasm: 'application/wasm', mp3: 'audio/mpeg', mp4: 'video/mp4',
  webm: 'video/webm', bin: 'application/octet-stream',
};

const NOT_SATISFIABLE = 'not satisfiable';

class DeadlinePassed extends Error {}

// `promise`, or a DeadlinePassed rejection once `deadline` (Date.now()'s
// scale) has passed, whichever comes first. The MongoDB operation left
// behind ends by itself (socketTimeoutMS).
function beforeDeadline(promise, deadline) {
  let timer;
  const expired = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new DeadlinePassed(`REQUEST_DEADLINE_MS (${REQUEST_DEADLINE_MS} ms) passed`)),
      Math.max(0, deadline - Date.now()));
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}
const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

// The statuses after which nginx closes the connection (its special
// response handler turns keep-alive off for them): a client that sent a
// malformed request is not read further.
const CLOSING_STATUSES = new Set([400, 413, 414, 500, 501, 505]);

function sendText(res, status, text, headers = {}) {
  const body = `${text}\n`;
  const closing = CLOSING_STATUSES.has(status) ? { Connection: 'close' } : {};
  res.writeHead(status, {
    ...headers, ...closing, 'Content-Type': 'text/plain', 'Content-Length': Buffer.byteLength(body),
  });
  res.end(body);
}

function hexValue(code) {
  if (code >= 48 && code <= 57) return code - 48;
  if (code >= 65 && code <= 70) return code - 55;
  if (code >= 97 && code <= 102) return code - 87;
  return -1;
}

// An absolute-form target (RFC 9112 3.2.2, "GET http://host/x"), which a
// server must accept: scheme and authority, then the path nginx serves
// whatever the host.
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?#]*)/;

// [authority, origin-form target] of an absolute-form target, else [null, target].
function splitAbsoluteForm(target) {
  const match = ABSOLUTE_FORM.exec(target);
  return match === null ? [null, target] : [match[1], target.slice(match[0].length) || '/'];
}

// A host as nginx 1.22 accepts it (ngx_http_validate_host), in Host or in
// an absolute-form target: no '/', space or control character, no empty
// label ("a..b"), and a name before any port.
function validHost(value) {
  let previousDot = -2;
  let nameEnd = value.length;
  let state = 'name';
  for (let i = 0; i < value.length; i++) {
    const ch = value[i];
    if (ch === '.') {
      if (previousDot === i - 1) return false;
      previousDot = i;
    } else if (ch === ':') {
      if (state === 'name') [nameEnd, state] = [i, 'port'];
    } else if (ch === '[') {
      if (i === 0) state = 'literal'; // an IPv6 address: its colons are not a port
    } else if (ch === ']') {
      if (state === 'literal') [nameEnd, state] = [i + 1, 'port'];
    } else if (ch === '/' || ch <= ' ' || ch === '\x7f') {
      return false;
    }
  }
  if (previousDot === nameEnd - 1) nameEnd--; // a trailing dot
  return nameEnd > 0;
}

// The GridFS filename in a raw request target, or { status }.
// Decoded once, strictly: a bad %-escape, invalid UTF-8, a control
// character, a backslash, an empty, "." or ".." segment, or more than 255
// bytes is a 400; nothing else is interpreted (GridFS has no directories).
function nameFromTarget(target) {
  let [, path] = splitAbsoluteForm(target);
  const cut = path.search(/[?#]/);
  if (cut >= 0) path = path.slice(0, cut);
  if (!path.startsWith('/files/')) return { status: 404 };
  const raw = Buffer.from(path.slice('/files/'.length), 'latin1');
  const bytes = Buffer.allocUnsafe(raw.length);
  let size = 0;
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] !== 0x25) { bytes[size++] = raw[i]; continue; }
    const high = i + 2 < raw.length ? hexValue(raw[i + 1]) : -1;
    const low = high >= 0 ? hexValue(raw[i + 2]) : -1;
    if (low < 0) return { status: 400 };
    bytes[size++] = high * 16 + low;
    i += 2;
  }
  if (size === 0) return { status: 404 };
  if (size > MAX_NAME_BYTES) return { status: 400 };
  let name;
  try {
    name = utf8Strict.decode(bytes.subarray(0, size));
  } catch {
    return { status: 400 };
  }
  if (/[\x00-\x1f\x7f\\]/.test(name)) return { status: 400 };
  if (name.split('/').some((segment) => segment === '' || segment === '.' || segment === '..')) {
    return { status: 400 };
  }
  return { name };
}

function guessContentType(name) {
  const dot = name.lastIndexOf('.');
  return (dot >= 0 && CONTENT_TYPES[name.slice(dot + 1).toLowerCase()]) || 'application/octet-stream';
}

// Seconds since the epoch, or null when the date does not parse.
function httpTime(value) {
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? null : Math.floor(ms / 1000);
}

// nginx's If-Match (strong) / If-None-Match (weak) comparison.
function etagMatches(header, etag, weak) {
  if (header.trim() === '*') return true;
  for (let candidate of header.split(',')) {
    candidate = candidate.replace(/^[ \t]+|[ \t]+$/g, '');
    if (weak && candidate.startsWith('W/')) candidate = candidate.slice(2);
    if (candidate === etag) return true;
  }
  return false;
}

const isDigit = (c) => c >= '0' && c <= '9';

function parseDigits(value, i) {
  let j = i;
  while (j < value.length && isDigit(value[j])) j++;
  const digits = value.slice(i, j).replace(/^0+/, '');
  const tooBig = digits.length > 19 || (digits.length === 19 && digits > MAX_OFFSET_DIGITS);
  // Values above 2^53 lose precision, which cannot change a comparison with
  // a real file length.
  return [tooBig ? null : Number(digits || '0'), j];
}

function skipSpaces(value, i) {
  while (i < value.length && value[i] === ' ') i++;
  return i;
}

// A port of ngx_http_range_parse for a header starting with "bytes=".
// Returns [[start, endExclusive], ...], NOT_SATISFIABLE (416), or null when
// the header is to be ignored (200), exactly where nginx does.
function parseRange(value, length) {
  const ranges = [];
  const n = value.length;
  let total = 0;
  let i = 6;
  for (;;) {
    i = skipSpaces(value, i);
    let suffix = false;
    let openEnded = false;
    let start = 0;
    let end = 0;
    if (i < n && value[i] === '-') {
      suffix = true;
      i++;
    } else {
      if (i >= n || !isDigit(value[i])) return NOT_SATISFIABLE;
      [start, i] = parseDigits(value, i);
      if (start === null) return NOT_SATISFIABLE;
      i = skipSpaces(value, i);
      if (i >= n || value[i] !== '-') return NOT_SATISFIABLE;
      i = skipSpaces(value, i + 1);
      if (i >= n || value[i] === ',') {
        openEnded = true;
        end = length;
      }
    }
    if (!openEnded) {
      if (i >= n || !isDigit(value[i])) return NOT_SATISFIABLE;
      [end, i] = parseDigits(value, i);
      if (end === null) return NOT_SATISFIABLE;
      i = skipSpaces(value, i);
      if (i < n && value[i] !== ',') return NOT_SATISFIABLE;
      if (suffix) {
        start = end < length ? length - end : 0;
        end = length - 1;
      }
      end = end >= length ? length : end + 1;
    }
    if (start < end) {
      ranges.push([start, end]);
      total += end - start;
    } else if (start === 0) {
      return null;
    }
    if (i >= n || value[i] !== ',') break;
    i++;
  }
  if (ranges.length === 0) return NOT_SATISFIABLE;
  if (total > length) return null;
  return ranges;
}

// Bytes [start, end) of `file` (checkedFile's), chunk by chunk, from the
// `chunks` collection.
function openChunks(chunks, file, start, end) {
  const { id: fileId, length, chunkSize } = file;
  const first = Math.floor(start / chunkSize);
  const last = Math.floor((end - 1) / chunkSize);
  // The limit lets the server close the cursor with the batch that holds
  // the last chunk (no getMore round trip to learn it is done).
  const cursor = chunks.find(
    { files_id: fileId, n: { $gte: first, $lte: last } },
    {
      projection: { _id: 0, n: 1, data: 1 },
      sort: { n: 1 },
      limit: last - first + 1,
      batchSize: chunksPerRead(length, chunkSize, first, last),
      promoteBuffers: true,
    },
  );
  let expected = first;
  // Whether the next piece needs a round trip (the cursor's batch is used
  // up and chunks remain): only then is a MongoDB slot taken for it.
  const needsRead = () => expected <= last && cursor.bufferedCount() === 0;
  // Bytes [start, end) of the file from the next chunk document, or null at the end.
  async function nextPiece() {
    const chunk = await cursor.next();
    if (chunk === null) {
      if (expected !== last + 1) throw new CorruptFile(`file ${fileId} ends at chunk ${expected - 1}, expected ${last}`);
      return null;
    }
    const { n, data } = chunk;
    // Every chunk exactly its size: a longer one is not silently cut.
    if (n !== expected || !Buffer.isBuffer(data) || data.length !== storedSize(length, chunkSize, n)) {
      throw new CorruptFile(`chunk ${n} of ${fileId} missing or of the wrong size (expected chunk ${expected} `
        + `of ${storedSize(length, chunkSize, expected)} bytes, got ${Buffer.isBuffer(data) ? data.length : typeof data})`);
    }
    const offset = n * chunkSize;
    const low = n === first ? start - offset : 0;
    const high = n === last ? end - offset : chunkSize;
    expected++;
    return low === 0 && high === data.length ? data : data.subarray(low, high);
  }
  return { cursor, needsRead, nextPiece };
}

// A counting semaphore whose waiters are served first come, first served,
// those that ask as `urgent` before the others.
class Semaphore {
  #free;
  // A Set iterates in insertion order (FIFO) and lets a waiter leave in O(1).
  #urgent = new Set();
  #waiters = new Set();

  constructor(count) {
    this.#free = count;
  }

  // Resolves to the slot's release function (idempotent), or to null when
  // no slot freed within timeoutMs or `signal` aborted first.
  acquire(timeoutMs, signal, urgent = false) {
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve(this.#releaser());
    }
    if (signal.aborted) return Promise.resolve(null);
    const queue = urgent ? this.#urgent : this.#waiters;
    return new Promise((resolve) => {
      const settle = (release) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', leave);
        queue.delete(grant);
        resolve(release);
      };
      const grant = () => settle(this.#releaser());
      const leave = () => settle(null);
      const timer = setTimeout(leave, timeoutMs);
      signal.addEventListener('abort', leave, { once: true });
      queue.add(grant);
    });
  }

  #releaser() {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      // Handed straight to the oldest waiter, so that a newcomer cannot take it first.
      const [oldest] = this.#urgent.size > 0 ? this.#urgent : this.#waiters;
      if (oldest === undefined) this.#free++;
      else oldest();
    };
  }
}

const mongoSlots = new Semaphore(MAX_STREAMS);
const openStreams = new Semaphore(MAX_OPEN_STREAMS);
// Admitted at once: up to MAX_OPEN_STREAMS, as the responses under way; an
// admitted request may then wait for one of the MAX_STREAMS slots, shared
// with the later batches of bodies under way, and that wait is in the
// latency the limit adapts to.
const admission = new Admission(MAX_OPEN_STREAMS, REQUEST_DEADLINE_MS);

// Refusals counted and logged at most once a second: one line per refusal
// would cost the path its refusals' speed.
const refusals = {
  refused: 0,
  since: Date.now(),
  count() {
    this.refused++;
    if (Date.now() - this.since < 1000) return;
    log(`${this.refused} requests refused in the last second or more: admission limit ${admission.limit.toFixed(1)}, `
      + `${admission.inFlight} in flight, mean latency ${admission.meanLatencyMs.toFixed(0)} ms`);
    this.refused = 0;
    this.since = Date.now();
  },
};

// A place in `slots` for this response, in turn: its release function,
// called at the latest when the response closes, or null when none freed
// within waitMs or the client left while waiting (it leaves the queue).
async function takeSlot(slots, res, waitMs) {
  if (res.destroyed) return null;
  const clientGone = new AbortController();
  const abort = () => clientGone.abort();
  res.once('close', abort);
  const release = await slots.acquire(waitMs, clientGone.signal);
  res.off('close', abort);
  if (release === null) return null;
  if (res.destroyed) { // granted after the client left
    release();
    return null;
  }
  res.once('close', release);
  return release;
}

// Socket errors the driver lets through unwrapped: a command written to a
// connection the server closed as it stopped is a plain Error ("This socket
// has been ended by the other party", EPIPE), which answered 500 once in
// make resilience's restarts. MongoDB is not there, as with a MongoError.
const NETWORK_ERROR_CODES = new Set(['EPIPE', 'ECONNRESET', 'ECONNREFUSED', 'ECONNABORTED', 'ETIMEDOUT',
  'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

function storeFailed(error) {
  return error instanceof MongoError || error instanceof DeadlinePassed
    || (error instanceof Error && NETWORK_ERROR_CODES.has(error.code));
}

function sendUnavailable(res) {
  sendText(res, 503, 'storage unavailable', { 'Retry-After': '1' });
}

// A stored file that breaks GridFS's rules will not heal on retry: a 500
// (nginx-gridfs's answer), no Retry-After, the connection closed.
function sendCorrupt(res, name, error) {
  log(`corrupt stored file ${JSON.stringify(name)}: ${error.message}`);
  sendText(res, 500, 'corrupt stored file');
}

async function serveFile(req, res) {
  const deadline = Date.now() + REQUEST_DEADLINE_MS;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    sendText(res, 405, 'method not allowed', { Allow: 'GET, HEAD' });
    return;
  }
  // The raw target: decoding is ours (strict, once).
  const { name, status: nameStatus } = nameFromTarget(req.originalUrl);
  if (name === undefined) {
    sendText(res, nameStatus, nameStatus === 400 ? 'bad file name' : 'not found');
    return;
  }

  // Admitted before any database work, or refused at once (admission.js).
  const clientGone = new AbortController();
  const abort = () => clientGone.abort();
  res.once('close', abort);
  const admittedAt = await admission.enter(deadline, clientGone.signal);
  res.off('close', abort);
  if (admittedAt === null) {
    if (res.destroyed) return;
    refusals.count();
    sendText(res, 503, 'server busy', { 'Retry-After': '1' });
    return;
  }
  let failed = true;
  try {
    failed = await serveAdmitted(req, res, name, deadline);
  } finally {
    // A 503 is MongoDB failing or the deadline passing: the limit comes down.
    admission.finished(admittedAt, failed);
  }
}

// The answer to an admitted GET or HEAD of `name`: its MongoDB work before
// the head (the lookup, the first chunk batch) is over when it resolves,
// to whether it failed (a 503).
async function serveAdmitted(req, res, name, deadline) {
  // A place among the open streams, held until the response closes (one
  // that never gets its body, a 404 or a 304, gives it back at once).
  const streamWaitMs = Math.max(1, deadline - Date.now());
  if (await takeSlot(openStreams, res, streamWaitMs) === null) {
    if (res.destroyed) return false;
    log(`no place of NODE_MAX_OPEN_STREAMS (${MAX_OPEN_STREAMS}) free within REQUEST_DEADLINE_MS `
      + `(${REQUEST_DEADLINE_MS} ms) for ${JSON.stringify(name)}: 503`);
    sendUnavailable(res);
    return true;
  }

  // A slot before the lookup: every request that uses MongoDB takes one,
  // so the driver's pool is never queued deep with lookups that chunk reads
  // then wait behind (at 1000 clients on 1 MB, not one body came whole).
  // Held through the first chunk batch, then released before the body goes
  // out (an answer without a body releases it as it closes, at once): a
  // client that stops reading holds no slot.
  const waitMs = Math.max(1, Math.min(STREAM_WAIT_MS, deadline - Date.now()));
  const release = await takeSlot(mongoSlots, res, waitMs);
  if (release === null) {
    if (res.destroyed) return false; // the client left while waiting
    log(`no slot of ${MAX_STREAMS} free within ${waitMs} ms (NODE_STREAM_WAIT_MS ${STREAM_WAIT_MS}, `
      + `REQUEST_DEADLINE_MS ${REQUEST_DEADLINE_MS}) for ${JSON.stringify(name)}: 503`);
    sendUnavailable(res);
    return true;
  }

  const current = store; // this request's client, even if the watchdog replaces it meanwhile
  current.lastUsedAt = Date.now();
  if (!current.serverKnown && current.connected) watch(current);
  let document;
  try {
    document = await beforeDeadline((async () => {
      if (!current.connected) await ensureConnected(current);
      return current.files.findOne({ filename: name }, {
        projection: FILE_PROJECTION, sort: { uploadDate: -1 }, maxTimeMS: Math.max(1, deadline - Date.now()),
      });
    })(), deadline);
  } catch (error) {
    if (!storeFailed(error)) throw error;
    log(`MongoDB unavailable looking up ${JSON.stringify(name)}: ${error.name}: ${error.message}`);
    sendUnavailable(res);
    return true;
  }
  if (document === null) {
    sendText(res, 404, 'not found');
    return false;
  }

  // Every stored value is checked before it reaches a header or a read.
  let file;
  try {
    file = checkedFile(document);
  } catch (error) {
    if (!(error instanceof CorruptFile)) throw error;
    sendCorrupt(res, name, error);
    return false;
  }
  const { length, lastModified, etag } = file;
  const contentType = file.contentType ?? guessContentType(name);
  const validators = { 'Last-Modified': new Date(lastModified * 1000).toUTCString(), ETag: etag };

  // Preconditions as nginx's not_modified filter evaluates them: If-Match /
  // If-Unmodified-Since -> 412; If-Modified-Since (exact date, nginx's
  // default "if_modified_since exact") and If-None-Match must all hold -> 304.
  const headers = req.headers;
  const ifUnmodifiedSince = headers['if-unmodified-since'];
  if (ifUnmodifiedSince !== undefined) {
    const unmodifiedSince = httpTime(ifUnmodifiedSince);
    if (unmodifiedSince === null || unmodifiedSince < lastModified) {
      sendText(res, 412, 'precondition failed');
      return false;
    }
  }
  const ifMatch = headers['if-match'];
  if (ifMatch !== undefined && !etagMatches(ifMatch, etag, false)) {
    sendText(res, 412, 'precondition failed');
    return false;
  }
  const ifModifiedSince = headers['if-modified-since'];
  const ifNoneMatch = headers['if-none-match'];
  if (ifModifiedSince !== undefined || ifNoneMatch !== undefined) {
    if ((ifModifiedSince === undefined || httpTime(ifModifiedSince) === lastModified)
        && (ifNoneMatch === undefined || etagMatches(ifNoneMatch, etag, true))) {
      res.writeHead(304, validators);
      res.end();
      return false;
    }
  }

  let status = 200;
  let start = 0;
  let end = length;
  const responseHeaders = { 'Content-Type': contentType, ...validators };
  const rangeHeader = headers.range;
  if (rangeHeader !== undefined && rangeHeader.length >= 7 && rangeHeader.slice(0, 6).toLowerCase() === 'bytes=') {
    const ifRange = headers['if-range'];
    let rangeApplies;
    if (ifRange === undefined) rangeApplies = true;
    else if (ifRange.length >= 2 && ifRange.endsWith('"')) rangeApplies = ifRange === etag;
    else rangeApplies = httpTime(ifRange) === lastModified;
    const ranges = rangeApplies ? parseRange(rangeHeader, length) : null;
    if (ranges === NOT_SATISFIABLE) {
      sendText(res, 416, 'range not satisfiable', { 'Content-Range': `bytes */${length}` });
      return false;
    }
    // Several ranges: nginx answers multipart/byteranges; we answer the
    // whole file with 200, which RFC 9110 allows (a server may ignore
    // Range), and no download tool needs multipart.
    if (ranges !== null && ranges.length === 1) {
      status = 206;
      [[start, end]] = ranges;
      responseHeaders['Content-Range'] = `bytes ${start}-${end - 1}/${length}`;
    }
  }
  if (status === 200) responseHeaders['Accept-Ranges'] = 'bytes';
  responseHeaders['Content-Length'] = end - start;

  if (req.method === 'HEAD' || start === end) {
    res.writeHead(status, responseHeaders);
    res.end();
    return false;
  }
  // The first chunk is read before the status line goes out, so that a
  // MongoDB failure there is still a clean 503; later failures can only cut
  // the connection short (Content-Length tells the client).
  const { cursor, needsRead, nextPiece } = openChunks(current.chunks, file, start, end);
  let firstPiece;
  try {
    firstPiece = await beforeDeadline(nextPiece(), deadline);
  } catch (error) {
    release();
    cursor.close().catch(() => {});
    if (error instanceof CorruptFile) {
      sendCorrupt(res, name, error);
      return false;
    }
    if (!storeFailed(error)) throw error;
    log(`cannot read chunks of ${JSON.stringify(name)}: ${error.name}: ${error.message}`);
    sendUnavailable(res);
    return true;
  }
  release();
  try {
    res.writeHead(status, responseHeaders);
  } catch (error) { // not expected (the values were checked), but never leave the cursor open
    cursor.close().catch(() => {});
    throw error;
  }
  // Each later batch takes a slot for its round trip only, ahead of new
  // requests (a body under way finishes before more start); it waits at most
  // NODE_STREAM_WAIT_MS, or the body is cut short as on a read error.
  const clientGone = new AbortController();
  res.once('close', () => clientGone.abort());
  async function readWithSlot() {
    const releaseRead = await mongoSlots.acquire(STREAM_WAIT_MS, clientGone.signal, true);
    if (releaseRead === null) {
      if (clientGone.signal.aborted) return null; // pipeline has ended it already
      throw new Error(`no slot of ${MAX_STREAMS} free within NODE_STREAM_WAIT_MS (${STREAM_WAIT_MS} ms)`);
    }
    try {
      return await nextPiece();
    } finally {
      releaseRead();
    }
  }
  async function* pieces() {
    try {
      for (let piece = firstPiece; piece !== null; piece = await (needsRead() ? readWithSlot() : nextPiece())) {
        yield piece;
      }
    } finally {
      await cursor.close().catch(() => {});
    }
  }
  // nginx's send_timeout: a client that takes nothing of the body for
  // SEND_TIMEOUT_MS is cut off. The socket's idle timer restarts with every
  // write, and at its expiry Node lets it run once more if the kernel took
  // some of the write queue meanwhile: a client that reads is never cut,
  // one that stopped is closed after one to two SEND_TIMEOUT_MS.
  res.setTimeout(SEND_TIMEOUT_MS, () => {
    log(`client took nothing of ${JSON.stringify(name)} for SEND_TIMEOUT_MS (${SEND_TIMEOUT_MS} ms): closed`);
    res.destroy();
  });
  // highWaterMark 1: at most one chunk waits in the stream, whatever the
  // client's speed, besides what is left of the cursor's batch (at most
  // READ_BUFFER_BYTES); pipeline destroys the response on a read error. The
  // cursor is closed here too, as pieces() never started (its finally never
  // runs) when the client left before the first read.
  pipeline(Readable.from(pieces(), { highWaterMark: 1 }), res, (error) => {
    cursor.close().catch(() => {});
    if (error && error.code !== 'ERR_STREAM_PREMATURE_CLOSE') {
      log(`stream of ${JSON.stringify(name)} cut short: ${error.name}: ${error.message}`);
    }
  });
  return false;
}

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.set('query parser', false);

// What Node's parser lets through and nginx refuses: an HTTP major version
// above 1 (505); for HTTP/1.1 a Host missing (Node 20 refuses it itself,
// Node 18 does not), repeated (Node keeps the first) or malformed, or a
// malformed absolute-form authority (400; RFC 9112 3.2). HTTP/0.9, which
// nginx still answers with the body alone, is refused (400): Node's
// response always has a status line. A transfer coding other than chunked
// alone ("gzip, chunked", which Node reads as chunked) is nginx's 501.
app.use((req, res, next) => {
  const coding = req.headers['transfer-encoding'];
  if (coding !== undefined && coding.trim().toLowerCase() !== 'chunked') {
    sendText(res, 501, 'transfer coding not implemented');
    return;
  }
  if (req.httpVersionMajor !== 1) {
    if (req.httpVersionMajor > 1) sendText(res, 505, 'HTTP version not supported');
    else sendText(res, 400, 'HTTP/0.9 not supported');
    return;
  }
  let hosts = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i].length === 4 && req.rawHeaders[i].toLowerCase() === 'host') hosts++;
  }
  const [authority] = splitAbsoluteForm(req.url);
  if (hosts === 0 && req.httpVersionMinor > 0) sendText(res, 400, 'missing Host header');
  else if (hosts > 1) sendText(res, 400, 'more than one Host header');
  else if ((hosts === 1 && !validHost(req.headers.host)) || (authority !== null && !validHost(authority))) {
    sendText(res, 400, 'bad host');
  } else next();
});
app.get('/health', (req, res) => sendText(res, 200, 'ok'));
// A regular expression without groups, so that Express does not decode the
// name (serveFile does, strictly).
app.all(/^\/files\//, (req, res, next) => serveFile(req, res).catch(next));
app.use((req, res) => sendText(res, 404, 'not found'));
app.use((error, req, res, next) => { // eslint-disable-line no-unused-vars
  log(`internal error on ${req.method} ${req.originalUrl}: ${error.stack || error}`);
  if (res.headersSent) res.destroy();
  else sendText(res, 500, 'internal error');
});

const server = app.listen(PORT, '0.0.0.0', () => log(`listening on :${PORT}`));
ensureConnected(store).catch((error) => log(`MongoDB not reachable at start, retried on each request: ${error.name}: ${error.message}`));
server.keepAliveTimeout = 75_000; // benchmark clients keep connections open

function shutDown() {
  server.close();
  store.client.close().finally(() => process.exit(0));
}
process.on('SIGTERM', shutDown);
process.on('SIGINT', shutDown);
