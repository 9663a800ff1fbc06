'use strict';
// The Node path's answers without a stored body (text/plain, closing the
// connection where nginx does), shared by the request checks and serve-file.js.
const { log } = require('./log');

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

function sendUnavailable(res) {
  sendText(res, 503, 'storage unavailable', { 'Retry-After': '1' });
}

// A stored file that breaks GridFS's rules will not heal on retry: a 500
// (nginx-gridfs's answer), no Retry-After, the connection closed.
function sendCorrupt(res, name, error) {
  log(`corrupt stored file ${JSON.stringify(name)}: ${error.message}`);
  sendText(res, 500, 'corrupt stored file');
}

module.exports = { sendCorrupt, sendText, sendUnavailable };
