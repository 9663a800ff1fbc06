package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// layout is where a GridFS file's bytes are: chunk n holds bytes
// [n*chunkSize, min((n+1)*chunkSize, length)).
type layout struct {
	length    int64
	chunkSize int64
}

// GridFS's own limits, as the nginx module checks them
// (ngx_http_gridfs_check_file): every offset computed from a files
// document relies on them, so a document outside them is refused before
// any arithmetic or allocation. maxChunkSize bounds the memory one chunk
// may take (GridFS's default is 255 KiB; BSON documents stop at 16 MiB);
// maxChunks: a chunk's n is below 2^31 (an int32 in every driver), so a
// file's length is at most chunkSize x 2^31, below 2^55: n x chunkSize
// and offset + size never overflow.
const (
	maxChunkSize = 16 << 20
	maxChunks    = 1 << 31
)

// errCorrupt marks a file whose files document or chunks break GridFS's
// rules: the same answer on every retry, unlike an outage.
var errCorrupt = errors.New("stored file is damaged")

// valid checks a files document's length and chunkSize against GridFS's
// limits; a chunkSize of 0 is allowed for an empty file only.
func (l layout) valid() error {
	switch {
	case l.length < 0:
		return fmt.Errorf("negative length %d", l.length)
	case l.chunkSize < 0 || l.chunkSize > maxChunkSize:
		return fmt.Errorf("chunkSize %d outside 1..%d", l.chunkSize, maxChunkSize)
	case l.length > 0 && l.chunkSize == 0:
		return fmt.Errorf("chunkSize 0 for a length of %d", l.length)
	case l.length > 0 && (l.length-1)/l.chunkSize >= maxChunks:
		return fmt.Errorf("length %d needs more than 2^31 chunks of %d bytes", l.length, l.chunkSize)
	}
	return nil
}

// chunkCount is how many chunks the file has (0 for an empty file). No
// overflow even on a layout that is not valid.
func (l layout) chunkCount() int64 {
	if l.length <= 0 || l.chunkSize <= 0 {
		return 0
	}
	return (l.length-1)/l.chunkSize + 1
}

// chunkLen is the length chunk n must have: chunkSize, less for the last.
func (l layout) chunkLen(n int64) int64 {
	if n < 0 || n >= l.chunkCount() {
		return 0
	}
	return min(l.chunkSize, l.length-n*l.chunkSize) // n*chunkSize < length
}

// span is the first and last chunk holding bytes [off, off+size) clipped to
// the file; ok is false when nothing is there (past the end, size 0).
func (l layout) span(off int64, size int) (first, last int64, ok bool) {
	if off < 0 || size <= 0 || off >= l.length || l.chunkSize <= 0 {
		return 0, 0, false
	}
	end := l.length // exclusive; off + size may not fit an int64
	if int64(size) < l.length-off {
		end = off + int64(size)
	}
	return off / l.chunkSize, (end - 1) / l.chunkSize, true
}

// chunkFetcher returns the data of chunks first..last, in order, each of the
// length the layout says (the store checks; the reader checks again).
type chunkFetcher func(ctx context.Context, first, last int64) ([][]byte, error)

// wholeFetchBytes: when the rest of a file read sequentially is at most
// this many bytes, and at most wholeFetchChunks chunks, it is fetched in one
// round trip, as the other GridFS paths read a file of up to 1.25 MiB (1 MB
// is 4 chunks of 255 KiB + 4 KiB: two round trips with 4-chunk read-ahead).
// The chunk bound keeps a file of tiny chunks (chunkSize 1: a million for
// 1 MB) from one fetch, and a cache, that size.
const (
	wholeFetchBytes  = 1280 << 10
	wholeFetchChunks = 64
)

// openFetchBytes: a file of at most this many bytes (and wholeFetchChunks
// chunks) is fetched whole when it is opened, in place of the open's
// existence query: one small query either way, and then the answer needs
// MongoDB no more, so an outage or a damaged chunk shows at the open, which
// nginx answers 503 or 500, instead of cutting the body after a 200's head.
// Larger files are not: their first fetch would run in nginx's event loop
// (it opens files there), and a HEAD, a 304 or a Range would pay for it.
const openFetchBytes = 64 << 10

// chunkReader reads one open file at any offset, fetching only the chunks a
// read needs. It keeps the last few chunks it fetched, and when reads are
// sequential it fetches `readahead` chunks per round trip (or the rest of
// the file, when that is at most wholeFetchBytes), so that a whole file
// costs about ceil(chunks / readahead) queries rather than one per chunk.
type chunkReader struct {
	layout    layout
	fetch     chunkFetcher
	readahead int
	keep      int // chunks cached at most: one fetch's worth, plus one

	mu       sync.Mutex
	cache    []cachedChunk // at most keep, oldest first
	nextRead int64         // the chunk after the last one read: sequential reads start there
}

