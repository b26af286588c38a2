package webhook

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// The signer and the verifier agree on every id, timestamp, body and key, and
// a signature does not verify a changed body, another id or another key.
func FuzzSignVerifies(f *testing.F) {
	f.Add([]byte("0123456789abcdef01234567"), "msg_p5jXN8AQM9LWM0D4loKWxJek", int64(1614265330), []byte(`{"test": 2432232314}`))
	f.Add(bytes.Repeat([]byte{0xff}, 64), "e-1", int64(0), []byte{})
	f.Fuzz(func(t *testing.T, key []byte, id string, ts int64, body []byte) {
		if len(key) == 0 || id == "" || !validHeader(id) || ts < 0 {
			t.Skip()
		}
		secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
		other := "whsec_" + base64.StdEncoding.EncodeToString(append([]byte{1}, key...))
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", sign([][]byte{key}, id, ts, body))
		now := time.Unix(ts, 0)
		if err := Verify([]string{secret}, h, body, now, 5*time.Minute); err != nil {
			t.Fatalf("a signed request does not verify: %v", err)
		}
		if err := Verify([]string{other, secret}, h, body, now, 5*time.Minute); err != nil {
			t.Fatalf("a rotated secret list does not verify: %v", err)
		}
		if err := Verify([]string{other}, h, body, now, 5*time.Minute); err == nil {
			t.Fatal("another key verified")
		}
		changed := append(bytes.Clone(body), 'x')
		if err := Verify([]string{secret}, h, changed, now, 5*time.Minute); err == nil {
			t.Fatal("a changed body verified")
		}
		h.Set("webhook-id", id+"x")
		if err := Verify([]string{secret}, h, body, now, 5*time.Minute); err == nil {
			t.Fatal("another id verified")
		}
	})
}

// validHeader reports whether s survives as an HTTP header value as is
// (http.Header.Get returns what Set stored; on the wire Go would refuse it).
func validHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return s == string(bytes.TrimSpace([]byte(s)))
}

// A signer keeps its HMAC states through garbage collections (a
// sync.Pool would drop them): an endpoint signing one request now and then
// computes its key schedule once, and keeps no more states than signed at
// once.
func TestASignerKeepsItsKeyScheduleThroughGarbageCollections(t *testing.T) {
	keys := [][]byte{[]byte("0123456789abcdef01234567"), []byte("another key, rotated in")}
	s := newSigner(keys)
	want := sign(keys, "e-1", 1614265330, []byte(`{"a":1}`))
	if got := s.sign("e-1", 1614265330, []byte(`{"a":1}`)); got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
	first := s.free[0]
	for range 3 {
		runtime.GC()
		if got := s.sign("e-1", 1614265330, []byte(`{"a":1}`)); got != want {
			t.Fatalf("signature %q, want %q", got, want)
		}
	}
	if len(s.free) != 1 || s.free[0] != first {
		t.Fatalf("after collections the signer holds %d states (the first kept: %v), want the first one alone", len(s.free), len(s.free) > 0 && s.free[0] == first)
	}
	a, b := s.get(), s.get() // two signing at once
	s.put(a)
	s.put(b)
	if len(s.free) != 2 {
		t.Fatalf("after two signed at once the signer holds %d states, want 2", len(s.free))
	}
}
