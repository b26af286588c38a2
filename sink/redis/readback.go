package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/readback"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

// auditPage is how many entries one XRANGE of the audit's read reads.
const auditPage = 1000

// Auditor reads a sink's streams back for `outbox-relay audit`
// (sink.Auditor): the stream key each event goes to, and a client of the
// sink's server with its credentials. It is used by one goroutine.
type Auditor struct {
	stream *route.Template
	client *goredis.Client
	skew   time.Duration
}

var _ sink.Auditor = (*Auditor)(nil)

// NewAuditor returns the Auditor of a sink config (its defaults applied
// and validated here); skew is how far the Redis server's clock may be
// behind the source's. It does not touch the network.
func NewAuditor(c Config, skew time.Duration) (*Auditor, error) {
	c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return buildAuditor(c, skew)
}

// buildAuditor returns the Auditor of a sink config with its defaults
// applied and validated (by NewAuditor, or by config.Load).
func buildAuditor(c Config, skew time.Duration) (*Auditor, error) {
	t, err := route.Parse("redis.stream", c.Stream)
	if err != nil {
		return nil, err
	}
	cl, err := newClient(c)
	if err != nil {
		return nil, err
	}
	return &Auditor{stream: t, client: cl, skew: skew}, nil
}

// Dest is the stream key the sink appends e to.
func (a *Auditor) Dest(e *event.Event) (string, error) { return a.stream.Render(e) }

// Close closes the client.
func (a *Auditor) Close() error { return a.client.Close() }

// ReadBack reads each stream key forwards with XRANGE, from the entries
// added at from less the clock skew (an entry's id is when the server added
// it, by its clock) to the stream's last entry when its read begins.
// Entries carry their "id" and "gtid" fields. Each key is a Log, in stream
// order. A key that does not exist holds nothing.
func (a *Auditor) ReadBack(ctx context.Context, from time.Time, keys []string, each func(sink.Stored) error) error {
	start := strconv.FormatInt(from.Add(-a.skew).UnixMilli(), 10) + "-0"
	for _, key := range keys {
		last, err := a.client.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return fmt.Errorf("read redis stream %q: %w", key, err)
		}
		if len(last) == 0 {
			continue
		}
		var n int64
		var eerr error
		err = walk(ctx, a.client, key, false, start, last[0].ID, auditPage, func(m entry) bool {
			f := fieldsOf(m)
			n++
			eerr = each(sink.Stored{ID: f.id, GTID: f.gtid, Time: entryTime(m.ID), Log: key, Offset: n, At: key + "@" + m.ID})
			return eerr == nil
		})
		if err != nil {
			return fmt.Errorf("read redis stream %q: %w", key, err)
		}
		if eerr != nil {
			return eerr
		}
	}
	return nil
}

// walk reads stream key page entries at a time, from entry id start to
// stop (both inclusive; "-" and "+" are the ends), forwards with XRANGE or
// backwards (start the newer) with XREVRANGE, and calls each for every
// entry until each returns false. It is the read the audit (forwards) and
// Recover (backwards, from the end) share.
func walk(ctx context.Context, cl *goredis.Client, key string, backwards bool, start, stop string, page int64, each func(entry) bool) error {
	cmd := "XRANGE"
	if backwards {
		cmd = "XREVRANGE"
	}
	for {
		reply, err := cl.Do(ctx, cmd, key, start, stop, "COUNT", page).Slice()
		if err != nil {
			return err
		}
		var last string
		for _, r := range reply {
			e, err := entryOf(r)
			if err != nil {
				// Not an answer the read can use: falls back, never retried.
				return fmt.Errorf("%s: %w: %w", cmd, err, sink.ErrCannotRecover)
			}
			if !each(e) {
				return nil
			}
			last = e.ID
		}
		if int64(len(reply)) < page {
			return nil // the stream's end (or first entry)
		}
		start = "(" + last
	}
}

// entry is a stream entry as the server returns it: its id and its fields,
// name and value, in the order they were added (go-redis's XMessage keeps
// them in a map, which loses their order and repeated names).
type entry struct {
	ID     string
	Fields []string // name, value, name, value…
}

// entryOf reads one entry of an XRANGE reply: [id, [name, value, …]].
func entryOf(r any) (entry, error) {
	a, ok := r.([]any)
	if !ok || len(a) != 2 {
		return entry{}, fmt.Errorf("an entry is %T, not [id, fields]", r)
	}
	id, ok := a[0].(string)
	if !ok {
		return entry{}, fmt.Errorf("an entry id is %T, not a string", a[0])
	}
	e := entry{ID: id}
	fs, ok := a[1].([]any)
	if !ok && a[1] != nil {
		return entry{}, fmt.Errorf("entry %s: its fields are %T, not a list", id, a[1])
	}
	e.Fields = make([]string, len(fs))
	for i, f := range fs {
		if e.Fields[i], ok = f.(string); !ok {
			return entry{}, fmt.Errorf("entry %s: a field is %T, not a string", id, f)
		}
	}
	return e, nil
}

// fields is what read-back uses of an entry.
type fields struct {
	id, gtid, sink string
	hasSink        bool // a relay_sink field, maybe empty
	replay         bool // a relay_replay field: a replay job's copy
}

// fieldsOf reads the read-back fields of e; of a name given twice, the
// last value counts (as go-redis's map of them has it).
func fieldsOf(e entry) fields {
	var f fields
	for i := 0; i+1 < len(e.Fields); i += 2 {
		switch v := e.Fields[i+1]; e.Fields[i] {
		case route.HeaderID:
			f.id = v
		case route.HeaderGTID:
			f.gtid = v
		case FieldSink:
			f.sink, f.hasSink = v, true
		case HeaderFieldPrefix + event.HeaderReplay:
			f.replay = true
		}
	}
	return f
}

// digest is the sink.Digest of an entry of stream key with fields (name,
// value, …, in order). Nothing is left out: the sink writes an event's
// entry the same way every time.
func digest(key string, fields []string) sink.Digest {
	h := readback.NewHash()
	h.String(key)
	for _, f := range fields {
		h.String(f)
	}
	return h.Sum()
}

// entryTime is when a stream entry was added: the milliseconds of its id.
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n)
}
