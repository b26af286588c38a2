package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash"
	"strconv"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
)

// sign returns the Standard Webhooks v1 webhook-signature header value: one
// "v1,<base64 HMAC-SHA256(key, id.timestamp.body)>" per key, space-separated.
func sign(keys [][]byte, id string, timestamp int64, body []byte) string {
	return newSigner(keys).sign(id, timestamp, body)
}

// signer signs with its keys. Each key's HMAC state (the key schedule: the
// hashed ipad and opad blocks) is computed once and reused by Reset, and the
// signing buffers are reused, so a signature costs its hashing and one
// string. Safe for concurrent use.
//
// The states wait in a free list of the signer's own, not a sync.Pool: a
// pool is emptied by garbage collections, and an endpoint that signs now
// and then (one of a gateway's thousand, with one request at a time) found
// it emptied and computed its key schedule again for most requests. The
// list holds at most as many states as signed at once, that is at most the
// endpoint's max_concurrency (each ~0.5 KB per key).
type signer struct {
	keys [][]byte
	mu   sync.Mutex
	free []*macs
}

// macs is one goroutine's HMAC states (one per key) and scratch space.
type macs struct {
	h   []hash.Hash
	buf []byte // "id.timestamp." then the digest
	out []byte
}

func newSigner(keys [][]byte) *signer {
	return &signer{keys: keys}
}

// get takes a free state, or makes one.
func (s *signer) get() *macs {
	s.mu.Lock()
	if n := len(s.free); n > 0 {
		m := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		s.mu.Unlock()
		return m
	}
	s.mu.Unlock()
	m := &macs{h: make([]hash.Hash, len(s.keys))}
	for i, k := range s.keys {
		m.h[i] = hmac.New(sha256.New, k)
	}
	return m
}

func (s *signer) put(m *macs) {
	s.mu.Lock()
	s.free = append(s.free, m)
	s.mu.Unlock()
}

func (s *signer) sign(id string, timestamp int64, body []byte) string {
	m := s.get()
	m.buf = append(m.buf[:0], id...)
	m.buf = append(m.buf, '.')
	m.buf = strconv.AppendInt(m.buf, timestamp, 10)
	m.buf = append(m.buf, '.')
	prefix := len(m.buf)
	m.out = m.out[:0]
	for i, mac := range m.h {
		mac.Reset()
		mac.Write(m.buf[:prefix])
		mac.Write(body)
		if i > 0 {
			m.out = append(m.out, ' ')
		}
		m.out = append(m.out, "v1,"...)
		m.buf = mac.Sum(m.buf[:prefix])
		m.out = base64.StdEncoding.AppendEncode(m.out, m.buf[prefix:])
		m.buf = m.buf[:prefix]
	}
	sig := string(m.out)
	s.put(m)
	return sig
}

// requestBody renders the body sent for e in the given mode.
func requestBody(c *EndpointConfig, e *event.Event) []byte {
	if c.CloudEvents.Mode == cloudevent.Structured {
		return c.CloudEvents.Structured(e)
	}
	if c.Body != BodyEnvelope {
		return e.Payload
	}
	var b bytes.Buffer
	b.Grow(len(e.Payload) + 160 + len(e.ID) + len(e.Type) + len(e.AggregateType) + len(e.AggregateID))
	b.WriteString(`{"id":`)
	writeJSONString(&b, e.ID)
	b.WriteString(`,"type":`)
	writeJSONString(&b, e.Type)
	b.WriteString(`,"aggregate_type":`)
	writeJSONString(&b, e.AggregateType)
	b.WriteString(`,"aggregate_id":`)
	writeJSONString(&b, e.AggregateID)
	b.WriteString(`,"timestamp":`)
	writeJSONString(&b, e.CommitTime.UTC().Format(time.RFC3339))
	b.WriteString(`,"data":`)
	switch {
	case len(bytes.TrimSpace(e.Payload)) == 0:
		b.WriteString("null")
	case json.Valid(e.Payload):
		// The payload's JSON exactly as stored: never re-encoded.
		b.Write(e.Payload)
	default:
		writeJSONString(&b, string(e.Payload))
	}
	b.WriteByte('}')
	return b.Bytes()
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode appends a newline
}
