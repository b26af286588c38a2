package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Spool is the directory through which commands hand requests to a running
// relay whose checkpoint store is a file: that relay holds the file's lock
// and rewrites the whole file on each save, so a command must not write it.
// Each request is one file, written atomically (checkpoint.WriteFileAtomic:
// a temporary file renamed into place); the relay reads it, adopts it into
// its store, and only then removes it, so a crash in between adopts it
// again (adopting is idempotent).
type Spool struct{ dir string }

// SpoolFor is the spool of the file store at path: the directory
// "<path>.requests" beside it.
func SpoolFor(path string) Spool { return Spool{dir: path + ".requests"} }

// Dir is the spool's directory.
func (s Spool) Dir() string { return s.dir }

// Request is one request: a job to add, or a job to cancel.
type Request struct {
	Job *Job `json:"job,omitempty"`
	// Cancel is the id of the job to cancel, with Why.
	Cancel string `json:"cancel,omitempty"`
	Why    string `json:"why,omitempty"`
}

// name is the request's file name: one per job and kind, so that writing
// the same request twice leaves one.
func (r Request) name() (string, error) {
	switch {
	case r.Job != nil && ValidID(r.Job.ID):
		return "job-" + r.Job.ID + ".json", nil
	case r.Cancel != "" && ValidID(r.Cancel):
		return "cancel-" + r.Cancel + ".json", nil
	}
	return "", errors.New("a spool request names one job, by a valid id")
}

// Put writes r into the spool.
func (s Spool) Put(r Request) error {
	name, err := r.name()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("create replay request directory: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := checkpoint.WriteFileAtomic(filepath.Join(s.dir, name), b); err != nil {
		return fmt.Errorf("write replay request %s: %w", filepath.Join(s.dir, name), err)
	}
	return nil
}

// Spooled is a request read from the spool, with the file to remove once
// it is adopted.
type Spooled struct {
	Request
	File string
}

// Take lists the requests in the spool (a missing directory holds none).
// A file that does not decode is returned as an error naming it, and left
// for the operator; the others are returned.
func (s Spool) Take() ([]Spooled, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Spooled
	var errs []error
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".json") {
			continue // a temporary file being written
		}
		file := filepath.Join(s.dir, n)
		b, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r Request
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("replay request %s does not decode (%v): remove it, and make the request again", file, err))
			continue
		}
		if want, err := r.name(); err != nil || want != n {
			errs = append(errs, fmt.Errorf("replay request %s is not one this relay wrote: remove it, and make the request again", file))
			continue
		}
		out = append(out, Spooled{Request: r, File: file})
	}
	return out, errors.Join(errs...)
}

// Done removes an adopted request.
func (s Spool) Done(p Spooled) error {
	if err := os.Remove(p.File); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
