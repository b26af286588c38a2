package defaults_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/defaults"
)

func TestPositiveFillsOnlyZeroAndNegativeValues(t *testing.T) {
	for _, tc := range []struct {
		name      string
		have, out time.Duration
	}{
		{"a zero value takes the default", 0, time.Second},
		{"a negative value takes the default", -time.Millisecond, time.Second},
		{"a positive value is kept", 3 * time.Millisecond, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.have
			defaults.Positive(&v, time.Second)
			if v != tc.out {
				t.Fatalf("Positive(%v, 1s) = %v; want %v", tc.have, v, tc.out)
			}
		})
	}
	n := 7
	defaults.Positive(&n, 100)
	if n != 7 {
		t.Fatalf("Positive(7, 100) = %d; want 7 kept", n)
	}
}

func TestLoggerFillsOnlyANilLogger(t *testing.T) {
	var l *slog.Logger
	defaults.Logger(&l)
	if l == nil {
		t.Fatal("a nil logger stayed nil")
	}
	l.Info("goes nowhere") // a logger that discards, not a panic
	mine := slog.Default()
	defaults.Logger(&mine)
	if mine != slog.Default() {
		t.Fatal("a logger given was replaced")
	}
}
