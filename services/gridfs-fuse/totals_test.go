package main

import (
	"encoding/json"
	"sync"
	"testing"
)

func TestTotalsCountReadsFetchesAndTheLargestRead(t *testing.T) {
	var tl totals
	var wg sync.WaitGroup
	for size := 1; size <= 100; size++ {
		wg.Add(1)
		go func() { defer wg.Done(); tl.read(size << 10) }()
	}
	wg.Wait()
	tl.fetched(4)
	tl.fetched(1)
	tl.closed.Add(1)
	var got map[string]int64
	if err := json.Unmarshal([]byte(tl.line()), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"reads": 100, "read_bytes": 5050 << 10, "largest_read": 100 << 10,
		"chunk_fetches": 2, "chunks_fetched": 5, "files_closed": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (%s)", k, got[k], v, tl.line())
		}
	}
}
