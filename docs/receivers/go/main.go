// Command receiver is a webhook receiver that verifies the relay's
// Standard Webhooks signatures (docs/receiving-webhooks.md). It listens on
// 127.0.0.1:$PORT, verifies each POST with $WEBHOOK_SECRET ("whsec_…"),
// prints "verified <webhook-id>" or "rejected <webhook-id>: <why>" and
// answers 204 or 400.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// verify checks a Standard Webhooks v1 request. body is the raw request body.
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return errors.New("missing webhook-id or bad webhook-timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("webhook-timestamp is more than 5 minutes off: possible replay")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) { // "v1,<base64> v1,<base64>"
		if b64, ok := strings.CutPrefix(s, "v1,"); ok {
			if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return errors.New("no valid signature")
}

func main() {
	secret := os.Getenv("WEBHOOK_SECRET")
	http.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20)) // the raw bytes, before any parsing
		if err == nil {
			err = verify(secret, r.Header, body, time.Now())
		}
		id := r.Header.Get("webhook-id")
		if err != nil {
			fmt.Printf("rejected %s: %v\n", id, err)
			http.Error(w, "invalid signature", http.StatusBadRequest)
			return
		}
		// Store the event, keyed by webhook-id (a repeat is answered 2xx and not acted on again).
		fmt.Printf("verified %s\n", id)
		w.WriteHeader(http.StatusNoContent)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil))
}
