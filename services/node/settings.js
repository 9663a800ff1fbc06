'use strict';
// The Node path's settings from the environment, each read and checked once
// at start: a bad value stops the process before it listens.
const { log } = require('./log');

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

const PORT = Number(process.env.PORT || 8080);
const MONGO_URI = process.env.MONGO_URI || 'mongodb://mongo:27017';
const GRIDFS_DB = process.env.GRIDFS_DB || 'lab';
const GRIDFS_BUCKET = process.env.GRIDFS_BUCKET || 'fs';

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
// nothing for this long is closed (see serve-file.js). The timer runs between
// two writes that went out, not over the whole body. Shorter only for tests.
const SEND_TIMEOUT_MS = positiveIntegerFromEnv('SEND_TIMEOUT_MS', 60_000, 2 ** 31 - 1);

module.exports = {
  GRIDFS_BUCKET, GRIDFS_DB, MAX_OPEN_STREAMS, MAX_STREAMS, MONGO_URI, PORT, REQUEST_DEADLINE_MS,
  SEND_TIMEOUT_MS, STREAM_WAIT_MS,
};
