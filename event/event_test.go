package event

import "testing"

func TestValidTraceParent(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want bool
	}{
		{"a sampled version 00 traceparent is valid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"an unsampled one is valid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"a later version may append fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true},
		{"version 00 may not", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false},
		{"version ff is invalid", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"upper-case hex is invalid", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"an all-zero trace id is invalid", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"an all-zero parent id is invalid", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"a short one is invalid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", false},
		{"wrong separators are invalid", "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", false},
		{"text is invalid", "not-a-traceparent", false},
		{"empty is invalid", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ValidTraceParent(c.in); got != c.want {
				t.Errorf("ValidTraceParent(%q) = %v, want %v", c.in, got, c.want)
			}
		})
	}
}
