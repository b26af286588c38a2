package sqlident

import (
	"strings"
	"testing"
)

func TestCheckCondition(t *testing.T) {
	for _, tc := range []struct{ name, where, err string }{
		{"no filter is allowed", "", ""},
		{"a condition is allowed", "status = 'pending'", ""},
		{"parentheses and quotes that balance are allowed", "(a = 'x)' OR b IN (1, 2)) AND `c``d` = \"e\"", ""},
		{"a quote escaped or doubled stays in its literal", `note = 'it\'s' OR note = 'it''s'`, ""},
		{"a semicolon is refused", "status = 'pending'; DROP TABLE outbox", "';' is not allowed"},
		{"a line comment is refused", "status = 'pending' -- and more", "comments are not allowed"},
		{"a hash comment is refused", "status = 'pending' # x", "comments are not allowed"},
		{"a block comment is refused", "status /* x */ = 'pending'", "comments are not allowed"},
		{"a parenthesis closed early is refused", "1) OR (1", "closes a parenthesis it did not open"},
		{"a parenthesis left open is refused", "(status = 'pending'", "left open"},
		{"a quote left open is refused", "status = 'pending", "not closed"},
		{"a semicolon inside a literal is allowed", "note = 'a;b'", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCondition(tc.where)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("CheckCondition(%q) = %v, want nil", tc.where, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("CheckCondition(%q) = %v, want an error saying %q", tc.where, err, tc.err)
			case err != nil && !strings.Contains(err.Error(), "status = 'pending'") && tc.err != "" && !strings.Contains(err.Error(), "e.g."):
				t.Errorf("CheckCondition(%q) = %v: does not say how to fix it", tc.where, err)
			}
		})
	}
}
