package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// The markers around the section of BENCHMARKS.md that the bench writes.
// What lies between them is replaced whole by each run; the text around
// them (what a run means, what changed) is written by hand.
const (
	sectionBegin = "<!-- outbox-bench:begin (written by go run ./cmd/outbox-bench -benchmarks BENCHMARKS.md; edit outside the markers) -->"
	sectionEnd   = "<!-- outbox-bench:end -->"
)

// writeSection replaces the bench section of the Markdown file at path
// with the report rep, its headings moved one level down (the report's
// "## outbox-bench" becomes a "###" under the file's own "##").
func writeSection(path, rep string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-benchmarks: %w", err)
	}
	out, err := spliceSection(doc, rep)
	if err != nil {
		return fmt.Errorf("-benchmarks %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return fmt.Errorf("-benchmarks: %w", err)
	}
	return os.Rename(tmp, path)
}

// spliceSection returns doc with the text between its markers replaced by
// rep (headings one level down).
func spliceSection(doc []byte, rep string) ([]byte, error) {
	b := bytes.Index(doc, []byte(sectionBegin))
	e := bytes.Index(doc, []byte(sectionEnd))
	switch {
	case b < 0 || e < 0:
		return nil, fmt.Errorf("no bench section: put the lines %q and %q where the run's report belongs", sectionBegin, sectionEnd)
	case e < b:
		return nil, fmt.Errorf("%q comes before %q: swap them", sectionEnd, sectionBegin)
	case bytes.Count(doc, []byte(sectionBegin)) > 1 || bytes.Count(doc, []byte(sectionEnd)) > 1:
		return nil, fmt.Errorf("more than one bench section: keep one pair of %q and %q", sectionBegin, sectionEnd)
	}
	var body strings.Builder
	for line := range strings.Lines(rep) {
		if strings.HasPrefix(line, "#") {
			body.WriteString("#")
		}
		body.WriteString(line)
	}
	var out bytes.Buffer
	out.Write(doc[:b+len(sectionBegin)])
	out.WriteString("\n\n")
	out.WriteString(strings.TrimRight(body.String(), "\n"))
	out.WriteString("\n\n")
	out.Write(doc[e:])
	return out.Bytes(), nil
}
