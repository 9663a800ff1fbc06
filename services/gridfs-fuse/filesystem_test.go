package main

import (
	"testing"
	"time"
)

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
