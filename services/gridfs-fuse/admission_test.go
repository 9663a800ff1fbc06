package main

import (
	"errors"
	"testing"
	"time"
)

func TestNewWorkIsRefusedWhileACallHasWaitedPastTheBound(t *testing.T) {
	if queueDelayBound(2*time.Second) != 500*time.Millisecond {
		t.Fatalf("bound %v at MONGO_TIMEOUT=2", queueDelayBound(2*time.Second))
	}
	a := &admission{bound: 500 * time.Millisecond}
	now := time.Unix(1000, 0)
	first, err := a.admit(now)
	if err != nil {
		t.Fatalf("nothing under way: %v", err)
	}
	second, err := a.admit(now.Add(400 * time.Millisecond))
	if err != nil {
		t.Fatalf("a call under way for 400 ms: %v", err)
	}
	if _, err := a.admit(now.Add(600 * time.Millisecond)); !errors.Is(err, errBusy) {
		t.Fatalf("a call under way for 600 ms: %v, want errBusy", err)
	}
	if age := a.calls.oldest(now.Add(600 * time.Millisecond)); age != 600*time.Millisecond {
		t.Fatalf("oldest %v, want 600ms (a refusal is not under way)", age)
	}
	first()
	third, err := a.admit(now.Add(600 * time.Millisecond))
	if err != nil {
		t.Fatalf("once the old call ended (the other began 200 ms before): %v", err)
	}
	second()
	third()
	if age := a.calls.oldest(now.Add(time.Hour)); age != 0 {
		t.Fatalf("nothing under way, oldest %v", age)
	}
}
