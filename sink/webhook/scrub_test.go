package webhook

import (
	"net/http"
	"strings"
	"testing"
)

// A receiver (or a WAF in front of it) that echoes the request's headers in
// its error reply, or redirects to a url with a token, must not put the
// configured secrets into the failure that is logged and dead-lettered.
func TestRecordedFailuresHideTheConfiguredSecrets(t *testing.T) {
	const token = "s3cr3t-bearer-token-0123456789"
	const apiKey = "k3y-abcdefghijklmnop"
	const queryToken = "qt-9876543210zyxwv"
	for _, tc := range []struct {
		name    string
		respond func(w http.ResponseWriter, r *http.Request, _ request)
	}{
		{"a 400 echoing the headers", func(w http.ResponseWriter, r *http.Request, _ request) {
			var b strings.Builder
			b.WriteString(strings.Repeat("x", 240)) // the token straddles the 256-byte cut
			for k, v := range r.Header {
				b.WriteString(k + ": " + strings.Join(v, ",") + "\n")
			}
			b.WriteString(`{"echo":{"authorization":"Bearer ` + token + `","url":"` + r.URL.String() + `"}}`)
			http.Error(w, b.String(), http.StatusBadRequest)
		}},
		{"a 400 echoing the token alone, escaped", func(w http.ResponseWriter, r *http.Request, _ request) {
			http.Error(w, "bad token "+strings.ReplaceAll(token, "-", "\\u002d")+" or "+token+" key="+apiKey, http.StatusUnauthorized)
		}},
		{"a redirect to a url with the token", func(w http.ResponseWriter, r *http.Request, _ request) {
			w.Header().Set("Location", "https://u:"+token+"@elsewhere.example/x?token="+queryToken+"&k="+apiKey)
			w.WriteHeader(http.StatusFound)
		}},
		{"an ANSI escape in the body", func(w http.ResponseWriter, r *http.Request, _ request) {
			http.Error(w, "\x1b[2J\x1b[Hall good\x07", http.StatusBadRequest)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, nil, tc.respond)
			cfg := testConfig(srv.URL + "/in?token=" + queryToken)
			cfg.Headers = map[string]string{"Authorization": "Bearer " + token, "X-Api-Key": apiKey}
			e := newEndpoint(t, cfg)
			errs := permanentErrors(t, write(t, e, ev("e1", "a")), 0)
			got := errs[0].Error()
			for _, secret := range []string{token, apiKey, queryToken, "s3cr3t", "\x1b", "\x07"} {
				if strings.Contains(got, secret) {
					t.Errorf("the failure holds %q: %s", secret, got)
				}
			}
			if !strings.Contains(got, "[redacted]") && !strings.Contains(got, "xxxxx") && !strings.Contains(got, `\x1b`) {
				t.Errorf("nothing was hidden or escaped: %s", got)
			}
		})
	}
}
