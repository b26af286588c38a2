package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
)

// sign returns the Standard Webhooks v1 webhook-signature header value: one
// "v1,<base64 HMAC-SHA256(key, id.timestamp.body)>" per key, space-separated.
func sign(keys [][]byte, id string, timestamp int64, body []byte) string {
	ts := strconv.FormatInt(timestamp, 10)
	var out []byte
	for i, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, "v1,"...)
		out = base64.StdEncoding.AppendEncode(out, mac.Sum(nil))
	}
	return string(out)
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
