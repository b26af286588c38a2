package webhook

import (
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// FoldName is the form an endpoint name shares with every name a person,
// or a database collation, could take for it: its compatibility
// decomposition (NFKD) without combining marks and invisible format
// characters, case-folded, with leading and trailing spaces trimmed.
// "BILLING", "billing ", "bíllíng" and "Billing" all fold to "billing".
//
// The relay stores and compares keys as bytes (package checkpoint); FoldName
// is for refusing a row of the endpoints table that only differs from an
// endpoint of the configuration in a way a reader of a log, a dashboard or a
// checkpoint table (whose collation may ignore case, accents and trailing
// spaces) would not see.
func FoldName(name string) string {
	d := norm.NFKD.String(name)
	d = strings.Map(func(r rune) rune {
		if unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf) {
			return -1
		}
		return r
	}, d)
	// A Caser keeps state: one per call.
	return strings.TrimFunc(norm.NFKC.String(cases.Fold().String(d)), unicode.IsSpace)
}

// StaticNames are the names of a webhook sink's endpoints of the
// configuration, by their folded form (FoldName): which one, if any, a
// row of the endpoints table would be taken for.
type StaticNames map[string]string

// NewStaticNames returns the StaticNames of endpoints.
func NewStaticNames(endpoints []EndpointConfig) StaticNames {
	s := StaticNames{}
	for _, ep := range endpoints {
		s[FoldName(ep.Name)] = ep.Name
	}
	return s
}

// Taken returns the endpoint of the configuration that a row's id names:
// the one whose name is id, or folds to what id folds to. The relay
// refuses such a row.
func (s StaticNames) Taken(id string) (name string, ok bool) {
	if id == "" {
		return "", false
	}
	name, ok = s[FoldName(id)]
	return name, ok
}

// CheckID says what is wrong with a row's id, as FromRow does: it must be 1
// to 64 letters, digits, '.', '_' or '-'. A row whose id fails it never has
// an endpoint, so no change of that row may stop, disable or delete one.
func (tc TableConfig) CheckID(id string) error {
	if !endpointIDRe.MatchString(id) {
		return fmt.Errorf("endpoints table %s, row %q: the id must be 1 to 64 letters, digits, '.', '_' or '-'; it names the endpoint's checkpoint and metrics", tc.Table, id)
	}
	return nil
}
