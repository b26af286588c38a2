package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// File keeps every key's checkpoint in one JSON document at Path.
type File struct {
	path     string
	readOnly bool
	// writing serializes rewrites; mu guards the view (all, enc, keys)
	// and is not held while a rewrite writes and fsyncs, so Load and List
	// do not wait for the disk. Only a rewrite (under writing) changes the
	// view, so what it assembled is still the view when it applies it.
	writing sync.Mutex
	mu      sync.Mutex
	all     map[string]Checkpoint
	// enc is each key's checkpoint as encoded in the file (encodeCheckpoint)
	// once saved or read: a save encodes only the keys it changes.
	enc map[string][]byte
	// keys are the keys of all, sorted (nil: not known yet); buf is the
	// last document written, whose array the next one reuses. With them a
	// save of a few keys among many (a gateway's endpoints) copies no map
	// and sorts nothing: it encodes its keys and assembles the document.
	keys []string
	buf  []byte
	// over is rewrite's map of the keys it encodes, emptied and reused.
	over map[string][]byte
	// waited: the last Lock had to wait for another holder.
	waited bool
}

// fileFormat is the document on disk; Version lets later formats be told apart.
type fileFormat struct {
	Version     int                   `json:"version"`
	Checkpoints map[string]Checkpoint `json:"checkpoints"`
}

// OpenFile opens (or prepares to create) the checkpoint file at path. Its
// directory is created if missing. A file that exists but cannot be parsed is
// an error, never silently replaced.
func OpenFile(path string) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create checkpoint directory: %w", err)
	}
	return readFile(path)
}

// OpenFileReadOnly opens the checkpoint file at path for reading only (for
// status and check): it creates nothing, a missing file or directory reads
// as no checkpoints, and Save returns ErrReadOnly.
func OpenFileReadOnly(path string) (*File, error) {
	f, err := readFile(path)
	if err != nil {
		return nil, err
	}
	f.readOnly = true
	return f, nil
}

