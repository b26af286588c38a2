package section_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

type probingSink struct {
	sink.Sink
	sink.Prober
	size int
}

type testAuditor struct {
	sink.Auditor
	skew time.Duration
}

func TestKindBuildsProbesAndAuditsItsSection(t *testing.T) {
	k := section.Kind("test", "at least test.size",
		func(c testConfig, p sink.Params) (*probingSink, error) { return &probingSink{size: c.Size}, nil },
		func(c testConfig, p sink.AuditParams) (*testAuditor, error) {
			return &testAuditor{skew: p.ClockSkew}, nil
		})
	if k.Type != "test" || k.Required != "at least test.size" || !k.Probes {
		t.Fatalf("kind %q, required %q, probes %v; want test, its requirement, probed", k.Type, k.Required, k.Probes)
	}
	if c, ok := k.Config().(*testConfig); !ok || c.Size != 0 {
		t.Fatalf("Config() = %#v; want a zero *testConfig", k.Config())
	}
	s, err := k.New(sink.Params{Config: &testConfig{Size: 4}})
	if ps, ok := s.(*probingSink); err != nil || !ok || ps.size != 4 {
		t.Fatalf("New built %#v, %v; want the sink of the section given", s, err)
	}
	a, err := k.Audit(sink.AuditParams{Config: &testConfig{Size: 1}, ClockSkew: time.Minute})
	if ta, ok := a.(*testAuditor); err != nil || !ok || ta.skew != time.Minute {
		t.Fatalf("Audit built %#v, %v; want the auditor with the params given", a, err)
	}
}

type tlsConfig struct {
	testConfig
	TLS      tlsfiles.Settings
	Password string
}

func TestTLSWarningsWarnOfUnverifiedCertificatesAndClearTextSecrets(t *testing.T) {
	insecure := section.TLSWarnings("kind", func(c *tlsConfig) (tlsfiles.Settings, bool) { return c.TLS, c.Password != "" })
	for _, tc := range []struct {
		name string
		c    tlsConfig
		want string
	}{
		{"no tls and no secret is fine", tlsConfig{}, ""},
		{"verified tls with a secret is fine", tlsConfig{TLS: tlsfiles.Settings{Enabled: true}, Password: "p"}, ""},
		{"certificates not verified", tlsConfig{TLS: tlsfiles.Settings{Enabled: true, InsecureSkipVerify: true}}, "kind.tls.insecure_skip_verify is true"},
		{"a password without tls", tlsConfig{Password: "p"}, "a kind password or token without kind.tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := insecure(&tc.c)
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("got %+v; want no warning", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0].Detail, tc.want) {
				t.Fatalf("got %+v; want one warning saying %q", got, tc.want)
			}
		})
	}
}

func TestBrokerSectionChecksNameTheirFields(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(p *section.Problems)
		want  string
	}{
		{"a valid section has no problem", func(p *section.Problems) {
			p.Secret("password", "p", "", "")
			p.User("user", "u", "p", "", "")
		}, ""},
		{"two sources of one secret", func(p *section.Problems) { p.Secret("token", "t", "", "TOKEN") },
			"kind.token: set at most one of token, token_file, token_env"},
		{"a user without a password", func(p *section.Problems) { p.User("username", "u", "", "", "") },
			"kind.username: username and a password go together"},
		{"a password without a user", func(p *section.Problems) { p.User("user", "", "", "pw.txt", "") },
			"kind.user: user and a password go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := section.ProblemsOf("kind", &cloudevent.Config{})
			tc.check(p)
			err := p.Err()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v; want no problem", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v; want %q", err, tc.want)
			}
		})
	}
	if err := section.ProblemsOf("kind", &cloudevent.Config{Mode: "loud"}).Err(); err == nil || !strings.HasPrefix(err.Error(), "kind.cloudevents.mode: ") {
		t.Fatalf("a bad cloudevents block: %v; want its problem, named kind.cloudevents.mode", err)
	}
}

type defaultedSection struct {
	Name        string            `yaml:"name" default:"relay"`
	CloudEvents cloudevent.Config `yaml:"cloudevents"`
}

func TestDefaultsFillTheSectionThenItsCloudEvents(t *testing.T) {
	c := defaultedSection{CloudEvents: cloudevent.Config{Mode: cloudevent.Binary}}
	section.Defaults(&c, &c.CloudEvents)
	if c.Name != "relay" || c.CloudEvents.DataContentType != "application/json" {
		t.Fatalf("got name %q, datacontenttype %q; want the declared default and cloudevents' own", c.Name, c.CloudEvents.DataContentType)
	}
}
