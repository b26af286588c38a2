package audit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// redisPage is how many entries one XRANGE reads.
const redisPage = 1000

// Redis reads back a redis sink's stream keys into c with XRANGE, from the
// entries added at the span's first commit time less a second and skew (an
// entry's id is when the server added it, by its clock) to each stream's
// last entry when its read begins. Entries are matched by their "id" field
// and claim the range by their "gtid" field. Each key is a Log, in stream
// order. A key that does not exist holds nothing: its events are missing.
func Redis(ctx context.Context, c *Comparison, span *Span, keys []string, cl *goredis.Client, skew time.Duration) error {
	if span.Events == 0 {
		return nil
	}
	start := span.First.Add(-time.Second - skew).UnixMilli()
	for _, key := range keys {
		last, err := cl.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return fmt.Errorf("read redis stream %q: %w", key, err)
		}
		if len(last) == 0 {
			continue
		}
		end := last[0].ID
		from := strconv.FormatInt(start, 10) + "-0"
		var n int64
		for {
			page, err := cl.XRangeN(ctx, key, from, end, redisPage).Result()
			if err != nil {
				return fmt.Errorf("read redis stream %q: %w", key, err)
			}
			for _, m := range page {
				id, _ := m.Values["id"].(string)
				gtid, _ := m.Values["gtid"].(string)
				n++
				if err := c.Deliver(Delivery{ID: id, Log: key, Offset: n, At: key + "@" + m.ID,
					Claims: span.Claims(gtid, entryTime(m.ID))}); err != nil {
					return err
				}
			}
			if len(page) < redisPage {
				break
			}
			from = "(" + page[len(page)-1].ID
		}
	}
	return nil
}

// entryTime is when a stream entry was added: the milliseconds of its id.
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n)
}
