package webhook

import (
	"strings"
	"testing"
	"time"
)

// A negative value's message names the default to fall back on, read from
// the field's declaration.
func TestANegativeValueNamesTheDeclaredDefault(t *testing.T) {
	c := EndpointConfig{Name: "a", URL: "https://h.example/", Timeout: -time.Second, MaxConcurrency: -1,
		Retry: RetryConfig{MaxAttempts: -1, MaxAge: -time.Second, InitialBackoff: -time.Second, MaxBackoff: -time.Second}}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted negative values")
	}
	for _, want := range []string{
		"timeout -1s is negative; leave it out for the default 10s",
		"max_concurrency -1 is negative; leave it out for the default 16",
		"(default 30)",
		"retry.max_age -1s is negative; leave it out for the default 24h",
		"retry.initial_backoff -1s is negative; leave it out for the default 1s",
		"retry.max_backoff -1s is negative; leave it out for the default 10m",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v\nwant it to contain %q", err, want)
		}
	}
	if d := (EndpointConfig{}).WithDefaults(); d.Timeout != 10*time.Second || d.MaxConcurrency != 16 || d.Body != BodyRaw ||
		d.Retry.MaxAttempts != 30 || d.Retry.MaxAge != 24*time.Hour || d.Retry.InitialBackoff != time.Second || d.Retry.MaxBackoff != 10*time.Minute {
		t.Errorf("WithDefaults = %+v", d)
	}
}
