// Package printable makes text from outside (a receiver's reply, a server's
// value, a stored dead letter) safe to print on an operator's terminal:
// control characters, escape sequences included, are shown as Go escapes
// instead of being interpreted. Its functions are pure.
package printable

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with every control character (C0, DEL, C1, and the
// Unicode format characters that reorder or hide text, such as U+202E) and
// every invalid UTF-8 byte written as a Go escape (\x1b, \n, \u202e), so
// that it prints as one line that shows exactly what it holds. Printable
// text, non-ASCII letters included, is unchanged.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case unsafe(r):
			q := strconv.QuoteRune(r) // e.g. '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			return !strings.ContainsFunc(s, unsafe) && utf8.ValidString(s)
		}
	}
	return true
}

// unsafe reports whether r must not reach a terminal as is.
func unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) && r != '\u200d' // keep the emoji joiner
}

// Lines is String applied to each line of s: line breaks are kept (a
// joined error lists one error a line), every other control character is
// escaped.
func Lines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = String(l)
	}
	return strings.Join(lines, "\n")
}
