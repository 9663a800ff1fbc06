'use strict';
// File names in request targets, decoded strictly and once, and the
// Content-Type of a stored file: the Node counterpart of
// services/python-common/lab_http/names.py.
const { splitAbsoluteForm } = require('./hosts');

const MAX_NAME_BYTES = 255;

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

const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function hexValue(code) {
  if (code >= 48 && code <= 57) return code - 48;
  if (code >= 65 && code <= 70) return code - 55;
  if (code >= 97 && code <= 102) return code - 87;
  return -1;
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

module.exports = { guessContentType, nameFromTarget };
