package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestPprofIsServedOnlyWhenAskedFor(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unregister()
	for _, tc := range []struct {
		name  string
		h     http.Handler
		pprof int
	}{
		{"without the switch, no profiles", Handler(m, reg, 0), http.StatusNotFound},
		{"with it, the profiles and the usual endpoints", WithPprof(Handler(m, reg, 0)), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			for path, want := range map[string]int{"/debug/pprof/cmdline": tc.pprof, "/debug/pprof/heap?debug=1": tc.pprof,
				"/debug/pprof/": tc.pprof, "/healthz": http.StatusOK, "/metrics": http.StatusOK} {
				res, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != want {
					t.Errorf("GET %s: %d, want %d", path, res.StatusCode, want)
				}
			}
		})
	}
}
