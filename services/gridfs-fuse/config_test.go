package main

import (
	"strings"
	"testing"
	"time"
)

func env(values map[string]string) func(string) string {
	return func(name string) string { return values[name] }
}

func TestDefaults(t *testing.T) {
	c, err := loadConfig([]string{"/mnt"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.MongoURI != "mongodb://mongo:27017" || c.Database != "lab" || c.Bucket != "fs" || c.KernelCache ||
		c.AttrTimeout != time.Second || c.EntryTimeout != time.Second || c.MongoTimeout != 2*time.Second ||
		c.ReadaheadChunks != 4 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestSettingsLineHasNoPassword(t *testing.T) {
	c, err := loadConfig([]string{"/mnt"}, env(map[string]string{
		"MONGO_URI": "mongodb://lab:s3cret@db1:27017,db2:27017/?authSource=admin", "FUSE_KERNEL_CACHE": "on",
		"FUSE_ATTR_TIMEOUT": "0.5"}))
	if err != nil {
		t.Fatal(err)
	}
	line := c.summary()
	if strings.Contains(line, "s3cret") || !strings.Contains(line, "lab:xxxxx@db1") {
		t.Fatalf("summary: %s", line)
	}
	for _, want := range []string{`"fuse_kernel_cache":"on"`, `"fuse_attr_timeout_s":0.5`, `"fuse_entry_timeout_s":1`} {
		if !strings.Contains(line, want) {
			t.Errorf("summary lacks %s: %s", want, line)
		}
	}
}

func TestRedactURI(t *testing.T) {
	cases := map[string]string{
		"mongodb://mongo:27017":                   "mongodb://mongo:27017",
		"mongodb://user@h/db":                     "mongodb://user@h/db",
		"mongodb://user:p%40ss@h/db?x=a@b":        "mongodb://user:xxxxx@h/db?x=a@b",
		"mongodb+srv://u:p:q@cluster.example/":    "mongodb+srv://u:xxxxx@cluster.example/",
		"mongodb://u:pw@h1:1,h2:2/?replicaSet=rs": "mongodb://u:xxxxx@h1:1,h2:2/?replicaSet=rs",
		"not a uri": "not a uri",
	}
	for in, want := range cases {
		if got := redactURI(in); got != want {
			t.Errorf("redactURI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBadSettingsNameTheVariable(t *testing.T) {
	cases := map[string]map[string]string{
		"MONGO_URI":             {"MONGO_URI": "http://u:secret@x"},
		"GRIDFS_DB":             {"GRIDFS_DB": "a.b"},
		"GRIDFS_BUCKET":         {"GRIDFS_BUCKET": "$fs"},
		"FUSE_KERNEL_CACHE":     {"FUSE_KERNEL_CACHE": "maybe"},
		"FUSE_ATTR_TIMEOUT":     {"FUSE_ATTR_TIMEOUT": "-1"},
		"FUSE_ENTRY_TIMEOUT":    {"FUSE_ENTRY_TIMEOUT": "soon"},
		"MONGO_TIMEOUT":         {"MONGO_TIMEOUT": "0"},
		"FUSE_READAHEAD_CHUNKS": {"FUSE_READAHEAD_CHUNKS": "0"},
	}
	for variable, values := range cases {
		_, err := loadConfig([]string{"/mnt"}, env(values))
		if err == nil || !strings.Contains(err.Error(), variable) {
			t.Errorf("%v: err = %v, want one naming %s", values, err, variable)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	if _, err := loadConfig(nil, env(nil)); err == nil || !strings.Contains(err.Error(), "MOUNTPOINT") {
		t.Errorf("no mount point: err = %v", err)
	}
}

func TestRequestDeadlineSetting(t *testing.T) {
	c, err := loadConfig([]string{"/mnt"}, env(nil))
	if err != nil || c.RequestDeadline != 3*time.Second || !strings.Contains(c.summary(), `"request_deadline_ms":3000`) {
		t.Fatalf("default: %v %v %s", err, c.RequestDeadline, c.summary())
	}
	// make overload's large-file check gives every path LARGE_DEADLINE_MS
	c, err = loadConfig([]string{"/mnt"}, env(map[string]string{"REQUEST_DEADLINE_MS": "300000"}))
	if err != nil || c.RequestDeadline != 300*time.Second {
		t.Fatalf("300000: %v %v", err, c.RequestDeadline)
	}
	for _, value := range []string{"0", "3s", "-1", "600001"} {
		_, err := loadConfig([]string{"/mnt"}, env(map[string]string{"REQUEST_DEADLINE_MS": value}))
		if err == nil || !strings.Contains(err.Error(), "REQUEST_DEADLINE_MS=") {
			t.Errorf("%q: err = %v", value, err)
		}
	}
}
