'use strict';
// A GridFS file's stored values, checked before any of them reaches a
// header or a read, and the plan of its chunk reads: the Node counterpart
// of services/python-common/lab_http/chunks.py (same rules, same ETag).
// Stored values are untrusted: anything that does not add up is a
// CorruptFile (a 500 for that file only, or its connection cut once the
// head is out), never a crash, a truncated body or a wrong one.
const { ObjectId } = require('mongodb');

// Bytes of chunks one cursor batch may bring in: a whole file of up to this
// size is one round trip (1 MB is 4 chunks of 255 KiB + 4 KiB), and memory
// per request stays bounded whatever the file size.
const READ_BUFFER_BYTES = 1280 * 1024;
// A stored _id longer than this is not put into an ETag header.
const MAX_ID_TEXT = 255;
const MAX_CONTENT_TYPE = 255;
// GridFS's limits, as lab_http and nginx-gridfs check them: a chunk of 1
// byte to 16 MiB (MongoDB's document size), fewer than 2^31 chunks (n is an
// int32), so that no header carries a length the chunks cannot hold.
const MAX_CHUNK_SIZE = 16 * 1024 * 1024;
const MAX_CHUNKS = 2 ** 31 - 1;

// A file that breaks GridFS's rules: it will not heal on retry, so never a 503.
class CorruptFile extends Error {}

// A stored content type becomes a header: only type/subtype with optional
// token=value parameters is trusted (no control character, nothing above
// ASCII, which would split the response or make writeHead throw).
const TOKEN = "[A-Za-z0-9!#$%&'*+.^_`|~-]+";
const CONTENT_TYPE_VALUE = new RegExp(
  `^${TOKEN}/${TOKEN}(?:[ \\t]*;[ \\t]*${TOKEN}=(?:${TOKEN}|"[ !#-\\[\\]-~]*"))*$`,
);
const NOT_ETAG_SAFE = /[^\x21\x23-\x7e]/g; // visible ASCII but '"'

// The same text of an _id as the Python path's: an ObjectId's hex, a
// string's or an integer's safe characters; anything else none.
function idText(id) {
  if (id instanceof ObjectId) return id.toHexString();
  if (typeof id === 'string' || Number.isSafeInteger(id)) return String(id).replace(NOT_ETAG_SAFE, '');
  return '';
}

// What a files document's values mean, or a CorruptFile naming the first
// bad one: length a whole number >= 0, chunkSize a whole number of 1 byte
// to MAX_CHUNK_SIZE, the length held by at most MAX_CHUNKS chunks, an
// uploadDate, an _id fit for the ETag (1 to 255 characters once unsafe
// ones are dropped). GridFS lengths are int32, int64 or (from JavaScript
// drivers, past 2 GiB) a double: numbers here, but an int64 past 2^53,
// which the driver leaves a Long (refused as not a safe integer).
function checkedFile(document) {
  const { _id: id, length, chunkSize, uploadDate } = document;
  const label = `file ${String(id)}`;
  if (!(Number.isSafeInteger(length) && length >= 0)) throw new CorruptFile(`${label}: length ${length}`);
  if (!(Number.isSafeInteger(chunkSize) && chunkSize > 0 && chunkSize <= MAX_CHUNK_SIZE)) {
    throw new CorruptFile(`${label}: chunkSize ${chunkSize}`);
  }
  if (Math.ceil(length / chunkSize) > MAX_CHUNKS) {
    throw new CorruptFile(`${label}: length ${length} needs more than ${MAX_CHUNKS} chunks of ${chunkSize} bytes`);
  }
  if (!(uploadDate instanceof Date) || Number.isNaN(uploadDate.getTime())) {
    throw new CorruptFile(`${label}: uploadDate ${uploadDate}`);
  }
  const text = idText(id);
  if (text === '' || text.length > MAX_ID_TEXT) throw new CorruptFile(`${label}: _id cannot go into an ETag`);
  const uploadedMs = uploadDate.getTime();
  const storedType = document.metadata?.contentType;
  return {
    id,
    length,
    chunkSize,
    lastModified: Math.floor(uploadedMs / 1000),
    etag: `"${text}-${length.toString(16)}-${uploadedMs.toString(16)}"`,
    // Only a safe header value; otherwise the caller guesses from the name.
    contentType: typeof storedType === 'string' && storedType.length <= MAX_CONTENT_TYPE
      && CONTENT_TYPE_VALUE.test(storedType) ? storedType : null,
  };
}

// The exact size chunk n must have: chunkSize, but the last chunk holds the remainder.
function storedSize(length, chunkSize, n) {
  return Math.min(chunkSize, length - n * chunkSize);
}

// How many chunks one read brings in for chunks first..last: all of them
// when their bytes fit the buffer, else as many whole chunks as fit (one at least).
function chunksPerRead(length, chunkSize, first, last, bufferBytes = READ_BUFFER_BYTES) {
  if (Math.min(length, (last + 1) * chunkSize) - first * chunkSize <= bufferBytes) return last - first + 1;
  return Math.max(1, Math.floor(bufferBytes / chunkSize));
}

module.exports = { CorruptFile, READ_BUFFER_BYTES, checkedFile, chunksPerRead, storedSize };