func readFile(path string) (*File, error) {
	f := &File{path: path, all: map[string]Checkpoint{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f, nil
	case err != nil:
		return nil, fmt.Errorf("read checkpoint file %q: %w", path, err)
	}
	all, err := decodeFile(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint file %q %w", path, err)
	}
	f.all = all
	return f, nil
}

// decodeFile reads the checkpoint file's document. Its errors read after
// `checkpoint file "<path>"`: what is wrong and where (the byte where the
// JSON breaks, or the sink's key and the field of the wrong shape), and a
// way out that loses no event (the file is never to be removed alone: every
// sink would start again at checkpoint.start).
func decodeFile(b []byte) (map[string]Checkpoint, error) {
	var doc struct {
		Version     int                        `json:"version"`
		Checkpoints map[string]json.RawMessage `json:"checkpoints"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		what := jsonProblem("", err, true)
		if fieldOf(err) != "" {
			what = "is not a checkpoint file: " + what
		}
		return nil, fmt.Errorf("%s; %s", what, fileAdvice)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("has version %d; this relay reads version 1", doc.Version)
	}
	all := make(map[string]Checkpoint, len(doc.Checkpoints))
	for k, raw := range doc.Checkpoints {
		var cp Checkpoint
		if err := json.Unmarshal(raw, &cp); err != nil {
			advice := fileAdvice
			if f := fieldOf(err); f == "acked" || strings.HasPrefix(f, "acked.") {
				advice = fmt.Sprintf(`removing the "acked" field of checkpoint %q alone is safe: the events after its position are then sent again, none is skipped; or %s`, k, fileAdvice)
			}
			return nil, fmt.Errorf("holds checkpoint %q of the wrong shape: %s; %s", k, jsonProblem("", err, false), advice)
		}
		all[k] = cp
	}
	return all, nil
}

// fileAdvice is what to do with a checkpoint file that does not decode.
const fileAdvice = `restore the file from a backup, or mend it by hand. Do not remove it, or move it away, alone: every sink would start again at checkpoint.start and skip what came since its checkpoint. If it cannot be mended, set checkpoint.start to gtid:<the oldest of the sinks' positions> (from the file, or from the relay's log lines "pipeline starting" from= and "checkpoint saved" position=) or to earliest, then move the file aside: each sink resends from there and skips nothing`

// shapes are the shapes of a checkpoint's fields that are not strings or
// numbers, by their path, for messages.
var shapes = map[string]string{
	"":             `an object: {"flavor": "mariadb", "server_id": 1, "position": {...}, "updated_at": "<RFC 3339 time>", ...}`,
	"checkpoints":  `an object of checkpoints by sink: {"<sink>": {"flavor": ..., "position": {...}, ...}}`,
	"position":     `{"gtid_set": "<GTID set>", "file": "<binlog file>", "pos": <number>, "server_id": <number>}`,
	"acked":        `{"events": {"<GTID of a transaction>": ["<event id>", ...]}, "read_through": "<GTID>"}`,
	"acked.events": `{"<GTID of a transaction>": ["<event id>", ...]}`,
}

// fieldOf is the dotted path of the field an error of encoding/json is
// about ("" for none, or the whole document).
func fieldOf(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}

// jsonProblem says what is wrong with a JSON document that did not decode
// (column names the MySQL store's column, "" for a file): where its syntax
// breaks, or which field has the wrong shape, and the shape it must have;
// at says whether byte offsets are the document's own.
func jsonProblem(column string, err error, at bool) string {
	what := "is"
	if column != "" {
		what = "column " + column + " is"
	}
	where := func(off int64) string {
		if !at {
			return ""
		}
		return fmt.Sprintf(" (at byte %d)", off)
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%s not valid JSON: %v%s", what, se, where(se.Offset))
	case errors.As(err, &te):
		f := te.Field
		if column != "" && f == "" {
			f = column
		} else if column != "" {
			f = column + "." + f
		}
		want, ok := shapes[f]
		switch {
		case f == "acked.events" && te.Type.String() == "[]string":
			want = "a list of event ids under each transaction's GTID"
		case f == "acked.events" && te.Type.String() == "string":
			want = "a list of event ids, each a string"
		case !ok:
			want = "a JSON " + te.Type.String()
		}
		if f == "" {
			return fmt.Sprintf("%s a JSON %s%s, where it must be %s", what, te.Value, where(te.Offset), want)
		}
		return fmt.Sprintf("field %s is a JSON %s%s, where it must be %s", f, te.Value, where(te.Offset), want)
	}
	return fmt.Sprintf("%s not readable: %v", what, err)
}

// encodeFile is the document Save writes: what encoding/json's
// MarshalIndent(fileFormat, "", "  ") writes, keys sorted, but each key's
// list of acknowledged events on one line.
func encodeFile(all map[string]Checkpoint) ([]byte, error) {
	enc := make(map[string][]byte, len(all))
	for k, cp := range all {
		b, err := encodeCheckpoint(cp)
		if err != nil {
			return nil, err
		}
		enc[k] = b
	}
	return assembleFile(nil, slices.Sorted(maps.Keys(enc)), enc, nil), nil
}

// encodeCheckpoint is cp as the file document holds it under its key:
// what encoding/json's MarshalIndent(cp, "    ", "  ") writes, but its list
// of acknowledged events (last, after every other field) on one line, as
// Acked.appendJSON writes it. It is appended by hand, without reflection:
// a gateway's endpoints each save their key as soon as something is
// acknowledged, so encoding is on the delivery path's budget.
func encodeCheckpoint(cp Checkpoint) ([]byte, error) {
	// One allocation when no string needs escaping: the fields' names,
	// indentation, numbers and times take under 300 bytes.
	n := 300 + len(cp.Flavor) + len(cp.ServerUUID) + len(cp.Disabled) + len(cp.Record) +
		len(cp.Position.GTIDSet) + len(cp.Position.File) + len(cp.Position.Server)
	if tc := cp.Position.Table; tc != nil {
		n += 64 + len(tc.Table)
		for _, k := range tc.Key {
			n += len(k) + 16
		}
	}
	return appendCheckpoint(make([]byte, 0, n), cp)
}

// The indentation of the checkpoint's fields, of its position's, and of
// the position's table cursor's (each key's checkpoint is at depth 2 of
// the document, so its first level of fields is indented 6 spaces).
const (
	cpIndent    = "\n      "
	posIndent   = "\n        "
	tableIndent = "\n          "
	keyIndent   = "\n            "
)

// appendCheckpoint appends encodeCheckpoint's encoding of cp to b. Its
// fields are written in the struct's order, each omitted as its tag says
// (omitempty, omitzero), exactly as encoding/json writes them; the only
// error is encoding/json's own, for a time it cannot write.
func appendCheckpoint(b []byte, cp Checkpoint) ([]byte, error) {
	b = append(b, '{')
	b = appendField(b, cpIndent, "flavor")
	b = appendJSONString(b, cp.Flavor)
	b = appendStringField(b, cpIndent, "server_uuid", cp.ServerUUID)
	b = appendUintField(b, cpIndent, "server_id", uint64(cp.ServerID))
	b = appendPosition(appendNextField(b, cpIndent, "position"), &cp.Position)
	var err error
	if !cp.CommitTime.IsZero() {
		if b, err = appendJSONTime(appendNextField(b, cpIndent, "commit_time"), cp.CommitTime); err != nil {
			return nil, err
		}
	}
	if b, err = appendJSONTime(appendNextField(b, cpIndent, "updated_at"), cp.UpdatedAt); err != nil {
		return nil, err
	}
	b = appendStringField(b, cpIndent, "disabled", cp.Disabled)
	b = appendStringField(b, cpIndent, "record", cp.Record)
	if cp.Acked != nil {
		b = cp.Acked.appendJSON(appendNextField(b, cpIndent, "acked"))
	}
	return append(b, "\n    }"...), nil
}

// appendNextField appends a field's name after an earlier field: a comma,
// then appendField.
func appendNextField(b []byte, indent, name string) []byte {
	return appendField(append(b, ','), indent, name)
}

// appendStringField appends field name, after an earlier field, with
// value v; nothing when v is "" (omitempty).
func appendStringField(b []byte, indent, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendJSONString(appendNextField(b, indent, name), v)
}

// appendUintField appends field name, after an earlier field, with value
// v; nothing when v is 0 (omitempty).
func appendUintField(b []byte, indent, name string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendUint(appendNextField(b, indent, name), v, 10)
}

// appendPosition appends p as a field of a checkpoint (at depth 3).
func appendPosition(b []byte, p *event.Position) []byte {
	b = append(b, '{')
	n := 0
	field := func(name string) { // a comma before every field but the first
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendField(b, posIndent, name)
	}
	str := func(name, v string) { // left out when ""
		if v != "" {
			field(name)
			b = appendJSONString(b, v)
		}
	}
	num := func(name string, v uint64) { // left out when 0
		if v != 0 {
			field(name)
			b = strconv.AppendUint(b, v, 10)
		}
	}
	str("gtid_set", p.GTIDSet)
	str("file", p.File)
	num("pos", uint64(p.Pos))
	str("server", p.Server)
	num("server_id", uint64(p.ServerID))
	if tc := p.Table; tc != nil {
		field("table")
		b = append(b, '{')
		b = appendField(b, tableIndent, "table")
		b = appendJSONString(b, tc.Table)
		if len(tc.Key) > 0 {
			b = append(b, ',')
			b = appendField(b, tableIndent, "key")
			b = append(b, '[')
			for i, v := range tc.Key {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, keyIndent...)
				b = appendJSONString(b, v)
			}
			b = append(b, tableIndent...)
			b = append(b, ']')
		}
		if tc.Done {
			b = append(b, ',')
			b = appendField(b, tableIndent, "done")
			b = append(b, "true"...)
		}
		b = append(b, posIndent...)
		b = append(b, '}')
	}
	if n == 0 {
		return append(b, '}') // an empty object stays on its line: {}
	}
	b = append(b, cpIndent...)
	return append(b, '}')
}

// appendField appends a field's name after its line's indentation.
func appendField(b []byte, indent, name string) []byte {
	b = append(b, indent...)
	b = append(b, '"')
	b = append(b, name...)
	return append(b, `": `...)
}

// appendJSONTime appends t as encoding/json writes a time.Time (RFC 3339,
// quoted), or returns the error encoding/json returns for it.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		if _, jerr := json.Marshal(t); jerr != nil {
			err = jerr
		}
		return nil, err
	}
	return append(b, '"'), nil
}

