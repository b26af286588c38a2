package printable

import "testing"

func TestString(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain text is unchanged", "status 400 Bad Request: nope", "status 400 Bad Request: nope"},
		{"letters beyond ASCII are unchanged", "Größe ✓ 日本", "Größe ✓ 日本"},
		{"an ANSI escape is shown, not run", "\x1b[2J\x1b[Hforged", `\x1b[2J\x1b[Hforged`},
		{"line breaks and tabs stay on one line", "a\nb\rc\td", `a\nb\rc\td`},
		{"a C1 control is shown", "a\u009bb", `a\u009bb`},
		{"a bidi override is shown", "a\u202eb", `a\u202eb`},
		{"an invalid byte is shown", "a\xffb", `a\xffb`},
		{"DEL is shown", "a\x7fb", `a\x7fb`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := String(tc.in); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
