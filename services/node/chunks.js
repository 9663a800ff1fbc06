'use strict';
// Bytes of a stored file read from its chunks collection, piece by piece,
// each chunk checked against the file's length and chunk size
// (stored-file.js) before any of it is sent.
const { CorruptFile, chunksPerRead, storedSize } = require('./stored-file');

// Bytes [start, end) of `file` (checkedFile's), chunk by chunk, from the
// `chunks` collection.
function openChunks(chunks, file, start, end) {
  const { id: fileId, length, chunkSize } = file;
  const first = Math.floor(start / chunkSize);
  const last = Math.floor((end - 1) / chunkSize);
  // The limit lets the server close the cursor with the batch that holds
  // the last chunk (no getMore round trip to learn it is done).
  const cursor = chunks.find(
    { files_id: fileId, n: { $gte: first, $lte: last } },
    {
      projection: { _id: 0, n: 1, data: 1 },
      sort: { n: 1 },
      limit: last - first + 1,
      batchSize: chunksPerRead(length, chunkSize, first, last),
      promoteBuffers: true,
    },
  );
  let expected = first;
  // Whether the next piece needs a round trip (the cursor's batch is used
  // up and chunks remain): only then is a MongoDB slot taken for it.
  const needsRead = () => expected <= last && cursor.bufferedCount() === 0;
  // Bytes [start, end) of the file from the next chunk document, or null at the end.
  async function nextPiece() {
    const chunk = await cursor.next();
    if (chunk === null) {
      if (expected !== last + 1) throw new CorruptFile(`file ${fileId} ends at chunk ${expected - 1}, expected ${last}`);
      return null;
    }
    const { n, data } = chunk;
    // Every chunk exactly its size: a longer one is not silently cut.
    if (n !== expected || !Buffer.isBuffer(data) || data.length !== storedSize(length, chunkSize, n)) {
      throw new CorruptFile(`chunk ${n} of ${fileId} missing or of the wrong size (expected chunk ${expected} `
        + `of ${storedSize(length, chunkSize, expected)} bytes, got ${Buffer.isBuffer(data) ? data.length : typeof data})`);
    }
    const offset = n * chunkSize;
    const low = n === first ? start - offset : 0;
    const high = n === last ? end - offset : chunkSize;
    expected++;
    return low === 0 && high === data.length ? data : data.subarray(low, high);
  }
  return { cursor, needsRead, nextPiece };
}

module.exports = { openChunks };
