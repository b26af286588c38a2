// Package defaults fills the options a constructor was handed, one way for
// every options struct: a number or duration at or below zero takes its
// default (Positive), a nil logger one that discards (Logger). (A config
// file's sections declare theirs beside their fields: config.SetDefaults.)
// It holds no state; its functions may be called from any goroutine on
// values that goroutine owns.
package defaults

import "log/slog"

// Number is what Positive fills: the counts, sizes and durations of
// options.
type Number interface {
	~int | ~int32 | ~int64 | ~float64 // time.Duration is an ~int64
}

// Positive sets *v to def when *v is zero or negative.
func Positive[T Number](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Logger sets *l to a logger that discards when it is nil.
func Logger(l **slog.Logger) {
	if *l == nil {
		*l = slog.New(slog.DiscardHandler)
	}
}
