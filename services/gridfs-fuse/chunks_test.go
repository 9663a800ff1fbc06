package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"testing"
)

const defaultChunk = 255 * 1024

func TestChunkCountAndLengths(t *testing.T) {
	cases := []struct {
		length, chunkSize, count, lastLen int64
	}{
		{0, defaultChunk, 0, 0},
		{1, defaultChunk, 1, 1},
		{defaultChunk - 1, defaultChunk, 1, defaultChunk - 1},
		{defaultChunk, defaultChunk, 1, defaultChunk},
		{defaultChunk + 1, defaultChunk, 2, 1},
		{1 << 20, defaultChunk, 5, 1<<20 - 4*defaultChunk},
		{10, 3, 4, 1},
	}
	for _, c := range cases {
		l := layout{c.length, c.chunkSize}
		if got := l.chunkCount(); got != c.count {
			t.Errorf("%+v: chunkCount = %d, want %d", l, got, c.count)
		}
		if c.count > 0 {
			if got := l.chunkLen(c.count - 1); got != c.lastLen {
				t.Errorf("%+v: last chunk length = %d, want %d", l, got, c.lastLen)
			}
			if c.count > 1 && l.chunkLen(0) != c.chunkSize {
				t.Errorf("%+v: first chunk length = %d, want %d", l, l.chunkLen(0), c.chunkSize)
			}
		}
		if l.chunkLen(c.count) != 0 || l.chunkLen(-1) != 0 {
			t.Errorf("%+v: chunks outside the file must have length 0", l)
		}
	}
}

func TestSpan(t *testing.T) {
	l := layout{length: 3*defaultChunk + 10, chunkSize: defaultChunk}
	cases := []struct {
		off         int64
		size        int
		first, last int64
		ok          bool
	}{
		{0, 1, 0, 0, true},
		{0, defaultChunk, 0, 0, true},
		{0, defaultChunk + 1, 0, 1, true},
		{defaultChunk - 1, 2, 0, 1, true},                  // across the first boundary
		{defaultChunk, defaultChunk, 1, 1, true},           // exactly chunk 1
		{defaultChunk - 1, 2*defaultChunk + 2, 0, 3, true}, // four chunks
		{3 * defaultChunk, 1 << 20, 3, 3, true},            // clipped to the short last chunk
		{3*defaultChunk + 9, 100, 3, 3, true},              // the last byte
		{3*defaultChunk + 10, 1, 0, 0, false},              // at the length
		{1 << 30, 4096, 0, 0, false},                       // far past the end
		{0, 0, 0, 0, false},                                // nothing asked
		{-1, 10, 0, 0, false},
	}
	for _, c := range cases {
		first, last, ok := l.span(c.off, c.size)
		if ok != c.ok || ok && (first != c.first || last != c.last) {
			t.Errorf("span(%d, %d) = %d, %d, %v; want %d, %d, %v", c.off, c.size, first, last, ok, c.first, c.last, c.ok)
		}
	}
	if _, _, ok := (layout{0, defaultChunk}).span(0, 4096); ok {
		t.Error("a zero-length file has nothing to read")
	}
}

func TestLayoutValid(t *testing.T) {
	for _, l := range []layout{{-1, defaultChunk}, {10, 0}, {10, -5}, {10, maxChunkSize + 1}, {1<<63 - 1, defaultChunk},
		{maxChunks + 1, 1}} {
		if l.valid() == nil {
			t.Errorf("%+v accepted", l)
		}
	}
	for _, l := range []layout{{0, 0}, {10, 1}, {1 << 40, defaultChunk}} {
		if err := l.valid(); err != nil {
			t.Errorf("%+v refused: %v", l, err)
		}
	}
}

// memoryChunks serves a byte slice as GridFS chunks and records each fetch.
type memoryChunks struct {
	data      []byte
	chunkSize int64
	fetches   [][2]int64
}

func (m *memoryChunks) fetch(ctx context.Context, first, last int64) ([][]byte, error) {
	m.fetches = append(m.fetches, [2]int64{first, last})
	var out [][]byte
	for n := first; n <= last; n++ {
		start := n * m.chunkSize
		if start >= int64(len(m.data)) {
			break // as MongoDB would: no such chunk
		}
		out = append(out, m.data[start:min(start+m.chunkSize, int64(len(m.data)))])
	}
	return out, nil
}

func newTestReader(data []byte, chunkSize int64, readahead int) (*chunkReader, *memoryChunks) {
	m := &memoryChunks{data: data, chunkSize: chunkSize}
	return newChunkReader(layout{int64(len(data)), chunkSize}, m.fetch, readahead), m
}

