package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/readback"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

// recoverPage is the most entries one page of Recover's read holds (fewer
// when their bytes pass readback.PageBytes), and how many keys one SCAN
// asks for (a variable for tests).
var recoverPage int64 = 500

var _ sink.Recoverer = (*Sink)(nil)

// Recover reads the sink's streams back and calls seen for every entry it
// finds there of a transaction after the checkpoint after; seen is called
// only when Recover returns nil.
//
// The streams read are the fixed key, or, with a templated key, every
// stream key of the database that the template could have rendered (found
// with SCAN MATCH on its fixed text, TYPE stream; a template with {{if}} or
// {{range}} matches every stream). Each is read from its last entry
// backwards with XREVRANGE, at most 500 entries and about
// readback.PageBytes at a time (see walk), until an entry whose gtid field
// after holds: the pipeline writes one batch at a time and the
// checkpoint moves over whole acknowledged batches, so an older entry after
// the checkpoint is at most a straggler of a failed XADD (a timeout whose
// entry landed), which is then sent again: a duplicate, never a loss. Every
// entry reported is in the stream.
//
// Each entry reported is a claim with its Digest: the pipeline skips an
// event only when its claim's digest is the sink's Digest of it. An entry
// after the checkpoint too large to read whole (over readback.PageBytes),
// or whose id or gtid is longer than a claim keeps (readback.MaxID,
// MaxGTID), is reported as dropped (sink.Held.Dropped), without its bytes,
// and the read goes on past it.
//
// It holds, and returns nil, only when every entry it reads after the
// checkpoint carries this sink's relay_sink field (Config.Writer) and a
// gtid field. Otherwise it returns an error wrapping sink.ErrCannotRecover
// and naming the stream and entry: an entry without relay_sink (another
// writer, or an entry written before read-back existed) or with another
// sink's name; an empty gtid (GTIDs off); an empty checkpoint; more than
// readback.MaxHeld entries, or readback.MaxHeldBytes of claims, after the
// checkpoint in all; or a server that refuses the read's script. A stream
// whose last entry the checkpoint holds (or that does not exist) holds
// nothing after it; one trimmed (max_len) past the
// checkpoint holds only what is left. Failures to reach the server are
// returned as they are, to be retried.
func (s *Sink) Recover(ctx context.Context, after event.Position, seen func(sink.Held)) error {
	judge, err := readback.New(s.cfg.Writer, after)
	if err != nil {
		return fmt.Errorf("read redis back: %w", err)
	}
	keys, err := s.recoverKeys(ctx)
	if err != nil {
		return err
	}
	var claims readback.Claims
	for _, key := range keys {
		var jerr error
		err := walk(ctx, s.client, key, true, "+", "-", recoverPage, func(m entry) bool {
			f := fieldsOf(m)
			if f.replay {
				// A replay job's copy of an older event (outbox-relay
				// replay): neither the live stream's nor where the read
				// stops.
				return true
			}
			at := fmt.Sprintf("stream %q entry %s", readback.Clip(key, 256), m.ID)
			v, err := judge.Weigh(readback.Message{HasSink: f.hasSink, Sink: f.sink, GTID: f.gtid}, f.id, m.Withheld > 0)
			switch {
			case err != nil:
			case v == readback.Hold:
				err = claims.Hold(sink.Held{GTID: f.gtid, ID: f.id, At: at, Digest: digest(key, m.Fields)})
			case v == readback.Drop:
				err = claims.Drop(readback.Oversized, at, f.gtid, f.id)
			}
			if err != nil {
				jerr = fmt.Errorf("read redis back: %s %w", at, err)
				return false
			}
			return v != readback.Stop
		})
		if err != nil {
			return fmt.Errorf("read redis back: stream %q: %w", key, readBackError(explain(err)))
		}
		if jerr != nil {
			return jerr
		}
	}
	claims.Finish(s.log, "read the redis streams back", slog.Int("streams", len(keys)), after, seen)
	return nil
}

// Digest is the digest of the entry the sink appends for e, as Recover
// computes it of an entry read back (see digest); false when e's XADD
// cannot be built.
func (s *Sink) Digest(e *event.Event) (sink.Digest, bool) {
	a, err := s.xadd(e)
	if err != nil {
		return sink.Digest{}, false
	}
	values := a.Values.([]any)
	fields := make([]string, len(values))
	for i, v := range values {
		switch v := v.(type) {
		case string:
			fields[i] = v
		case []byte:
			fields[i] = string(v)
		default:
			return sink.Digest{}, false
		}
	}
	return digest(a.Stream, fields), true
}

