package sqlident

import "testing"

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a plain name is put in backticks", "outbox", "`outbox`"},
		{"a backtick is doubled", "odd`name", "`odd``name`"},
		{"a name that tries to end the identifier stays one", "x` WHERE 1=1 -- ", "`x`` WHERE 1=1 -- `"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quote(tc.in); got != tc.want {
				t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
	if got := Table("sh`op", "out"); got != "`sh``op`.`out`" {
		t.Errorf("Table = %s", got)
	}
}
