'use strict';
// The host of a request, as nginx 1.22 accepts it (the Host header and the
// authority of an absolute-form target alike), so that the Node path refuses
// with 400 what nginx refuses: the Node counterpart of
// services/python-common/lab_http/hosts.py.

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

module.exports = { splitAbsoluteForm, validHost };
