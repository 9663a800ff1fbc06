package main

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"testing"
)

// pattern holds byte p%251 at every p, so that chunk n of any layout is a
// slice of it (from n*chunkSize%251) and a read's bytes are checkable
// without allocating the file.
var pattern = sync.OnceValue(func() []byte {
	b := make([]byte, maxChunkSize+251)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
})

// validByTheRules is valid() computed apart, in big integers: GridFS's
// limits as the nginx module states them.
func validByTheRules(length, chunkSize int64) bool {
	if length < 0 || chunkSize < 0 || chunkSize > maxChunkSize {
		return false
	}
	if length == 0 {
		return true
	}
	most := new(big.Int).Mul(big.NewInt(chunkSize), big.NewInt(maxChunks))
	return chunkSize > 0 && big.NewInt(length).Cmp(most) <= 0
}

// Lies a fetcher tells, as a damaged GridFS file would.
const (
	truthful = iota
	shortChunk
	longChunk
	missingChunk
	lies
)

// FuzzChunkArithmetic: any files document's length and chunkSize, a read
// at any offset and size, and chunks that may lie. valid() agrees with the
// rules; on a valid layout the chunk arithmetic holds, a read returns the
// file's bytes or, when a chunk it needs lies, errCorrupt, and no fetch
// asks for a chunk outside the file; nothing panics on any layout (the
// lying 2^63-1 length did: "makeslice: cap out of range").
func FuzzChunkArithmetic(f *testing.F) {
	f.Add(int64(1<<63-1), int64(255*1024), int64(0), uint32(128*1024), uint8(truthful), int64(0))
	f.Add(int64(1<<20), int64(255*1024), int64(0), uint32(128*1024), uint8(truthful), int64(0))
	f.Add(int64(1<<20), int64(255*1024), int64(300*1024), uint32(4096), uint8(shortChunk), int64(1))
	f.Add(int64(10), int64(4), int64(0), uint32(10), uint8(missingChunk), int64(2))
	f.Add(int64(10), int64(0), int64(0), uint32(10), uint8(truthful), int64(0))
	f.Add(int64(1000), int64(1), int64(3), uint32(500), uint8(longChunk), int64(7))
	f.Add(int64(maxChunkSize)*maxChunks, int64(maxChunkSize), int64(maxChunkSize)*maxChunks-1, uint32(1),
		uint8(truthful), int64(0))
	f.Add(int64(maxChunks)+1, int64(1), int64(0), uint32(1), uint8(truthful), int64(0))
	f.Fuzz(func(t *testing.T, length, chunkSize, off int64, size uint32, lie uint8, lieChunk int64) {
		l := layout{length, chunkSize}
		valid := l.valid() == nil
		if valid != validByTheRules(length, chunkSize) {
			t.Fatalf("%+v: valid() = %v, the rules say %v", l, valid, !valid)
		}
		count := l.chunkCount()
		first, last, ok := l.span(off, int(size))
		if !valid {
			return // total functions: called above on any layout, none panicked
		}
		if count > maxChunks || count < 0 {
			t.Fatalf("%+v: %d chunks", l, count)
		}
		if length > 0 {
			if lastLen := l.chunkLen(count - 1); lastLen < 1 || lastLen > chunkSize ||
				(count-1)*chunkSize+lastLen != length {
				t.Fatalf("%+v: %d chunks, the last of %d bytes", l, count, lastLen)
			}
			if l.chunkLen(0) != min(chunkSize, length) {
				t.Fatalf("%+v: chunk 0 of %d bytes", l, l.chunkLen(0))
			}
		}
		if l.chunkLen(count) != 0 || l.chunkLen(-1) != 0 {
			t.Fatalf("%+v: a chunk outside the file has bytes", l)
		}
		if want := off >= 0 && off < length && size > 0; ok != want {
			t.Fatalf("%+v: span(%d, %d) ok = %v", l, off, size, ok)
		}
		if !ok {
			return
		}
		end := min(length, off+int64(size)) // off < length < 2^55: no overflow
		if first < 0 || first > last || last >= count || first*chunkSize > off || (last+1)*chunkSize < end ||
			last*chunkSize >= end {
			t.Fatalf("%+v: span(%d, %d) = %d..%d of %d chunks", l, off, size, first, last, count)
		}

		// A read, of at most 256 KiB (the kernel reads up to 1 MiB; smaller keeps
		// each input quick), through a reader whose chunks may lie.
		dest := make([]byte, min(int(size), 256<<10))
		end = min(length, off+int64(len(dest)))
		lie %= lies
		lied := false
		fetch := func(ctx context.Context, from, to int64) ([][]byte, error) {
			if from < 0 || from > to || to >= count {
				t.Fatalf("%+v: fetch of chunks %d..%d of %d", l, from, to, count)
			}
			var out [][]byte
			for n := from; n <= to; n++ {
				start := n * chunkSize % 251
				data := pattern()[start : start+l.chunkLen(n)]
				if n == lieChunk && lie != truthful {
					lied = true
					switch lie {
					case shortChunk:
						data = data[:len(data)-1]
					case longChunk:
						data = pattern()[start : start+int64(len(data))+1]
					case missingChunk:
						continue
					}
				}
				out = append(out, data)
			}
			return out, nil
		}
		r := newChunkReader(l, fetch, 4)
		n, err := r.ReadAt(context.Background(), dest, off)
		if lied {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("%+v: a lying chunk %d read as %d bytes, %v", l, lieChunk, n, err)
			}
			return
		}
		if err != nil || int64(n) != end-off {
			t.Fatalf("%+v: ReadAt(%d, %d) = %d, %v; want %d bytes", l, off, len(dest), n, err, end-off)
		}
		for i, b := range dest[:n] {
			if want := byte((off + int64(i)) % 251); b != want {
				t.Fatalf("%+v: byte %d is %d, want %d", l, off+int64(i), b, want)
			}
		}
	})
}
