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
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
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
	return section.Build(c, func(c Config) (*Auditor, error) { return buildAuditor(c, skew) })
}

// buildAuditor returns the Auditor of a sink config with its defaults
// applied and validated (by NewAuditor, or by config.Load).
func buildAuditor(c Config, skew time.Duration) (*Auditor, error) {
	t, cl, err := c.reach()
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
		var last string // the stream's last entry, read as any page is
		err := walk(ctx, a.client, key, true, "+", "-", 1, func(m entry) bool { last = m.ID; return false })
		if err != nil {
			return fmt.Errorf("read redis stream %q: %w", key, err)
		}
		if last == "" {
			continue
		}
		var n int64
		var eerr error
		err = walk(ctx, a.client, key, false, start, last, auditPage, func(m entry) bool {
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
//
// Each page is read by pageScript, on the server, so that what one read
// brings in is bounded in bytes whatever the stream holds: whole entries up
// to readback.PageBytes a page (at least one), and of an entry larger than
// that only its id and its short read-back fields (entry.Withheld). A
// server that refuses the script (an ACL without @scripting) is an error.
func walk(ctx context.Context, cl *goredis.Client, key string, backwards bool, start, stop string, page int64, each func(entry) bool) error {
	cmd := "XRANGE"
	if backwards {
		cmd = "XREVRANGE"
	}
	args := []any{cmd, "", stop, page, readback.PageBytes, readback.MaxID}
	args = append(args, shortFields...)
	for {
		args[1] = start
		reply, err := pageScript.Run(ctx, cl, []string{key}, args...).Slice()
		if err != nil {
			return err
		}
		done, entries, err := pageOf(reply)
		if err != nil {
			// Not an answer the read can use: falls back, never retried.
			return fmt.Errorf("%s: %w: %w", cmd, err, sink.ErrCannotRecover)
		}
		var last string
		for _, r := range entries {
			e, err := entryOf(r)
			if err != nil {
				return fmt.Errorf("%s: %w: %w", cmd, err, sink.ErrCannotRecover)
			}
			if !each(e) {
				return nil
			}
			last = e.ID
		}
		if done || last == "" {
			return nil // the stream's end (or first entry)
		}
		start = "(" + last
	}
}

// pageScript reads one page of a stream on the server. KEYS[1] is the
// stream; ARGV: XRANGE or XREVRANGE, the range's start and stop, the most
// entries, the most bytes (readback.PageBytes), the longest value a
// withheld entry keeps, then the names of the fields it keeps. It reads
// 16 entries at a time and counts what each costs (its fields, and a little
// for each); it returns {done, entries}: done is 1 at the range's end, and
// the entries are whole while their bytes fit (the first always is, unless
// it is withheld). An entry larger than the most bytes is withheld: {id,
// [name, value, …] of its kept fields with short values, its size}.
var pageScript = goredis.NewScript(`
local key, cmd, start, stop = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local count, budget, short = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local keep = {}
for i = 7, #ARGV do keep[ARGV[i]] = true end
local out, used = {}, 0
while #out < count do
  local ask = math.min(16, count - #out)
  local entries = redis.call(cmd, key, start, stop, 'COUNT', ask)
  for _, e in ipairs(entries) do
    local fields = e[2]
    local size = 64
    for _, f in ipairs(fields) do size = size + 32 + #f end
    if size > budget then
      local kept, cost = {}, 64
      for i = 1, #fields - 1, 2 do
        local name, value = fields[i], fields[i + 1]
        if keep[name] and #value <= short then
          kept[#kept + 1] = name
          kept[#kept + 1] = value
          cost = cost + 64 + #name + #value
        end
      end
      e = {e[1], kept, size}
      size = cost
    end
    if #out > 0 and used + size > budget then return {0, out} end
    used = used + size
    out[#out + 1] = e
    start = '(' .. e[1]
  end
  if #entries < ask then return {1, out} end
end
return {0, out}
`)

// shortFields are the fields a withheld entry keeps: what Recover and the
// audit read of an entry, besides its bytes.
var shortFields = []any{route.HeaderID, route.HeaderGTID, FieldSink, HeaderFieldPrefix + event.HeaderReplay}

// pageOf reads pageScript's answer: {done, entries}.
func pageOf(reply []any) (done bool, entries []any, err error) {
	if len(reply) != 2 {
		return false, nil, fmt.Errorf("a page is %d items, not [done, entries]", len(reply))
	}
	d, ok := reply[0].(int64)
	if !ok {
		return false, nil, fmt.Errorf("a page's end is %T, not a number", reply[0])
	}
	if reply[1] != nil {
		if entries, ok = reply[1].([]any); !ok {
			return false, nil, fmt.Errorf("a page's entries are %T, not a list", reply[1])
		}
	}
	return d == 1, entries, nil
}

// entry is a stream entry as the server returns it: its id and its fields,
// name and value, in the order they were added (go-redis's XMessage keeps
// them in a map, which loses their order and repeated names).
type entry struct {
	ID     string
	Fields []string // name, value, name, value…
	// Withheld is the entry's size (pageScript's count of it) when it was
	// too large to read whole: Fields are then only its short read-back
	// fields.
	Withheld int64
}

// entryOf reads one entry of a page: [id, [name, value, …]], or [id,
// [name, value, …], size] withheld.
func entryOf(r any) (entry, error) {
	a, ok := r.([]any)
	if !ok || len(a) != 2 && len(a) != 3 {
		return entry{}, fmt.Errorf("an entry is %T, not [id, fields]", r)
	}
	id, ok := a[0].(string)
	if !ok {
		return entry{}, fmt.Errorf("an entry id is %T, not a string", a[0])
	}
	e := entry{ID: id}
	if len(a) == 3 {
		if e.Withheld, ok = a[2].(int64); !ok || e.Withheld <= 0 {
			return entry{}, fmt.Errorf("entry %s: its size is %v, not a positive number", id, a[2])
		}
	}
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
