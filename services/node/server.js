'use strict';
// Node serving path: GET|HEAD /files/<name> streams the newest GridFS
// revision of <name> chunk by chunk, with the HTTP semantics of nginx's
// static module (validators, Range, 304/412/416); same rules as the Flask path.
//
// Hot path per request: one find on <bucket>.files, then one cursor on
// <bucket>.chunks limited to the chunks the answer needs, in batches of at
// most 1.25 MiB (a file up to that size: one round trip). (The driver's
// openDownloadStream would look the file document up a second time.)
//
// This file wires the modules, one concern each as in services/python-common/lab_http:
// settings.js (the environment), hosts.js, names.js, preconditions.js and
// ranges.js (nginx's HTTP rules), store.js (the MongoDB client and its
// watchdog), stored-file.js and chunks.js (a stored file's values and
// chunks), admission.js and slots.js (what is let in at once),
// serve-file.js (the answer to GET|HEAD /files/<name>).
const express = require('express');
const { splitAbsoluteForm, validHost } = require('./hosts');
const { log } = require('./log');
const { sendText } = require('./responses');
const { serveFile } = require('./serve-file');
const { PORT } = require('./settings');
const { currentStore, ensureConnected } = require('./store');

// What Node's parser lets through and nginx refuses: an HTTP major version
// above 1 (505); for HTTP/1.1 a Host missing (Node 20 refuses it itself,
// Node 18 does not), repeated (Node keeps the first) or malformed, or a
// malformed absolute-form authority (400; RFC 9112 3.2). HTTP/0.9, which
// nginx still answers with the body alone, is refused (400): Node's
// response always has a status line. A transfer coding other than chunked
// alone ("gzip, chunked", which Node reads as chunked) is nginx's 501.
function refuseWhatNginxRefuses(req, res, next) {
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
}

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.set('query parser', false);

app.use(refuseWhatNginxRefuses);
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
ensureConnected(currentStore()).catch((error) => log(
  `MongoDB not reachable at start, retried on each request: ${error.name}: ${error.message}`));
server.keepAliveTimeout = 75_000; // benchmark clients keep connections open

function shutDown() {
  server.close();
  currentStore().client.close().finally(() => process.exit(0));
}
process.on('SIGTERM', shutDown);
process.on('SIGINT', shutDown);
