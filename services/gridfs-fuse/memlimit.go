package main

import (
	"strconv"
	"strings"
)

// The Go runtime does not know the container's memory limit: its heap may
// grow to twice what is live before a collection, and at 1000 clients the
// daemon was OOM-killed at the 512 MiB limit once (make overload). Unless
// GOMEMLIMIT is set, the runtime's soft limit is three quarters of the
// cgroup's, the rest left to nginx and the kernel.
const (
	cgroupV2Limit = "/sys/fs/cgroup/memory.max"
	cgroupV1Limit = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
)

// parseCgroupLimit is the limit a cgroup file states, in bytes: 0 for none
// (v2's "max", v1's page-rounded 2^63) or text that is no number.
func parseCgroupLimit(text string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0
	}
	return n
}

// softMemoryLimit is the runtime soft limit to set, 0 for none: when
// GOMEMLIMIT is set the runtime has read it already.
func softMemoryLimit(getenv func(string) string, read func(string) ([]byte, error)) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return 0
	}
	for _, path := range []string{cgroupV2Limit, cgroupV1Limit} {
		if text, err := read(path); err == nil {
			if limit := parseCgroupLimit(string(text)); limit > 0 {
				return limit / 4 * 3
			}
		}
	}
	return 0
}
