package main

import (
	"strings"
	"testing"
	"time"
)

func TestSpread(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		name           string
		in             []time.Duration
		median, lo, hi time.Duration
	}{
		{"no runs give zeros", nil, 0, 0, 0},
		{"one run is its own median and spread", ms(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{"an odd count takes the middle one, whatever the order", ms(90, 10, 40), 40 * time.Millisecond, 10 * time.Millisecond, 90 * time.Millisecond},
		{"an even count takes the mean of the middle two", ms(4, 1, 3, 100), 3500 * time.Microsecond, time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := append([]time.Duration(nil), c.in...)
			m, lo, hi := spread(c.in)
			if m != c.median || lo != c.lo || hi != c.hi {
				t.Errorf("spread(%v) = %v, %v, %v; want %v, %v, %v", c.in, m, lo, hi, c.median, c.lo, c.hi)
			}
			for i := range before {
				if before[i] != c.in[i] {
					t.Fatalf("spread reordered its input: %v, was %v", c.in, before)
				}
			}
		})
	}
}

func TestStartupLineJudgesTheMedianNotTheSlowestStart(t *testing.T) {
	big := startupResult{what: "big", runs: []time.Duration{400 * time.Millisecond}}
	r := startupResult{what: "small", target: true, runs: []time.Duration{300 * time.Millisecond, 60 * time.Millisecond, 80 * time.Millisecond}}
	line := startupLine([]startupResult{big, r})
	for _, want := range []string{"median 80.0 ms of 3 starts", "(60.0–300.0)", "**met**"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	r.runs = []time.Duration{150 * time.Millisecond, 101 * time.Millisecond, 20 * time.Millisecond}
	if line := startupLine([]startupResult{r, big}); !strings.Contains(line, "**not met**") {
		t.Errorf("a 101 ms median: %q, want not met", line)
	}
	if line := startupLine([]startupResult{big}); line != "" {
		t.Errorf("no target row: %q, want no line", line)
	}
	table := startupTable([]startupResult{r, big})
	if !strings.Contains(table, "| small | 3 | 101.0 | 20.0–150.0 | 150.0, 101.0, 20.0 |") || !strings.Contains(table, "| big | 1 | 400.0 |") {
		t.Errorf("table:\n%s", table)
	}
}