func TestReadsMatchTheBytesAtAnyOffset(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, size := range []int{0, 1, 1023, defaultChunk - 1, defaultChunk, defaultChunk + 1, 5*defaultChunk + 77} {
		data := make([]byte, size)
		rng.Read(data)
		for _, readahead := range []int{1, 4} {
			r, _ := newTestReader(data, defaultChunk, readahead)
			for i := 0; i < 200; i++ {
				off := rng.Int63n(int64(size) + 10)
				buf := make([]byte, rng.Intn(3*defaultChunk)+1)
				n, err := r.ReadAt(context.Background(), buf, off)
				if err != nil {
					t.Fatalf("size %d: ReadAt(%d, %d): %v", size, off, len(buf), err)
				}
				want := []byte{}
				if off < int64(size) {
					want = data[off:min(off+int64(len(buf)), int64(size))]
				}
				if !bytes.Equal(buf[:n], want) {
					t.Fatalf("size %d readahead %d: ReadAt(%d, %d) returned %d bytes, want %d (or different bytes)",
						size, readahead, off, len(buf), n, len(want))
				}
			}
		}
	}
}

func TestZeroLengthFileFetchesNothing(t *testing.T) {
	r, m := newTestReader(nil, defaultChunk, 4)
	for _, off := range []int64{0, 1, 1 << 20} {
		if n, err := r.ReadAt(context.Background(), make([]byte, 4096), off); n != 0 || err != nil {
			t.Fatalf("ReadAt(%d) = %d, %v", off, n, err)
		}
	}
	if len(m.fetches) != 0 {
		t.Fatalf("an empty file fetched %v", m.fetches)
	}
}

func TestReadPastTheEndFetchesNothing(t *testing.T) {
	r, m := newTestReader(make([]byte, 1000), defaultChunk, 4)
	for _, off := range []int64{1000, 1001, 1 << 40} {
		if n, err := r.ReadAt(context.Background(), make([]byte, 10), off); n != 0 || err != nil {
			t.Fatalf("ReadAt(%d) = %d, %v", off, n, err)
		}
	}
	if len(m.fetches) != 0 {
		t.Fatalf("fetched %v past the end", m.fetches)
	}
}

func TestRandomReadFetchesOnlyItsChunk(t *testing.T) {
	data := make([]byte, 1<<20) // 5 chunks
	rand.New(rand.NewSource(2)).Read(data)
	r, m := newTestReader(data, defaultChunk, 4)
	buf := make([]byte, 4096)
	off := int64(900 * 1024) // in chunk 3
	if n, err := r.ReadAt(context.Background(), buf, off); err != nil || n != 4096 || !bytes.Equal(buf, data[off:off+4096]) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if len(m.fetches) != 1 || m.fetches[0] != [2]int64{3, 3} {
		t.Fatalf("a 4 KiB read at 900 KiB fetched %v, want only chunk 3", m.fetches)
	}
	// Again in the same chunk: from the cache.
	if _, err := r.ReadAt(context.Background(), buf, off+8192); err != nil || len(m.fetches) != 1 {
		t.Fatalf("second read in chunk 3 fetched again: %v (%v)", m.fetches, err)
	}
}

