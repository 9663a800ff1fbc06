package main

import (
	"strings"
	"unicode/utf8"
)

// nameMax is Linux's NAME_MAX: longer names cannot be opened by path.
const nameMax = 255

// invalidName says why a GridFS filename cannot be a file name in the
// mount, or "" when it can. Such files are skipped (and logged), never served.
func invalidName(name string) string {
	switch {
	case name == "":
		return "the name is empty"
	case name == "." || name == "..":
		return "the name is . or .."
	case strings.ContainsRune(name, '/'):
		return "the name contains '/'"
	case strings.ContainsRune(name, 0):
		return "the name contains NUL"
	case len(name) > nameMax:
		return "the name is longer than 255 bytes"
	case !utf8.ValidString(name):
		return "the name is not UTF-8"
	}
	return ""
}
