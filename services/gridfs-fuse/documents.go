package main

import (
	"bytes"
	"fmt"
	"math"

	"go.mongodb.org/mongo-driver/bson"
)

// Files documents and chunks as MongoDB returns them are untrusted input:
// each field is checked for its BSON type and GridFS's limits before it is
// used, as the nginx module checks them (ngx_http_gridfs_integer,
// ngx_http_gridfs_check_file, ngx_http_gridfs_chunk_part). The driver's own
// decoding would not do: it reads a string as a chunk's bytes, and a double
// length past 2^63 as whatever the conversion gives. A document that
// breaks a rule is errCorrupt: the same document on every retry, so nginx
// answers 500, never 503.

// maxExactInteger: every integer up to 2^53 is a double exactly.
const maxExactInteger = 1 << 53

// integer reads a stored number: an int32, an int64, or a double that
// holds an integer exactly (some drivers store lengths as doubles).
func integer(v bson.RawValue) (int64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		i, ok := v.Int32OK()
		return int64(i), ok
	case bson.TypeInt64:
		return v.Int64OK()
	case bson.TypeDouble:
		d, ok := v.DoubleOK()
		// false for NaN too
		if !ok || !(d >= -maxExactInteger && d <= maxExactInteger) || d != math.Trunc(d) {
			return 0, false
		}
		return int64(d), true
	}
	return 0, false
}

// parseFileInfo reads a files document (its _id, filename, length,
// chunkSize and uploadDate) and checks its layout.
func parseFileInfo(doc bson.Raw) (fileInfo, error) {
	var info fileInfo
	id, err := doc.LookupErr("_id")
	if err != nil {
		return info, fmt.Errorf("%w: a files document without _id", errCorrupt)
	}
	info.ID = id
	bad := func(what string) error {
		return fmt.Errorf("%w: files document %s: %s", errCorrupt, id, what)
	}
	var ok bool
	if info.Name, ok = doc.Lookup("filename").StringValueOK(); !ok {
		return info, bad("filename is not a string")
	}
	if info.Length, ok = integer(doc.Lookup("length")); !ok {
		return info, bad(fmt.Sprintf("length %s is not an integer", doc.Lookup("length")))
	}
	if info.ChunkSize, ok = integer(doc.Lookup("chunkSize")); !ok {
		return info, bad(fmt.Sprintf("chunkSize %s is not an integer", doc.Lookup("chunkSize")))
	}
	if info.UploadDate, ok = doc.Lookup("uploadDate").TimeOK(); !ok {
		return info, bad("uploadDate is not a date")
	}
	if err := info.layout().valid(); err != nil {
		return info, bad(err.Error())
	}
	return info, nil
}

// chunkData checks one chunks document against chunk `want` of a file of
// layout l (an integer n, binary data of exactly the chunk's length) and
// returns a copy of its data: the cursor's buffer is not ours to keep.
func chunkData(doc bson.Raw, want int64, l layout) ([]byte, error) {
	n, ok := integer(doc.Lookup("n"))
	if !ok {
		return nil, fmt.Errorf("%w: a chunk without an integer n where chunk %d was expected", errCorrupt, want)
	}
	if n != want {
		return nil, fmt.Errorf("%w: chunk %d is missing (next is %d)", errCorrupt, want, n)
	}
	_, data, ok := doc.Lookup("data").BinaryOK()
	if !ok {
		return nil, fmt.Errorf("%w: chunk %d has no binary data", errCorrupt, n)
	}
	if int64(len(data)) != l.chunkLen(n) {
		return nil, fmt.Errorf("%w: chunk %d has %d bytes, expected %d", errCorrupt, n, len(data), l.chunkLen(n))
	}
	return bytes.Clone(data), nil
}
