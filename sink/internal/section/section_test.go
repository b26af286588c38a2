package section_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

// testConfig is a section whose Validate refuses a zero Size: Defaults
// sets it unless Broken.
type testConfig struct {
	Size   int
	Broken bool
}

func (c *testConfig) Defaults() {
	if !c.Broken && c.Size == 0 {
		c.Size = 7
	}
}

func (c *testConfig) Validate() error {
	if c.Size == 0 {
		return errors.New("test.size: 0")
	}
	return nil
}

type testSink struct{ sink.Sink }

func TestBuildAppliesDefaultsThenValidatesBeforeBuilding(t *testing.T) {
	built := 0
	build := func(c testConfig) (int, error) { built++; return c.Size, nil }
	if n, err := section.Build(testConfig{}, build); err != nil || n != 7 {
		t.Fatalf("a section with its default: built %d, %v; want the default 7", n, err)
	}
	if _, err := section.Build(testConfig{Broken: true}, build); err == nil || built != 1 {
		t.Fatalf("an invalid section: %v, built %d times; want its error and no build", err, built)
	}
}

func TestNewHandsNoNilSinkInAnInterface(t *testing.T) {
	failing := section.New(func(c testConfig, p sink.Params) (*testSink, error) { return nil, errors.New("no") })
	if s, err := failing(sink.Params{Config: &testConfig{Size: 1}}); s != nil || err == nil {
		t.Fatalf("a failed build gave %#v, %v; want a nil sink.Sink and the error", s, err)
	}
	var got testConfig
	ok := section.New(func(c testConfig, p sink.Params) (*testSink, error) { got = c; return &testSink{}, nil })
	if s, err := ok(sink.Params{Config: &testConfig{Size: 3}}); s == nil || err != nil || got.Size != 3 {
		t.Fatalf("built %#v, %v from %+v; want a sink from the section as given", s, err, got)
	}
}

func TestProblemsNameTheSectionsFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  tlsfiles.Settings
		want []string
	}{
		{"tls off and unset is fine", tlsfiles.Settings{}, nil},
		{"tls fields set while tls is off", tlsfiles.Settings{CAFile: "ca.pem"}, []string{"kind.tls.enabled: false, but other tls fields are set; set tls.enabled: true to use them"}},
		{"a certificate without its key", tlsfiles.Settings{Enabled: true, CertFile: "c.pem"}, []string{`kind.tls: cert_file "c.pem" and key_file "" must be set together`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := section.NewProblems("kind")
			p.Add(nil)
			p.TLS(tc.tls)
			err := p.Err()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("got %v; want no problem", err)
				}
				return
			}
			if err == nil || err.Error() != strings.Join(tc.want, "\n") {
				t.Fatalf("got %v; want %q", err, tc.want)
			}
		})
	}
}