// assembleFile appends to b[:0] the document of keys (sorted), each
// key's encoded checkpoint taken from over if it is there, else from enc.
func assembleFile(b []byte, keys []string, enc, over map[string][]byte) []byte {
	encoded := func(k string) []byte {
		if e, ok := over[k]; ok {
			return e
		}
		return enc[k]
	}
	n := 64
	for _, k := range keys {
		n += len(k) + len(encoded(k)) + 16
	}
	b = slices.Grow(b[:0], n)
	b = append(b, "{\n  \"version\": 1,\n  \"checkpoints\": {"...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = appendJSONString(b, k)
		b = append(b, ": "...)
		b = append(b, encoded(k)...)
	}
	if len(keys) > 0 {
		b = append(b, "\n  "...)
	}
	return append(b, "}\n}\n"...)
}

// reload rereads the file: another process may have written it (a relay
// that held the lock before this one).
func (f *File) reload() error {
	g, err := OpenFile(f.path)
	if err != nil {
		return err
	}
	f.writing.Lock()
	defer f.writing.Unlock()
	f.mu.Lock()
	f.all, f.enc, f.keys = g.all, nil, nil
	f.mu.Unlock()
	return nil
}

// Load implements Store.
func (f *File) Load(_ context.Context, key string) (Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp, ok := f.all[key]
	if !ok {
		return Checkpoint{}, ErrNotFound
	}
	return cp, nil
}

