package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The API shows an endpoint's url with its credentials and query values
// hidden, to a tenant, through a tenant link and to the operator alike;
// only the create's answer shows the url as written. An update that sends
// the url back as it was shown keeps the hidden parts.
func TestTheAPIHidesTheCredentialsOfEndpointURLs(t *testing.T) {
	f := newFixture(t)
	const raw = "http://bob:S3cret@hooks.example/in?token=t0k3n&v=1"
	secrets := []string{"S3cret", "t0k3n", "bob"}
	res, body := f.do(t, "POST", "/api/v1/endpoints/hooks", f.tenA, `{"id":"a-creds","url":"`+raw+`"}`)
	var created struct{ Endpoint Endpoint }
	_ = json.Unmarshal([]byte(body), &created)
	if res.StatusCode != 201 || created.Endpoint.URL != raw {
		t.Fatalf("create: %d %s, want the url as written", res.StatusCode, body)
	}
	link := f.s.sign.Link("A", f.now.Add(time.Minute))
	for _, rq := range []struct{ who, method, path, token, body string }{
		{"tenant", "GET", "/api/v1/endpoints", f.tenA, ""},
		{"tenant", "GET", "/api/v1/endpoints/hooks/a-creds", f.tenA, ""},
		{"tenant link", "GET", "/api/v1/endpoints?sink=hooks", link, ""},
		{"tenant link", "GET", "/api/v1/endpoints/hooks/a-creds", link, ""},
		{"operator", "GET", "/api/v1/endpoints", f.op, ""},
		{"tenant", "POST", "/api/v1/endpoints/hooks/a-creds/disable", f.tenA, ""},
		{"tenant", "POST", "/api/v1/endpoints/hooks/a-creds/enable", f.tenA, ""},
		{"tenant", "PUT", "/api/v1/endpoints/hooks/a-creds", f.tenA, `{"url":"http://xxxxx@hooks.example/in?token=xxxxx&v=xxxxx","rate_limit":5}`},
	} {
		res, body := f.do(t, rq.method, rq.path, rq.token, rq.body)
		if res.StatusCode != http.StatusOK || !strings.Contains(body, "hooks.example/in") {
			t.Errorf("%s %s %s: %d %s", rq.who, rq.method, rq.path, res.StatusCode, body)
		}
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s %s %s shows %q: %s", rq.who, rq.method, rq.path, s, body)
			}
		}
	}
	if row := f.table.rows[namespace("A")+"a-creds"]; row.URL != raw || row.RateLimit == nil || *row.RateLimit != 5 {
		t.Errorf("the update sent back the url as shown: the row holds %q (rate %v), want %q kept", row.URL, row.RateLimit, raw)
	}
	// A new url in an update is taken as written (and answered hidden).
	res, body = f.do(t, "PUT", "/api/v1/endpoints/hooks/a-creds", f.tenA, `{"url":"https://carol:N3w@hooks.example/2"}`)
	var e Endpoint
	_ = json.Unmarshal([]byte(body), &e)
	if res.StatusCode != 200 || e.URL != "https://xxxxx@hooks.example/2" || f.table.rows[namespace("A")+"a-creds"].URL != "https://carol:N3w@hooks.example/2" {
		t.Errorf("a new url: %d %s, row %q", res.StatusCode, body, f.table.rows[namespace("A")+"a-creds"].URL)
	}
}
