'use strict';
// GET|HEAD /files/<name>: admission, the places a request takes, the lookup,
// the preconditions and Range, then the body streamed chunk by chunk with
// the HTTP semantics of nginx's static module; the Node counterpart of
// services/python-common/lab_http/app.py's serve_file.
const { Readable, pipeline } = require('node:stream');
const { Admission } = require('./admission');
const { openChunks } = require('./chunks');
const { beforeDeadline } = require('./deadline');
const { log } = require('./log');
const { LoopDelay, describeDelay } = require('./loop-delay');
const { guessContentType, nameFromTarget } = require('./names');
const { ifRangeAllows, preconditionStatus } = require('./preconditions');
const { NOT_SATISFIABLE, isByteRange, parseRange } = require('./ranges');
const { sendCorrupt, sendText, sendUnavailable } = require('./responses');
const {
  MAX_OPEN_STREAMS, MAX_STREAMS, REQUEST_DEADLINE_MS, SEND_TIMEOUT_MS, STREAM_WAIT_MS,
} = require('./settings');
const { Semaphore, takeSlot } = require('./slots');
const { findNewest, storeFailed, storeForRequest } = require('./store');
const { CorruptFile, checkedFile } = require('./stored-file');

const mongoSlots = new Semaphore(MAX_STREAMS);
const openStreams = new Semaphore(MAX_OPEN_STREAMS);
// Admitted at once: up to MAX_OPEN_STREAMS, as the responses under way; an
// admitted request may then wait for one of the MAX_STREAMS slots, shared
// with the later batches of bodies under way, and that wait is in the
// latency the limit adapts to.
const admission = new Admission(MAX_OPEN_STREAMS, REQUEST_DEADLINE_MS);

// Refusals counted and logged at most once a second: one line per refusal
// would cost the path its refusals' speed. Each line says too how long node
// held them, from the handler to the refusal, and how late the event loop
// ran since the last one (loop-delay.js): a refusal's latency is its
// SHORT_WAIT_MS and that lag, twice. At 10x node's 1 MB capacity the client
// read a p99 of 109-132 ms where the loop's lag was 5-25 ms (issue 39): the
// time held tells node's part from what comes before and after it.
const loopDelay = new LoopDelay().start();
const refusals = {
  refused: 0,
  heldMs: [],
  since: Date.now(),
  count(heldMs) {
    this.refused++;
    this.heldMs.push(heldMs);
    if (Date.now() - this.since < 1000) return;
    log(`${this.refused} requests refused in the last second or more, held ${describeHeld(this.heldMs)}: `
      + `admission limit ${admission.limit.toFixed(1)}, ${admission.inFlight} in flight, `
      + `mean latency ${admission.meanLatencyMs.toFixed(0)} ms; ${describeDelay(loopDelay.sinceLast())}`);
    this.refused = 0;
    this.heldMs = [];
    this.since = Date.now();
  },
};

// p50 / p99 / max of the milliseconds given, as a log line's clause.
function describeHeld(ms) {
  const sorted = [...ms].sort((a, b) => a - b);
  const at = (share) => sorted[Math.min(sorted.length - 1, Math.floor(share * sorted.length))];
  return `p50 ${at(0.5)} / p99 ${at(0.99)} / max ${sorted[sorted.length - 1]} ms`;
}

