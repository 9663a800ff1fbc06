package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunAsResolvesANameAUidAndAPair(t *testing.T) {
	byName, err := lookupIdentity("nobody")
	if err != nil {
		t.Fatal(err)
	}
	if byName.UID == 0 || byName.GID == 0 {
		t.Fatalf("nobody resolved to %+v", byName)
	}
	pair, err := lookupIdentity("10001:10002")
	if err != nil || pair.UID != 10001 || pair.GID != 10002 {
		t.Fatalf("10001:10002 resolved to %+v, %v", pair, err)
	}
}

func TestRunAsRefusesRootAndNonsense(t *testing.T) {
	for _, spec := range []string{"root", "0", "0:0", "no-such-user-here", "1:x", "-1:5"} {
		_, err := lookupIdentity(spec)
		if err == nil || !strings.Contains(err.Error(), "FUSE_RUN_AS=") {
			t.Errorf("FUSE_RUN_AS=%q: want an error naming the variable, got %v", spec, err)
		}
	}
}

func TestEffectiveCapabilitiesReadsTheStatusLine(t *testing.T) {
	status := filepath.Join(t.TempDir(), "status")
	os.WriteFile(status, []byte("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t0000000000200000\n"), 0o600)
	if caps, err := effectiveCapabilities(status); err != nil || caps != 1<<21 {
		t.Fatalf("CapEff: %#x, %v", caps, err)
	}
	os.WriteFile(status, []byte("Name:\tx\n"), 0o600)
	if _, err := effectiveCapabilities(status); err == nil {
		t.Fatal("a status with no CapEff line was accepted")
	}
}