// recoverKeys lists the stream keys the sink may have appended to. What it
// holds is bounded in bytes: SCAN runs through scanScript, which leaves out
// keys longer than maxStreamKey (and counts them), and the keys together
// hold at most readback.MaxHeldBytes. A longer key, or more keys, is an
// error wrapping sink.ErrCannotRecover: the read-back cannot read them all.
func (s *Sink) recoverKeys(ctx context.Context) ([]string, error) {
	if fixed, ok := s.stream.Fixed(); ok {
		return []string{fixed}, nil
	}
	skeleton := s.stream.Skeleton()
	match := route.Glob(skeleton)
	var out []string
	var bytes int
	cursor := "0"
	for {
		reply, err := scanScript.Run(ctx, s.client, nil, cursor, match, recoverPage, maxStreamKey).Slice()
		if err != nil {
			return nil, fmt.Errorf("read redis back: scan for stream keys %q: %w", match, readBackError(explain(err)))
		}
		next, keys, long, err := scanOf(reply)
		if err != nil {
			return nil, fmt.Errorf("read redis back: scan for stream keys %q: %w: %w", match, err, sink.ErrCannotRecover)
		}
		if long > 0 {
			return nil, fmt.Errorf("read redis back: scan for stream keys %q: %d stream keys of more than %d bytes match it: %w",
				match, long, maxStreamKey, sink.ErrCannotRecover)
		}
		for _, k := range keys {
			if route.Match(skeleton, k) {
				out = append(out, k)
				if bytes += len(k) + 64; bytes > readback.MaxHeldBytes {
					return nil, fmt.Errorf("read redis back: scan for stream keys %q: more than %d bytes of stream keys match it: %w",
						match, readback.MaxHeldBytes, sink.ErrCannotRecover)
				}
			}
		}
		if cursor = next; cursor == "0" {
			break
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil // SCAN may return a key twice
}

// maxStreamKey is the longest stream key a read-back reads.
const maxStreamKey = 1024

// scanScript runs one SCAN cursor MATCH pattern COUNT n TYPE stream (ARGV:
// cursor, pattern, n, the longest key) and returns {next cursor, keys, how
// many keys matched that were longer than the longest}: a key's name is
// never sent whole when it is long.
var scanScript = goredis.NewScript(`
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3], 'TYPE', 'stream')
local keys, long, most = {}, 0, tonumber(ARGV[4])
for _, k in ipairs(r[2]) do
  if #k <= most then keys[#keys + 1] = k else long = long + 1 end
end
return {r[1], keys, long}
`)

// scanOf reads scanScript's answer.
func scanOf(reply []any) (next string, keys []string, long int64, err error) {
	if len(reply) != 3 {
		return "", nil, 0, fmt.Errorf("a scan is %d items, not [cursor, keys, long]", len(reply))
	}
	next, ok := reply[0].(string)
	if !ok {
		return "", nil, 0, fmt.Errorf("a scan's cursor is %T, not a string", reply[0])
	}
	if long, ok = reply[2].(int64); !ok {
		return "", nil, 0, fmt.Errorf("a scan's count of long keys is %T, not a number", reply[2])
	}
	ks, ok := reply[1].([]any)
	if !ok && reply[1] != nil {
		return "", nil, 0, fmt.Errorf("a scan's keys are %T, not a list", reply[1])
	}
	for _, k := range ks {
		s, ok := k.(string)
		if !ok {
			return "", nil, 0, fmt.Errorf("a scan's key is %T, not a string", k)
		}
		keys = append(keys, s)
	}
	return next, keys, long, nil
}

// readBackError is err, an error of Recover's reads, as the pipeline should
// take it: wrapping sink.ErrCannotRecover (the restart falls back, loudly)
// when the server answered that the read itself is wrong (WRONGTYPE: the
// key holds no stream; ERR: a reply the read cannot use; NOPERM: the user
// may not run the read's script), so that it is not retried for ever; as is (retried) otherwise: network errors, LOADING,
// READONLY, MASTERDOWN, authentication.
func readBackError(err error) error {
	var re goredis.Error
	if !errors.As(err, &re) {
		return err
	}
	switch msg := re.Error(); {
	case strings.HasPrefix(msg, "NOPERM"), strings.HasPrefix(msg, "ERR unknown command"):
		return fmt.Errorf("%w (read-back reads each page through a script, so that what it reads is bounded in bytes: "+
			"grant the sink's user +evalsha +eval, or @scripting): %w", err, sink.ErrCannotRecover)
	case strings.HasPrefix(msg, "WRONGTYPE"), strings.HasPrefix(msg, "ERR "):
		return fmt.Errorf("%w: %w", err, sink.ErrCannotRecover)
	}
	return err
}
