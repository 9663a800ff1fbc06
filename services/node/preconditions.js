'use strict';
// Conditional requests as nginx's not_modified filter and range filter
// evaluate them (412, 304, If-Range): the Node counterpart of
// services/python-common/lab_http/preconditions.py, where the differences
// from the usual libraries' answers are listed.

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

// 412 or 304 where nginx answers them, else null (serve the file).
// If-Match / If-Unmodified-Since -> 412; If-Modified-Since (exact date,
// nginx's default "if_modified_since exact") and If-None-Match must all
// hold -> 304.
function preconditionStatus(headers, etag, lastModified) {
  const ifUnmodifiedSince = headers['if-unmodified-since'];
  if (ifUnmodifiedSince !== undefined) {
    const unmodifiedSince = httpTime(ifUnmodifiedSince);
    if (unmodifiedSince === null || unmodifiedSince < lastModified) return 412;
  }
  const ifMatch = headers['if-match'];
  if (ifMatch !== undefined && !etagMatches(ifMatch, etag, false)) return 412;
  const ifModifiedSince = headers['if-modified-since'];
  const ifNoneMatch = headers['if-none-match'];
  if (ifModifiedSince !== undefined || ifNoneMatch !== undefined) {
    if ((ifModifiedSince === undefined || httpTime(ifModifiedSince) === lastModified)
        && (ifNoneMatch === undefined || etagMatches(ifNoneMatch, etag, true))) {
      return 304;
    }
  }
  return null;
}

// Whether a Range header applies given If-Range (absent: it does): a value
// ending in '"' is an entity tag compared byte for byte, anything else a
// date equal to Last-Modified.
function ifRangeAllows(ifRange, etag, lastModified) {
  if (ifRange === undefined) return true;
  if (ifRange.length >= 2 && ifRange.endsWith('"')) return ifRange === etag;
  return httpTime(ifRange) === lastModified;
}

module.exports = { ifRangeAllows, preconditionStatus };
