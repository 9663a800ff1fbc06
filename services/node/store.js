'use strict';
// The GridFS store: one MongoClient at a time, connected by us, watched and
// replaced when its driver stops seeing a server that is there, and the
// lookup of a file's newest revision. What counts as MongoDB failing (a 503)
// is said here too.
const { MongoClient, MongoError } = require('mongodb');
const { DeadlinePassed, beforeDeadline } = require('./deadline');
const { log } = require('./log');
const { GRIDFS_BUCKET, GRIDFS_DB, MONGO_URI } = require('./settings');

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

// The store now; one replaced by the watchdog keeps serving the requests that started on it.
function currentStore() {
  return store;
}

// The store a request uses throughout, even if the watchdog replaces it
// meanwhile: marked in use, and watched if it already sees no server.
function storeForRequest() {
  const current = store;
  current.lastUsedAt = Date.now();
  if (!current.serverKnown && current.connected) watch(current);
  return current;
}

const FILE_PROJECTION = { length: 1, chunkSize: 1, uploadDate: 1, 'metadata.contentType': 1 };

// The files document of the newest revision of `name` (null: none), connecting first if need be,
// all before `deadline`.
function findNewest(current, name, deadline) {
  return beforeDeadline((async () => {
    if (!current.connected) await ensureConnected(current);
    return current.files.findOne({ filename: name }, {
      projection: FILE_PROJECTION, sort: { uploadDate: -1 }, maxTimeMS: Math.max(1, deadline - Date.now()),
    });
  })(), deadline);
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

module.exports = { currentStore, ensureConnected, findNewest, storeFailed, storeForRequest };
