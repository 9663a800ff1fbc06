package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestOpenFilesRefusesPastItsCapAndTakesBackAPlaceGiven(t *testing.T) {
	o := newOpenFiles(2)
	if !o.take() || !o.take() {
		t.Fatal("the first two opens must be let through")
	}
	if o.take() {
		t.Fatal("a third open must be refused at once")
	}
	o.put()
	if !o.take() {
		t.Fatal("once a file is closed the next open must be let through")
	}
	if o.open() != 2 {
		t.Fatalf("open = %d, want 2", o.open())
	}
}

func TestOpenFilesNeverExceedsItsCapUnderContention(t *testing.T) {
	const max, workers, rounds = 8, 64, 2000
	o := newOpenFiles(max)
	var peak, took atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if o.take() {
					took.Add(1)
					if n := o.open(); n > peak.Load() {
						peak.Store(n)
					}
					o.put()
				}
			}
		}()
	}
	wg.Wait()
	if peak.Load() > max || o.open() != 0 || took.Load() == 0 {
		t.Fatalf("peak %d (cap %d), %d open after, %d taken", peak.Load(), max, o.open(), took.Load())
	}
}

func TestRefusalsAreLoggedAtMostOncePerInterval(t *testing.T) {
	o := newOpenFiles(1)
	o.take()
	now := time.Unix(1000, 0)
	o.take()
	if n := o.refusalsToLog(now); n != 1 {
		t.Fatalf("the first refusal is logged: got %d", n)
	}
	o.take()
	o.take()
	if n := o.refusalsToLog(now.Add(refusalLogInterval / 2)); n != 0 {
		t.Fatalf("a line within the interval: got %d", n)
	}
	if n := o.refusalsToLog(now.Add(refusalLogInterval)); n != 2 {
		t.Fatalf("the next line counts the refusals since the last: got %d", n)
	}
}

// A released handle gives its place back once, however often the kernel
// says so, and keeps no chunk: go-fuse keeps it in its table until the slot
// is reused.
func TestReleaseGivesThePlaceBackAndDropsTheChunks(t *testing.T) {
	root := &gridRoot{open: newOpenFiles(1)}
	data := bytes.Repeat([]byte("x"), 3*defaultChunk)
	reader, _ := newTestReader(data, defaultChunk, 4)
	if !root.open.take() {
		t.Fatal("take")
	}
	h := &fileHandle{file: &gridFile{root: root}, reader: reader}
	buf := make([]byte, 4096)
	if _, err := h.reader.ReadAt(context.Background(), buf, 0); err != nil {
		t.Fatal(err)
	}
	if len(h.reader.cache) == 0 {
		t.Fatal("a read keeps the chunks it fetched")
	}
	h.Release(context.Background())
	h.Release(context.Background())
	if len(h.reader.cache) != 0 {
		t.Fatalf("%d chunks kept after release", len(h.reader.cache))
	}
	if root.open.open() != 0 || !root.open.take() || root.open.take() {
		t.Fatalf("the place must come back exactly once: %d open", root.open.open())
	}
}

func TestMaxOpenFilesSetting(t *testing.T) {
	c, err := loadConfig([]string{"/mnt"}, env(nil))
	if err != nil || c.MaxOpenFiles != 128 || !strings.Contains(c.summary(), `"fuse_max_open_files":128`) {
		t.Fatalf("default: %v %d %s", err, c.MaxOpenFiles, c.summary())
	}
	for value, want := range map[string]int{"1": 1, " 64 ": 64, "65535": 65535} {
		c, err := loadConfig([]string{"/mnt"}, env(map[string]string{"FUSE_MAX_OPEN_FILES": value}))
		if err != nil || c.MaxOpenFiles != want {
			t.Errorf("%q: %v, %d", value, err, c.MaxOpenFiles)
		}
	}
	// nginx reads the value as written (entrypoint.sh): digits only.
	for _, value := range []string{"0", "-1", "+5", "1e3", "0x10", "65536", "12 3", "many", "99999999999"} {
		_, err := loadConfig([]string{"/mnt"}, env(map[string]string{"FUSE_MAX_OPEN_FILES": value}))
		if err == nil || !strings.Contains(err.Error(), "FUSE_MAX_OPEN_FILES=") ||
			!strings.Contains(err.Error(), "from 1 to 65535") {
			t.Errorf("%q: err = %v", value, err)
		}
	}
}
