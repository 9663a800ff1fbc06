package main

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Asks made while a run is under way make one more run, not one each:
// under overload an open comes every few milliseconds, and each drop of the
// page cache waits for the reads under way.
func TestAsksDuringARunMakeOneMoreRun(t *testing.T) {
	var c coalesced
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{}, 200)
	run := func() {
		if runs.Add(1) == 1 {
			close(started)
			<-release // the first run waits, as a drop waits for a read
		}
		done <- struct{}{}
	}
	c.ask(run)
	<-started
	var asking sync.WaitGroup
	for i := 0; i < 100; i++ {
		asking.Add(1)
		go func() { defer asking.Done(); c.ask(run) }()
	}
	asking.Wait()
	close(release)
	<-done
	<-done
	select {
	case <-done:
		t.Fatalf("%d runs for 101 asks, 100 of them during the first run: want 2", runs.Load())
	case <-time.After(100 * time.Millisecond):
	}
	c.ask(run) // idle again: an ask runs at once
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("an ask after the runs ended did not run")
	}
	if runs.Load() != 3 {
		t.Fatalf("%d runs, want 3", runs.Load())
	}
}

// With FUSE_KERNEL_CACHE=off, an open while no read of the file is under
// way answers no flag: the kernel drops the page cache in the open itself,
// and nothing is left for the daemon to drop.
func TestAnOpenWithNoReadUnderWayLetsTheKernelDropTheCache(t *testing.T) {
	f := &gridFile{}
	if flags := f.openFlags(); flags != 0 {
		t.Fatalf("no read under way: flags %#x, want 0", flags)
	}
	if f.drops.asked.Load() != 0 {
		t.Fatal("no read under way: nothing to drop after the open")
	}
}

// An open asks MongoDB nothing for a files document a lookup found within
// FUSE_ENTRY_TIMEOUT while MongoDB answers: nginx waits out an open on its
// event loop, and under load that query waited behind the chunk reads.
func TestAnOpenSkipsTheQueryOnlyForADocumentFoundRecentlyWhileMongoDBAnswers(t *testing.T) {
	root := &gridRoot{store: &store{}, cfg: config{EntryTimeout: time.Second}}
	now := time.Unix(1000, 0)
	const ino = 42
	if root.foundRecently(ino, now) {
		t.Fatal("never looked up")
	}
	root.found.Store(uint64(ino), now.UnixNano())
	if root.foundRecently(ino, now) {
		t.Fatal("MongoDB never answered")
	}
	root.store.answers(now)
	if !root.foundRecently(ino, now.Add(200*time.Millisecond)) {
		t.Fatal("found 200 ms ago, MongoDB answered 200 ms ago")
	}
	if root.foundRecently(ino+1, now) {
		t.Fatal("another inode")
	}
	if root.foundRecently(ino, now.Add(pingInterval)) {
		t.Fatal("MongoDB's last answer is pingInterval old")
	}
	root.store.answers(now.Add(time.Second))
	if root.foundRecently(ino, now.Add(time.Second)) {
		t.Fatal("found FUSE_ENTRY_TIMEOUT ago: the kernel has asked again since, or will")
	}
	root.found.Store(uint64(ino), now.Add(time.Second).UnixNano())
	root.store.down.Store(true)
	if root.foundRecently(ino, now.Add(time.Second)) {
		t.Fatal("MongoDB is known to be down")
	}
}