type cachedChunk struct {
	n    int64
	data []byte
}

// newChunkReader reads a file of a valid layout (layout.valid).
func newChunkReader(l layout, fetch chunkFetcher, readahead int) *chunkReader {
	readahead = max(readahead, 1)
	keep := readahead + 1
	if l.chunkSize > 0 {
		keep = max(keep, int(min(wholeFetchBytes/l.chunkSize+1, l.chunkCount(), wholeFetchChunks))+1)
	}
	return &chunkReader{layout: l, fetch: fetch, readahead: readahead, keep: keep}
}

// fetchChecked fetches chunks from..to and checks that each is there and of
// the length the layout gives it.
func (r *chunkReader) fetchChecked(ctx context.Context, from, to int64) ([][]byte, error) {
	chunks, err := r.fetch(ctx, from, to)
	if err != nil {
		return nil, err
	}
	if int64(len(chunks)) != to-from+1 {
		return nil, fmt.Errorf("%w: asked for chunks %d..%d, got %d", errCorrupt, from, to, len(chunks))
	}
	for i, data := range chunks {
		if n := from + int64(i); int64(len(data)) != r.layout.chunkLen(n) {
			return nil, fmt.Errorf("%w: chunk %d has %d bytes, expected %d", errCorrupt, n, len(data), r.layout.chunkLen(n))
		}
	}
	return chunks, nil
}

// fetchesAtOpen tells whether the file is small enough to fetch at its
// open (openFetchBytes).
func (r *chunkReader) fetchesAtOpen() bool {
	return r.layout.length > 0 && r.layout.length <= openFetchBytes && r.layout.chunkCount() <= wholeFetchChunks
}

// fetchAll fetches every chunk of a file fetchesAtOpen allows and keeps
// them: its reads then need MongoDB no more.
func (r *chunkReader) fetchAll(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.layout.chunkCount() - 1
	chunks, err := r.fetchChecked(ctx, 0, last)
	if err != nil {
		return err
	}
	for n, data := range chunks {
		r.remember(int64(n), data)
	}
	return nil
}

func (r *chunkReader) cached(n int64) []byte {
	for _, c := range r.cache {
		if c.n == n {
			return c.data
		}
	}
	return nil
}

// remember keeps a chunk, dropping the oldest beyond the bound.
func (r *chunkReader) remember(n int64, data []byte) {
	if r.cached(n) != nil {
		return
	}
	r.cache = append(r.cache, cachedChunk{n, data})
	if excess := len(r.cache) - r.keep; excess > 0 {
		r.cache = append(r.cache[:0], r.cache[excess:]...)
	}
}

// drop forgets the chunks kept (the file was closed).
func (r *chunkReader) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache = nil
}

// ReadAt fills dest from offset off and returns how many bytes it copied:
// fewer than len(dest) only at the end of the file, 0 past it.
func (r *chunkReader) ReadAt(ctx context.Context, dest []byte, off int64) (int, error) {
	first, last, ok := r.layout.span(off, len(dest))
	if !ok {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fetched := map[int64][]byte{}
	// The missing chunks are fetched as one range: from the first missing
	// to the last missing, extended by the read-ahead when sequential.
	missingFrom, missingTo := int64(-1), int64(-1)
	for n := first; n <= last; n++ {
		if r.cached(n) == nil {
			if missingFrom < 0 {
				missingFrom = n
			}
			missingTo = n
		}
	}
	if missingFrom >= 0 {
		if first == r.nextRead || first+1 == r.nextRead {
			lastChunk := r.layout.chunkCount() - 1
			if r.layout.length-missingFrom*r.layout.chunkSize <= wholeFetchBytes &&
				lastChunk-missingFrom < wholeFetchChunks {
				missingTo = lastChunk
			} else {
				missingTo = min(max(missingTo, missingFrom+int64(r.readahead)-1), lastChunk)
			}
		}
		chunks, err := r.fetchChecked(ctx, missingFrom, missingTo)
		if err != nil {
			return 0, err
		}
		for i, data := range chunks {
			fetched[missingFrom+int64(i)] = data
		}
	}
	copied := 0
	for n := first; n <= last; n++ {
		data := fetched[n]
		if data == nil {
			data = r.cached(n)
		}
		start := max(off+int64(copied)-n*r.layout.chunkSize, 0)
		copied += copy(dest[copied:], data[start:])
	}
	// Keep the tail of what was read and fetched (the next read starts there).
	for n := first; n <= missingTo || n <= last; n++ {
		if data := fetched[n]; data != nil {
			r.remember(n, data)
		}
	}
	r.nextRead = last + 1
	return copied, nil
}