// Save implements Store: the whole document is rewritten atomically.
func (f *File) Save(_ context.Context, key string, cp Checkpoint) error {
	return f.rewrite(map[string]Checkpoint{key: cp}, nil)
}

// SaveMany implements BatchSaver: every key's checkpoint in one atomic
// rewrite of the document (one fsync), all or nothing.
func (f *File) SaveMany(_ context.Context, cps map[string]Checkpoint) error {
	if len(cps) == 0 && !f.readOnly {
		return nil
	}
	return f.rewrite(cps, nil)
}

// WriteMany implements BatchWriter: the keys of save replaced and those of
// del removed in one atomic rewrite of the document (one fsync).
func (f *File) WriteMany(_ context.Context, save map[string]Checkpoint, del []string) error {
	if f.readOnly {
		return ErrReadOnly
	}
	f.mu.Lock()
	gone := slices.DeleteFunc(slices.Clone(del), func(k string) bool { _, ok := f.all[k]; _, saved := save[k]; return !ok || saved })
	f.mu.Unlock()
	if len(save) == 0 && len(gone) == 0 {
		return nil
	}
	return f.rewrite(save, gone)
}

// Delete implements Deleter: the document is rewritten without key. A key
// with no checkpoint is not an error, and writes nothing.
func (f *File) Delete(_ context.Context, key string) error {
	f.mu.Lock()
	_, ok := f.all[key]
	f.mu.Unlock()
	if !ok && !f.readOnly {
		return nil
	}
	return f.rewrite(nil, []string{key})
}