async function serveFile(req, res) {
  const started = Date.now();
  const deadline = started + REQUEST_DEADLINE_MS;
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
  const admitted = await admission.enter(deadline, clientGone.signal);
  res.off('close', abort);
  if (admitted === null) {
    if (res.destroyed) return;
    refusals.count(Date.now() - started);
    sendText(res, 503, 'server busy', { 'Retry-After': '1' });
    return;
  }
  let failed = true;
  try {
    failed = await serveAdmitted(req, res, name, deadline);
  } finally {
    // A 503 is MongoDB failing or the deadline passing: the limit comes down.
    admission.finished(admitted, failed);
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

  const current = storeForRequest(); // this request's client, even if the watchdog replaces it meanwhile
  const found = await lookUp(res, current, name, deadline);
  if (found.file === undefined) return found.failed;
  const head = headFor(req, res, found.file, name);
  if (head === null) return false;
  if (req.method === 'HEAD' || head.start === head.end) {
    res.writeHead(head.status, head.headers);
    res.end();
    return false;
  }
  return sendBody(res, { name, deadline, current, file: found.file, release }, head);
}

// The checked files document of `name` as { file }, or { failed } once the
// request is answered without it: 404, 500 (corrupt) or 503 (failed: true).
async function lookUp(res, current, name, deadline) {
  let document;
  try {
    document = await findNewest(current, name, deadline);
  } catch (error) {
    if (!storeFailed(error)) throw error;
    log(`MongoDB unavailable looking up ${JSON.stringify(name)}: ${error.name}: ${error.message}`);
    sendUnavailable(res);
    return { failed: true };
  }
  if (document === null) {
    sendText(res, 404, 'not found');
    return { failed: false };
  }
  // Every stored value is checked before it reaches a header or a read.
  try {
    return { file: checkedFile(document) };
  } catch (error) {
    if (!(error instanceof CorruptFile)) throw error;
    sendCorrupt(res, name, error);
    return { failed: false };
  }
}

// The head of the answer to `file`: { status, start, end, headers } for
// bytes [start, end), or null once answered without one (412, 304, 416).
function headFor(req, res, file, name) {
  const { length, lastModified, etag } = file;
  const contentType = file.contentType ?? guessContentType(name);
  const validators = { 'Last-Modified': new Date(lastModified * 1000).toUTCString(), ETag: etag };
  const precondition = preconditionStatus(req.headers, etag, lastModified);
  if (precondition === 412) {
    sendText(res, 412, 'precondition failed');
    return null;
  }
  if (precondition === 304) {
    res.writeHead(304, validators);
    res.end();
    return null;
  }

  let status = 200;
  let start = 0;
  let end = length;
  const headers = { 'Content-Type': contentType, ...validators };
  const rangeHeader = req.headers.range;
  if (rangeHeader !== undefined && isByteRange(rangeHeader)) {
    const applies = ifRangeAllows(req.headers['if-range'], etag, lastModified);
    const ranges = applies ? parseRange(rangeHeader, length) : null;
    if (ranges === NOT_SATISFIABLE) {
      sendText(res, 416, 'range not satisfiable', { 'Content-Range': `bytes */${length}` });
      return null;
    }
    // Several ranges: nginx answers multipart/byteranges; we answer the
    // whole file with 200, which RFC 9110 allows (a server may ignore
    // Range), and no download tool needs multipart.
    if (ranges !== null && ranges.length === 1) {
      status = 206;
      [[start, end]] = ranges;
      headers['Content-Range'] = `bytes ${start}-${end - 1}/${length}`;
    }
  }
  if (status === 200) headers['Accept-Ranges'] = 'bytes';
  headers['Content-Length'] = end - start;
  return { status, start, end, headers };
}

// The head and body of bytes [start, end) of a looked-up file, resolving to
// whether MongoDB failed (a 503). The first chunk is read before the status
// line goes out, so that a MongoDB failure there is still a clean 503; later
// failures can only cut the connection short (Content-Length tells the client).
async function sendBody(res, { name, deadline, current, file, release }, { status, start, end, headers }) {
  const reads = openChunks(current.chunks, file, start, end);
  const { cursor, nextPiece } = reads;
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
    res.writeHead(status, headers);
  } catch (error) { // not expected (the values were checked), but never leave the cursor open
    cursor.close().catch(() => {});
    throw error;
  }
  streamPieces(res, name, reads, firstPiece);
  return false;
}

// The rest of a body after its head, from `firstPiece` on, through
// openChunks' `reads` to the client at its pace.
function streamPieces(res, name, { cursor, needsRead, nextPiece }, firstPiece) {
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
}

module.exports = { serveFile };
