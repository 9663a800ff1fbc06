package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// config is everything the daemon reads from its command line and
// environment; summary() prints it, password removed, so that a run can
// record the caching it measured.
type config struct {
	Mountpoint      string
	MongoURI        string
	Database        string
	Bucket          string
	KernelCache     bool
	AttrTimeout     time.Duration
	EntryTimeout    time.Duration
	MongoTimeout    time.Duration
	ReadaheadChunks int
	// MaxOpenFiles caps the files open at once (FUSE_MAX_OPEN_FILES; see
	// openfiles.go for the arithmetic): an open past it is refused at once,
	// and entrypoint.sh gives nginx the same number as its limit_conn.
	MaxOpenFiles int
	// RequestDeadline is REQUEST_DEADLINE_MS, the lab's bound on a request:
	// files open no longer than it allows (openBudget, admission.go).
	RequestDeadline time.Duration
	// RunAs is the user the daemon becomes once mounted ("": stays as it
	// started; the container sets nobody).
	RunAs string
}

// requestDeadlineMaxMs is the lab's own bound on REQUEST_DEADLINE_MS
// (loadgen/bench/settings.py's REQUEST_DEADLINE_MAX_MS).
const requestDeadlineMaxMs = 600000

const usage = "usage: gridfs-fuse MOUNTPOINT (settings from MONGO_URI, GRIDFS_DB, GRIDFS_BUCKET, " +
	"FUSE_KERNEL_CACHE, FUSE_ATTR_TIMEOUT, FUSE_ENTRY_TIMEOUT, MONGO_TIMEOUT, FUSE_READAHEAD_CHUNKS, FUSE_MAX_OPEN_FILES, REQUEST_DEADLINE_MS, FUSE_RUN_AS)"

// loadConfig reads the settings; an error names the variable and the cause.
func loadConfig(args []string, getenv func(string) string) (config, error) {
	if len(args) != 1 || args[0] == "" || strings.HasPrefix(args[0], "-") {
		return config{}, fmt.Errorf("%s", usage)
	}
	env := func(name, fallback string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return fallback
	}
	c := config{
		Mountpoint: args[0],
		MongoURI:   env("MONGO_URI", "mongodb://mongo:27017"),
		Database:   env("GRIDFS_DB", "lab"),
		Bucket:     env("GRIDFS_BUCKET", "fs"),
		RunAs:      env("FUSE_RUN_AS", ""),
	}
	if !strings.HasPrefix(c.MongoURI, "mongodb://") && !strings.HasPrefix(c.MongoURI, "mongodb+srv://") {
		return c, fmt.Errorf("MONGO_URI=%q: not a mongodb:// or mongodb+srv:// URI", redactURI(c.MongoURI))
	}
	if strings.ContainsAny(c.Database, "/\\. \"$\x00") {
		return c, fmt.Errorf("GRIDFS_DB=%q: not a valid MongoDB database name", c.Database)
	}
	if strings.ContainsAny(c.Bucket, "$\x00") {
		return c, fmt.Errorf("GRIDFS_BUCKET=%q: not a valid GridFS bucket name", c.Bucket)
	}
	switch v := strings.ToLower(env("FUSE_KERNEL_CACHE", "off")); v {
	case "on", "1", "true", "yes":
		c.KernelCache = true
	case "off", "0", "false", "no":
		c.KernelCache = false
	default:
		return c, fmt.Errorf("FUSE_KERNEL_CACHE=%q: expected on or off", v)
	}
	var err error
	if c.AttrTimeout, err = seconds("FUSE_ATTR_TIMEOUT", env("FUSE_ATTR_TIMEOUT", "1"), 0); err != nil {
		return c, err
	}
	if c.EntryTimeout, err = seconds("FUSE_ENTRY_TIMEOUT", env("FUSE_ENTRY_TIMEOUT", "1"), 0); err != nil {
		return c, err
	}
	if c.MongoTimeout, err = seconds("MONGO_TIMEOUT", env("MONGO_TIMEOUT", "2"), 100*time.Millisecond); err != nil {
		return c, err
	}
	n, err := strconv.Atoi(env("FUSE_READAHEAD_CHUNKS", "4"))
	if err != nil || n < 1 || n > 64 {
		return c, fmt.Errorf("FUSE_READAHEAD_CHUNKS=%q: expected a whole number from 1 to 64", getenv("FUSE_READAHEAD_CHUNKS"))
	}
	c.ReadaheadChunks = n
	if c.MaxOpenFiles, err = wholeNumber("FUSE_MAX_OPEN_FILES", env("FUSE_MAX_OPEN_FILES", defaultMaxOpenFiles),
		1, maxOpenFilesLimit); err != nil {
		return c, err
	}
	ms, err := wholeNumber("REQUEST_DEADLINE_MS", env("REQUEST_DEADLINE_MS", "3000"), 1, requestDeadlineMaxMs)
	if err != nil {
		return c, err
	}
	c.RequestDeadline = time.Duration(ms) * time.Millisecond
	return c, nil
}

// wholeNumber parses digits only (no sign, no spaces inside), from lo to hi:
// entrypoint.sh writes FUSE_MAX_OPEN_FILES into nginx's configuration as
// it is, so the daemon accepts only what nginx reads as the same number.
func wholeNumber(name, value string, lo, hi int) (int, error) {
	bad := fmt.Errorf("%s=%q: expected a whole number from %d to %d", name, value, lo, hi)
	if value == "" || len(value) > 9 || strings.Trim(value, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < lo || n > hi {
		return 0, bad
	}
	return n, nil
}

// seconds parses a non-negative number of seconds ("1", "0.5").
func seconds(name, value string, minimum time.Duration) (time.Duration, error) {
	f, err := strconv.ParseFloat(value, 64)
	if err != nil || f < 0 || f > 86400 || time.Duration(f*float64(time.Second)) < minimum {
		return 0, fmt.Errorf("%s=%q: expected seconds from %g to 86400", name, value, minimum.Seconds())
	}
	return time.Duration(f * float64(time.Second)), nil
}

// summary is the one settings line printed at start (JSON, password removed).
func (c config) summary() string {
	cache := "off"
	if c.KernelCache {
		cache = "on"
	}
	out, _ := json.Marshal(map[string]any{
		"mountpoint": c.Mountpoint, "mongo_uri": redactURI(c.MongoURI), "gridfs_db": c.Database,
		"gridfs_bucket": c.Bucket, "fuse_kernel_cache": cache,
		"fuse_attr_timeout_s": c.AttrTimeout.Seconds(), "fuse_entry_timeout_s": c.EntryTimeout.Seconds(),
		"mongo_timeout_s": c.MongoTimeout.Seconds(), "fuse_readahead_chunks": c.ReadaheadChunks,
		"fuse_max_open_files": c.MaxOpenFiles, "request_deadline_ms": c.RequestDeadline.Milliseconds(),
		"fuse_run_as": c.RunAs,
	})
	return string(out)
}

// redactURI replaces the password of a MongoDB URI's user info with "xxxxx".
// It works on the text, since multi-host URIs are not URLs net/url accepts.
func redactURI(uri string) string {
	scheme := strings.Index(uri, "://")
	if scheme < 0 {
		return uri
	}
	rest := uri[scheme+3:]
	hostEnd := strings.IndexAny(rest, "/?")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	at := strings.LastIndex(rest[:hostEnd], "@")
	if at < 0 {
		return uri
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return uri
	}
	return uri[:scheme+3] + user + ":xxxxx" + rest[at:]
}
