package main

import (
	"context"
	"testing"
	"time"
)

// A fetch waits while every slot is taken, gets one as soon as a fetch
// gives it back, and gives up after its wait or when its read is
// interrupted.
func TestAFetchWaitsForASlotUntilItsWaitEnds(t *testing.T) {
	slots := newFetchSlots(2)
	ctx := context.Background()
	if !slots.take(ctx, 0) || !slots.take(ctx, 0) {
		t.Fatal("two free slots: both taken at once")
	}
	began := time.Now()
	if slots.take(ctx, 50*time.Millisecond) {
		t.Fatal("a third slot out of two")
	}
	if waited := time.Since(began); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before its wait of 50ms", waited)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		slots.put()
	}()
	if !slots.take(ctx, 5*time.Second) {
		t.Fatal("a slot given back was not taken")
	}
	interrupted, cancel := context.WithCancel(ctx)
	cancel()
	if slots.take(interrupted, 5*time.Second) {
		t.Fatal("an interrupted read took a slot none gave back")
	}
}
