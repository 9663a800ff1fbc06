package main

import (
	"strings"
	"testing"
)

func TestInvalidNames(t *testing.T) {
	bad := []string{"", ".", "..", "a/b", "/", "../etc/passwd", "a\x00b", strings.Repeat("a", 256), "\xff\xfe"}
	for _, name := range bad {
		if invalidName(name) == "" {
			t.Errorf("%q accepted", name)
		}
	}
	good := []string{"1KB.bin", "...", ".hidden", "a b", "é.txt", "a\\b", "\r\nX-Injected: 1", strings.Repeat("a", 255)}
	for _, name := range good {
		if why := invalidName(name); why != "" {
			t.Errorf("%q refused: %s", name, why)
		}
	}
}
