package main

import (
	"errors"
	"testing"
)

func TestParseCgroupLimit(t *testing.T) {
	for text, want := range map[string]int64{
		"536870912\n":           536870912,
		"max\n":                 0,
		"9223372036854771712\n": 0, // cgroup v1 without a limit
		"":                      0,
		"-1":                    0,
		"12abc":                 0,
	} {
		if got := parseCgroupLimit(text); got != want {
			t.Errorf("parseCgroupLimit(%q) = %d, want %d", text, got, want)
		}
	}
}

func TestSoftMemoryLimit(t *testing.T) {
	files := func(found map[string]string) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			if text, ok := found[path]; ok {
				return []byte(text), nil
			}
			return nil, errors.New("no such file")
		}
	}
	noEnv := func(string) string { return "" }
	if got := softMemoryLimit(noEnv, files(map[string]string{cgroupV2Limit: "536870912\n"})); got != 402653184 {
		t.Errorf("cgroup v2 512 MiB: %d, want 384 MiB", got)
	}
	if got := softMemoryLimit(noEnv, files(map[string]string{cgroupV2Limit: "max\n", cgroupV1Limit: "536870912\n"})); got != 402653184 {
		t.Errorf("cgroup v1 512 MiB: %d, want 384 MiB", got)
	}
	if got := softMemoryLimit(noEnv, files(map[string]string{cgroupV2Limit: "max\n"})); got != 0 {
		t.Errorf("no limit: %d, want 0", got)
	}
	withEnv := func(name string) string {
		if name == "GOMEMLIMIT" {
			return "100MiB"
		}
		return ""
	}
	if got := softMemoryLimit(withEnv, files(map[string]string{cgroupV2Limit: "536870912\n"})); got != 0 {
		t.Errorf("GOMEMLIMIT set: %d, want 0 (the runtime's own)", got)
	}
}
