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
type signer struct {
	keys [][]byte
	pool sync.Pool // of *macs
}

// macs is one goroutine's HMAC states (one per key) and scratch space.
type macs struct {
	h   []hash.Hash
	buf []byte // "id.timestamp." then the digest
	out []byte
}

func newSigner(keys [][]byte) *signer {
	s := &signer{keys: keys}
	s.pool.New = func() any {
		m := &macs{h: make([]hash.Hash, len(keys))}
		for i, k := range keys {
			m.h[i] = hmac.New(sha256.New, k)
		}
		return m
	}
	return s
}

func (s *signer) sign(id string, timestamp int64, body []byte) string {
	m := s.pool.Get().(*macs)
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
	s.pool.Put(m)
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