// List implements Lister.
func (f *File) List(context.Context) (map[string]Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.all), nil
}

// rewrite writes, atomically, every checkpoint with those of set replaced
// and the keys of del removed (keys of set are not in del); the store's
// view (all, enc, keys) moves to it only once it is durable. Only the keys
// of set are encoded again, and the view is updated in place: a save copies
// no map. The view's lock is not held while the document is written and
// fsynced (rewrites are one at a time, under f.writing).
func (f *File) rewrite(set map[string]Checkpoint, del []string) error {
	if f.readOnly {
		return ErrReadOnly
	}
	f.writing.Lock()
	defer f.writing.Unlock()
	f.mu.Lock()
	if f.enc == nil {
		f.enc = make(map[string][]byte, len(f.all))
	}
	// A key read from the file, not saved since, is encoded once: its
	// encoding does not depend on the save. enc holds keys of all only, so
	// when it holds as many every key is encoded already.
	for k, cp := range f.all {
		if len(f.enc) == len(f.all) {
			break
		}
		if _, ok := f.enc[k]; !ok {
			b, err := encodeCheckpoint(cp)
			if err != nil {
				f.mu.Unlock()
				return err
			}
			f.enc[k] = b
		}
	}
	if f.over == nil {
		f.over = make(map[string][]byte, len(set))
	}
	over := f.over
	defer clear(over)
	newKey := false
	for k, cp := range set {
		b, err := encodeCheckpoint(cp)
		if err != nil {
			f.mu.Unlock()
			return err
		}
		over[k] = b
		if _, ok := f.all[k]; !ok {
			newKey = true
		}
	}
	var gone map[string]struct{}
	for _, k := range del {
		if _, ok := f.all[k]; ok {
			if gone == nil {
				gone = make(map[string]struct{}, len(del))
			}
			gone[k] = struct{}{}
		}
	}
	keys := f.keys
	switch {
	case keys == nil:
		keys = make([]string, 0, len(f.all)+len(set))
		for k := range f.all {
			if _, ok := gone[k]; !ok {
				keys = append(keys, k)
			}
		}
		for k := range set {
			if _, ok := f.all[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
	case newKey || gone != nil:
		// The sorted keys, merged with the new ones (sorted) and without
		// the deleted: one pass, not a sort of every key (a gateway's
		// endpoints come and go a few at a time among many).
		var added []string
		for k := range set {
			if _, ok := f.all[k]; !ok {
				added = append(added, k)
			}
		}
		slices.Sort(added)
		merged := make([]string, 0, len(keys)+len(added))
		for _, k := range keys {
			for len(added) > 0 && added[0] < k {
				merged, added = append(merged, added[0]), added[1:]
			}
			if _, ok := gone[k]; !ok {
				merged = append(merged, k)
			}
		}
		keys = append(merged, added...)
	}
	f.buf = assembleFile(f.buf, keys, f.enc, over)
	f.mu.Unlock()
	if err := WriteFileAtomic(f.path, f.buf); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", f.path, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, cp := range set {
		f.all[k], f.enc[k] = cp, over[k]
	}
	for _, k := range del {
		delete(f.all, k)
		delete(f.enc, k)
	}
	f.keys = keys
	return nil
}

// Close implements Store.
func (f *File) Close() error { return nil }

// LockWaited reports whether the last Lock had to wait for another holder:
// this relay was a standby and has taken over.
func (f *File) LockWaited() bool { return f.waited }

// WriteFileAtomic replaces path with data so that a crash at any moment leaves
// either the old content or the new one: write a temporary file in the same
// directory, fsync it, rename it over path, fsync the directory.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	cleanup := func() { tmp.Close(); os.Remove(name) }
	if _, err := tmp.Write(data); err != nil {
		cleanup()
		return err
	}
	if err := tmp.Sync(); err != nil {
		cleanup()
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
