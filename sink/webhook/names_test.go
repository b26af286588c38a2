package webhook_test

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

func TestFoldNameTakesLookalikesForOneName(t *testing.T) {
	for _, tc := range []struct {
		name, a, b string
		same       bool
	}{
		{"case is ignored", "BILLING", "billing", true},
		{"mixed case is ignored", "BiLLiNg", "billing", true},
		{"a trailing space is ignored", "billing ", "billing", true},
		{"leading and trailing white space is ignored", "\t billing\u00a0", "billing", true},
		{"precomposed accents are stripped", "bíllíng", "billing", true},
		{"combining accents are stripped", "bi\u0301lli\u0301ng", "billing", true},
		{"an invisible format character is ignored", "bill\u200bing", "billing", true},
		{"full-width letters are their ASCII letters", "ｂｉｌｌｉｎｇ", "billing", true},
		{"sharp s folds to ss", "STRASSE", "straße", true},
		{"a space inside the name counts", "bil ling", "billing", false},
		{"another letter counts", "billings", "billing", false},
		{"a digit is not a letter", "b1lling", "billing", false},
		{"punctuation counts", "billing-eu", "billing.eu", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa, fb := webhook.FoldName(tc.a), webhook.FoldName(tc.b)
			if (fa == fb) != tc.same {
				t.Errorf("FoldName(%q) = %q, FoldName(%q) = %q; same = %v, want %v", tc.a, fa, tc.b, fb, fa == fb, tc.same)
			}
		})
	}
}
