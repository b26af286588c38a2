package route

import (
	"slices"
	"testing"
)

func TestSkeletonMatchesWhatTheTemplateRenders(t *testing.T) {
	cases := []struct {
		name, text string
		skeleton   []string
		match      []string
		miss       []string
		glob       string
	}{
		{"a fixed name is itself", "orders", []string{"orders"}, []string{"orders"}, []string{"orders2", "x"}, "orders"},
		{"a single field is every name", "{{.AggregateID}}", []string{"", ""}, []string{"a", ""}, nil, "*"},
		{"a prefix and a field", "outbox.event.{{.AggregateType}}", []string{"outbox.event.", ""},
			[]string{"outbox.event.order", "outbox.event."}, []string{"outbox.other", "x.outbox.event.a"}, "outbox.event.*"},
		{"text between fields is kept in order", "a{{.Type}}-{{lower .AggregateType}}.z", []string{"a", "-", ".z"},
			[]string{"ax-y.z", "a-.z"}, []string{"a.z-", "ax.z"}, "a*-*.z"},
		{"an if makes it every name", `{{if .Type}}t{{else}}u{{end}}`, []string{"", ""}, []string{"anything"}, nil, "*"},
		{"glob characters are escaped", "s[1]*{{.Type}}", []string{"s[1]*", ""}, []string{"s[1]*x"}, []string{"s1x"}, `s\[1\]\**`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm, err := Parse("f", c.text)
			if err != nil {
				t.Fatal(err)
			}
			sk := tm.Skeleton()
			if !slices.Equal(sk, c.skeleton) {
				t.Fatalf("Skeleton() = %q, want %q", sk, c.skeleton)
			}
			for _, n := range c.match {
				if !Match(sk, n) {
					t.Errorf("%q does not match %q", n, sk)
				}
			}
			for _, n := range c.miss {
				if Match(sk, n) {
					t.Errorf("%q matches %q", n, sk)
				}
			}
			if g := Glob(sk); g != c.glob {
				t.Errorf("Glob = %q, want %q", g, c.glob)
			}
		})
	}
}