func TestSequentialReadsFetchAheadWithinTheBound(t *testing.T) {
	data := make([]byte, 21*defaultChunk-5)
	rand.New(rand.NewSource(3)).Read(data)
	r, m := newTestReader(data, defaultChunk, 4)
	var got []byte
	buf := make([]byte, 128*1024) // the kernel's read size
	for off := int64(0); ; {
		n, err := r.ReadAt(context.Background(), buf, off)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		got = append(got, buf[:n]...)
		off += int64(n)
		if len(r.cache) > r.keep || r.keep != 7 {
			t.Fatalf("cache holds %d chunks, bound %d; want at most 7 (the 6 chunks of 1.25 MiB, plus one)",
				len(r.cache), r.keep)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("sequential read differs from the data")
	}
	// The last 5 chunks are 5 bytes short of 1.25 MiB: one fetch.
	want := [][2]int64{{0, 3}, {4, 7}, {8, 11}, {12, 15}, {16, 20}}
	if len(m.fetches) != len(want) {
		t.Fatalf("fetches %v, want %v", m.fetches, want)
	}
	for i := range want {
		if m.fetches[i] != want[i] {
			t.Fatalf("fetches %v, want %v", m.fetches, want)
		}
	}
}

func TestAFileOfUpTo1Point25MiBIsOneFetch(t *testing.T) {
	for _, size := range []int{1000 * 1000, 1 << 20, wholeFetchBytes} {
		data := make([]byte, size)
		rand.New(rand.NewSource(4)).Read(data)
		r, m := newTestReader(data, defaultChunk, 4)
		var got []byte
		buf := make([]byte, 128*1024) // the kernel's read size
		for off := int64(0); off < int64(size); {
			n, err := r.ReadAt(context.Background(), buf, off)
			if err != nil || n == 0 {
				t.Fatalf("size %d: ReadAt(%d) = %d, %v", size, off, n, err)
			}
			got = append(got, buf[:n]...)
			off += int64(n)
		}
		last := (int64(size) - 1) / defaultChunk
		if !bytes.Equal(got, data) || len(m.fetches) != 1 || m.fetches[0] != [2]int64{0, last} {
			t.Fatalf("size %d: fetches %v, want one of chunks 0..%d (bytes equal: %v)",
				size, m.fetches, last, bytes.Equal(got, data))
		}
	}
	// One byte more: the read-ahead's 4 chunks, then the rest.
	r, m := newTestReader(make([]byte, wholeFetchBytes+1), defaultChunk, 4)
	for off := int64(0); off <= wholeFetchBytes; off += 128 * 1024 {
		if _, err := r.ReadAt(context.Background(), make([]byte, 128*1024), off); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.fetches) != 2 || m.fetches[0] != [2]int64{0, 3} || m.fetches[1] != [2]int64{4, 5} {
		t.Fatalf("1.25 MiB + 1: fetches %v, want [0 3] [4 5]", m.fetches)
	}
}

func TestMissingOrShortChunksAreErrors(t *testing.T) {
	data := make([]byte, 3*defaultChunk)
	// The files document claims one more chunk than is stored.
	m := &memoryChunks{data: data, chunkSize: defaultChunk}
	r := newChunkReader(layout{int64(len(data)) + 10, defaultChunk}, m.fetch, 4)
	if _, err := r.ReadAt(context.Background(), make([]byte, 20), int64(len(data))); !errors.Is(err, errCorrupt) {
		t.Fatalf("missing last chunk: err = %v, want errCorrupt", err)
	}
	// A chunk shorter than chunkSize that is not the last.
	short := func(ctx context.Context, first, last int64) ([][]byte, error) {
		return [][]byte{make([]byte, 100)}, nil
	}
	r = newChunkReader(layout{2 * defaultChunk, defaultChunk}, short, 1)
	if _, err := r.ReadAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, errCorrupt) {
		t.Fatalf("short chunk: err = %v, want errCorrupt", err)
	}
}

func TestFetchErrorsReachTheCaller(t *testing.T) {
	down := func(ctx context.Context, first, last int64) ([][]byte, error) { return nil, errUnavailable }
	r := newChunkReader(layout{10, defaultChunk}, down, 4)
	if _, err := r.ReadAt(context.Background(), make([]byte, 1), 0); !errors.Is(err, errUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

func TestASmallFileIsFetchedWholeAtOpenAndReadWithoutAFetch(t *testing.T) {
	data := []byte("aaaabbbbcc")
	r, m := newTestReader(data, 4, 4)
	if !r.fetchesAtOpen() {
		t.Fatal("a 10-byte file is fetched at its open")
	}
	if err := r.fetchAll(context.Background()); err != nil || len(m.fetches) != 1 || m.fetches[0] != [2]int64{0, 2} {
		t.Fatalf("fetchAll: %v, fetches %v", err, m.fetches)
	}
	buf := make([]byte, 128*1024)
	if n, err := r.ReadAt(context.Background(), buf, 0); err != nil || !bytes.Equal(buf[:n], data) || len(m.fetches) != 1 {
		t.Fatalf("ReadAt = %q, %v; fetches %v", buf[:n], err, m.fetches)
	}
	for _, l := range []layout{{0, defaultChunk}, {openFetchBytes + 1, defaultChunk}, {1024, 1}} {
		if newChunkReader(l, m.fetch, 4).fetchesAtOpen() {
			t.Errorf("%+v is not fetched at its open (empty, too large, too many chunks)", l)
		}
	}
	short := &memoryChunks{data: data[:9], chunkSize: 4}
	if err := newChunkReader(layout{10, 4}, short.fetch, 4).fetchAll(context.Background()); !errors.Is(err, errCorrupt) {
		t.Fatalf("a short last chunk at the open: %v, want errCorrupt", err)
	}
}

func TestAFileOfTinyChunksIsNotFetchedWholeAtOnce(t *testing.T) {
	data := make([]byte, 100*1024)
	r, m := newTestReader(data, 1, 4) // 102400 chunks of 1 byte
	if _, err := r.ReadAt(context.Background(), make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if len(m.fetches) != 1 || m.fetches[0] != [2]int64{0, 4095} || r.keep > wholeFetchChunks+1 {
		t.Fatalf("fetches %v, keep %d: want only the read's 4096 chunks, a bounded cache", m.fetches, r.keep)
	}
}
