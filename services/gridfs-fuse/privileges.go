package main

// The daemon mounts as root (mount(2) needs CAP_SYS_ADMIN), then serves as
// the user FUSE_RUN_AS names: from then on it needs only its /dev/fuse
// descriptor and the network, so a flaw in reading stored data cannot mount,
// chown or open another user's files.

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// identity is the user and group the daemon becomes after its mount.
type identity struct {
	Name     string
	UID, GID int
}

// lookupIdentity resolves FUSE_RUN_AS: a user name or a numeric uid, with
// its primary group from the user database (uid:gid for one it lacks).
func lookupIdentity(spec string) (identity, error) {
	fail := func(cause string) (identity, error) {
		return identity{}, fmt.Errorf("FUSE_RUN_AS=%q: %s", spec, cause)
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	if hasGroup {
		uid, err1 := strconv.Atoi(name)
		gid, err2 := strconv.Atoi(group)
		if err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
			return fail("expected a user name, a uid, or uid:gid, both above 0")
		}
		return identity{Name: spec, UID: uid, GID: gid}, nil
	}
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		u, err = user.LookupId(name)
	}
	if err != nil {
		return fail(fmt.Sprintf("no such user (%v)", err))
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return fail("the user database gives a uid or gid that is not a number")
	}
	if uid == 0 {
		return fail("is root: name an unprivileged user (nobody)")
	}
	return identity{Name: u.Username, UID: uid, GID: gid}, nil
}

// become drops root for id on every thread (Go's setuid is process-wide on
// Linux), then checks that no capability survived the change.
func become(id identity) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(id.GID); err != nil {
		return fmt.Errorf("setgid %d: %w", id.GID, err)
	}
	if err := syscall.Setuid(id.UID); err != nil {
		return fmt.Errorf("setuid %d: %w", id.UID, err)
	}
	caps, err := effectiveCapabilities("/proc/self/status")
	if err != nil {
		return err
	}
	if caps != 0 {
		return fmt.Errorf("capabilities %#x still effective after setuid %d", caps, id.UID)
	}
	return nil
}

// effectiveCapabilities reads the CapEff line of a /proc status file.
func effectiveCapabilities(path string) (uint64, error) {
	status, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(value), 16, 64)
		}
	}
	return 0, fmt.Errorf("%s has no CapEff line", path)
}
