package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Verify is the receiver's side of the signature (Standard Webhooks v1), for
// Go receivers and for the tests: it checks that h's webhook-signature holds
// a v1 signature of webhook-id, webhook-timestamp and body under one of
// secrets ("whsec_" + base64 of the key), and that the timestamp is within
// tolerance of now (the standard's receivers use 5 minutes). It is written
// apart from the signer, from the standard's text.
func Verify(secrets []string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("missing header: webhook-id %q, webhook-timestamp %q, webhook-signature %q", id, ts, sigs)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not integer seconds", ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("webhook-timestamp %s is %s from now, more than %s", ts, d, tolerance)
	}
	for _, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			return fmt.Errorf("secret is not whsec_ followed by base64: %w", err)
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, s := range strings.Split(sigs, " ") {
			version, b64, ok := strings.Cut(s, ",")
			if !ok || version != "v1" {
				continue
			}
			if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return errors.New("no v1 signature matches the body under any of the secrets")
}
