package kafka

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
)

// EventOf reads back the event of a message the sink produced (see the
// package doc's Messages): the inverse of the sink's headers, key and value.
// The aggregate id is the message key (the default kafka.key template); with
// envelope (kafka.envelope) the value is the envelope, and the payload and
// aggregate id are the envelope's. Headers after the sink's own are the
// event's, in order. A message without the sink's headers is an error: it
// was not produced by the relay.
func EventOf(m kafkago.Message, envelope bool) (*event.Event, error) {
	hs := m.Headers
	meta := []string{HeaderID, HeaderType, HeaderAggregateType, HeaderGTID, HeaderBinlogFile, HeaderBinlogPos, HeaderTable}
	if len(hs) < len(meta) {
		return nil, fmt.Errorf("kafka %s[%d] offset %d: not a message of the relay's kafka sink (it has %d headers, not the sink's %d)", m.Topic, m.Partition, m.Offset, len(hs), len(meta))
	}
	v := make([]string, len(meta))
	for i, k := range meta {
		if hs[i].Key != k {
			return nil, fmt.Errorf("kafka %s[%d] offset %d: not a message of the relay's kafka sink (header %d is %q, not %q)", m.Topic, m.Partition, m.Offset, i, hs[i].Key, k)
		}
		v[i] = string(hs[i].Value)
	}
	pos, err := strconv.ParseUint(v[5], 10, 32)
	if err != nil && v[5] != "" {
		return nil, fmt.Errorf("kafka %s[%d] offset %d: header %s %q: %w", m.Topic, m.Partition, m.Offset, HeaderBinlogPos, v[5], err)
	}
	rest := hs[len(meta):]
	if len(rest) >= 2 && rest[0].Key == HeaderSink && rest[1].Key == HeaderPartitions {
		rest = rest[2:]
	}
	e := &event.Event{ID: v[0], Type: v[1], AggregateType: v[2], AggregateID: string(m.Key), Payload: m.Value,
		Table: v[6], CommitTime: m.Time.UTC(), Source: event.Source{GTID: v[3], File: v[4], Pos: uint32(pos)}}
	if len(m.Value) == 0 {
		e.Payload = []byte{}
	}
	for _, h := range rest {
		e.Headers = append(e.Headers, event.Header{Key: h.Key, Value: string(h.Value)})
	}
	if envelope {
		var env struct {
			AggregateID     string          `json:"aggregate_id"`
			PayloadEncoding string          `json:"payload_encoding"`
			Payload         json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(m.Value, &env); err != nil {
			return nil, fmt.Errorf("kafka %s[%d] offset %d: the value is not the sink's envelope (is kafka.envelope off for this topic?): %w", m.Topic, m.Partition, m.Offset, err)
		}
		e.AggregateID = env.AggregateID
		switch env.PayloadEncoding {
		case "sql_null":
			e.Payload = nil
		case "base64":
			var s string
			if err := json.Unmarshal(env.Payload, &s); err != nil {
				return nil, fmt.Errorf("kafka %s[%d] offset %d: envelope payload: %w", m.Topic, m.Partition, m.Offset, err)
			}
			if e.Payload, err = base64.StdEncoding.DecodeString(s); err != nil {
				return nil, fmt.Errorf("kafka %s[%d] offset %d: envelope payload: %w", m.Topic, m.Partition, m.Offset, err)
			}
		default:
			e.Payload = []byte(env.Payload)
		}
	}
	return e, nil
}

// Dialer returns a kafka-go dialer with the (defaulted) config's client
// id, TLS and SASL: what a consumer of the sink's topics connects with.
func (c Config) Dialer() (*kafkago.Dialer, error) {
	cn, err := c.conn()
	if err != nil {
		return nil, err
	}
	return &kafkago.Dialer{ClientID: c.ClientID, Timeout: cn.timeout, DualStack: true, TLS: cn.tls, SASLMechanism: cn.mech}, nil
}

// conn is how every client of the sink's brokers connects: the config's
// TLS, SASL mechanism and request timeout.
type conn struct {
	tls     *tls.Config
	mech    sasl.Mechanism
	timeout time.Duration
}

func (c Config) conn() (conn, error) {
	tc, err := c.TLS.Build("kafka.tls")
	if err != nil {
		return conn{}, err
	}
	mech, err := c.SASL.build()
	if err != nil {
		return conn{}, err
	}
	timeout := c.RequestTimeout
	defaults.Positive(&timeout, DefaultRequestTimeout)
	return conn{tls: tc, mech: mech, timeout: timeout}, nil
}

// transport returns a kafka-go transport that connects as c says.
func (c Config) transport() (*kafkago.Transport, error) {
	cn, err := c.conn()
	if err != nil {
		return nil, err
	}
	return &kafkago.Transport{Dial: (&net.Dialer{Timeout: cn.timeout}).DialContext, DialTimeout: cn.timeout,
		ClientID: c.ClientID, TLS: cn.tls, SASL: cn.mech}, nil
}
