package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSectionReplacesOnlyWhatLiesBetweenTheMarkers(t *testing.T) {
	doc := "# Benchmarks\n\nBy hand, before.\n\n" + sectionBegin + "\n\n### outbox-bench: the last run\n\nold table\n\n" + sectionEnd + "\n\nBy hand, after.\n"
	rep := "## outbox-bench: 2000-row backlog\n\n### Backlog\n\n| a | b |\n"
	out, err := spliceSection([]byte(doc), rep)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Benchmarks\n\nBy hand, before.\n\n" + sectionBegin + "\n\n### outbox-bench: 2000-row backlog\n\n#### Backlog\n\n| a | b |\n\n" + sectionEnd + "\n\nBy hand, after.\n"
	if string(out) != want {
		t.Errorf("spliced:\n%s\nwant:\n%s", out, want)
	}
	again, err := spliceSection(out, rep)
	if err != nil || string(again) != want {
		t.Errorf("a second run with the same report changed the file (err %v):\n%s", err, again)
	}
}

func TestSectionWithoutMarkersIsRefusedNamingThem(t *testing.T) {
	for name, doc := range map[string]string{
		"no markers":  "# Benchmarks\n",
		"only begin":  sectionBegin + "\n",
		"swapped":     sectionEnd + "\n" + sectionBegin + "\n",
		"two of each": sectionBegin + sectionEnd + sectionBegin + sectionEnd,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := spliceSection([]byte(doc), "## r\n")
			if err == nil || !strings.Contains(err.Error(), "outbox-bench:") {
				t.Errorf("err = %v, want one naming the markers", err)
			}
		})
	}
}

// The repository's BENCHMARKS.md has exactly one bench section for the tool
// to write.
func TestBenchmarksHasTheBenchSection(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spliceSection(doc, "## r\n"); err != nil {
		t.Fatal(err)
	}
}
