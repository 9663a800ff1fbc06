'use strict';
// The Node path's log line: what it does is said on stderr, as on the other paths.

function log(message) {
  process.stderr.write(`${new Date().toISOString()} gridfs-lab-node: ${message}\n`);
}

module.exports = { log };
