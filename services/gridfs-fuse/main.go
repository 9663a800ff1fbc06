// gridfs-fuse mounts one GridFS bucket as a read-only directory: one file
// per filename (its newest revision), read chunk by chunk on demand.
package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	logger := log.New(os.Stderr, "gridfs-fuse: ", log.LstdFlags)
	cfg, err := loadConfig(os.Args[1:], os.Getenv)
	if err != nil {
		logger.Printf("configuration: %v", err)
		os.Exit(2)
	}
	logger.Printf("settings %s", cfg.summary())
	if limit := softMemoryLimit(os.Getenv, os.ReadFile); limit > 0 {
		debug.SetMemoryLimit(limit)
		logger.Printf("memory: the Go runtime's soft limit is %d MiB, three quarters of the container's", limit>>20)
	}
	st, err := openStore(cfg, logger)
	if err != nil {
		logger.Printf("configuration: %v", err)
		os.Exit(2)
	}
	var runAs identity
	if cfg.RunAs != "" {
		if runAs, err = lookupIdentity(cfg.RunAs); err != nil {
			logger.Printf("configuration: %v", err)
			os.Exit(2)
		}
	}
	root := &gridRoot{store: st, cfg: cfg, mounted: time.Now(), logger: logger, open: newOpenFiles(cfg.MaxOpenFiles),
		budget: openBudget{budget: openTimeBudget(cfg.RequestDeadline)},
		gate:   admission{bound: queueDelayBound(cfg.MongoTimeout)}, fetches: newFetchSlots(readFetchSlots)}
	negative := cfg.EntryTimeout
	server, err := fs.Mount(cfg.Mountpoint, root, &fs.Options{
		EntryTimeout:    &cfg.EntryTimeout,
		AttrTimeout:     &cfg.AttrTimeout,
		NegativeTimeout: &negative,
		MountOptions: fuse.MountOptions{
			FsName: fmt.Sprintf("gridfs:%s.%s", cfg.Database, cfg.Bucket),
			Name:   "gridfs",
			// nginx's workers are not root.
			AllowOther: true,
			Options:    []string{"ro"},
			// As root (the container, the tests) mount(2) directly; else fusermount3.
			DirectMount: true,
			// Reads of up to 1 MiB: fewer kernel round trips per file.
			MaxWrite:      1 << 20,
			MaxReadAhead:  1 << 20,
			DisableXAttrs: true,
		},
	})
	if err != nil {
		// In a container FUSE needs the device, CAP_SYS_ADMIN and, under
		// AppArmor, an unconfined profile.
		logger.Printf("mount %s: %v (a container needs devices [/dev/fuse], cap_add [SYS_ADMIN] "+
			"and security_opt [apparmor:unconfined])", cfg.Mountpoint, err)
		os.Exit(1)
	}
	logger.Printf("mounted GridFS %s.%s on %s", cfg.Database, cfg.Bucket, cfg.Mountpoint)
	if cfg.RunAs != "" {
		if err := become(runAs); err != nil {
			logger.Printf("dropping root for FUSE_RUN_AS=%s: %v", cfg.RunAs, err)
			server.Unmount()
			os.Exit(1)
		}
		logger.Printf("serving as %s (uid %d, gid %d), no capabilities", runAs.Name, runAs.UID, runAs.GID)
	}

	counts := make(chan os.Signal, 1)
	signal.Notify(counts, syscall.SIGUSR1)
	go func() {
		for range counts {
			logger.Printf("totals: %s", root.totals.line())
		}
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-signals
		if cfg.RunAs != "" {
			// No longer allowed to unmount: the mount ends with its mount
			// namespace (the container), or its owner unmounts it.
			logger.Printf("%v: exiting; %s stays mounted until its owner unmounts it", sig, cfg.Mountpoint)
			os.Exit(0)
		}
		logger.Printf("%v: unmounting %s", sig, cfg.Mountpoint)
		if err := server.Unmount(); err != nil {
			// Busy (a reader still has a file open): detach now, the
			// kernel finishes when the last file is closed.
			logger.Printf("unmount: %v; detaching", err)
			if err := syscall.Unmount(cfg.Mountpoint, syscall.MNT_DETACH); err != nil {
				logger.Printf("detach: %v", err)
				os.Exit(1)
			}
		}
	}()
	server.Wait()
	logger.Printf("unmounted %s", cfg.Mountpoint)
}
