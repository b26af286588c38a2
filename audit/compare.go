package audit

import (
	"bufio"
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"os"
	"slices"
	"strconv"
	"time"
	"unsafe"
)

// Defaults of Options.
const (
	DefaultMemory = 256 << 20
	DefaultList   = 100
	// MinMemory is the least Options.Memory: below it the sort would spill
	// a run every few records.
	MinMemory = 64 << 10
)

// Options bound an audit.
type Options struct {
	// Memory is the most bytes the comparison's sort buffers hold, in all;
	// past it they spill to TempDir. Default 256 MiB; at least 64 KiB.
	Memory int64
	// TempDir is where sorts spill. Default os.TempDir().
	TempDir string
	// List is how many findings of each kind a Report lists. Default 100.
	List int
}

func (o Options) withDefaults() Options {
	if o.Memory == 0 {
		o.Memory = DefaultMemory
	}
	if o.Memory < MinMemory {
		o.Memory = MinMemory
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	defaults.Positive(&o.List, DefaultList)
	return o
}

// Delivery is one message read back from a destination.
type Delivery struct {
	ID     string
	Log    string // the ordered log it is in: "topic[partition]", a stream, a queue; "": no order
	Offset int64  // its place in Log
	At     string // where it is, for humans; "" is Log@Offset
	Claims bool   // it names a transaction of the range (Span.Claims)
}

func (d Delivery) where() string {
	if d.At != "" {
		return d.At
	}
	return d.Log + "@" + strconv.FormatInt(d.Offset, 10)
}

// firstDelivery is an event's first delivery, for the order check.
type firstDelivery struct {
	AggregateID, Log, At, ID string
	Offset, Seq              int64
}

var (
	missingCodec = codec[Missing]{
		cmp: func(a, b Missing) int {
			if c := cmp.Compare(a.ID, b.ID); c != 0 {
				return c
			}
			return cmp.Compare(a.Seq, b.Seq)
		},
		size: func(m Missing) int64 {
			return int64(unsafe.Sizeof(m)) + int64(len(m.ID)+len(m.AggregateID)+len(m.GTID)+len(m.Dest)+len(m.Why))
		},
		write: func(w *bufio.Writer, m Missing) {
			putString(w, m.ID)
			putString(w, m.AggregateID)
			putString(w, m.GTID)
			putString(w, m.Dest)
			putString(w, m.Why)
			putVarint(w, m.Seq)
			putTime(w, m.Commit)
		},
		read: func(br *bufio.Reader) (Missing, error) {
			r := newReader(br)
			m := Missing{Event: Event{ID: r.string(), AggregateID: r.string(), GTID: r.string(), Dest: r.string()}}
			m.Why = r.string()
			m.Seq = r.varint()
			m.Commit = r.time()
			return m, r.err
		},
	}
	deliveryCodec = codec[Delivery]{
		cmp: func(a, b Delivery) int {
			if c := cmp.Compare(a.ID, b.ID); c != 0 {
				return c
			}
			if c := cmp.Compare(a.Log, b.Log); c != 0 {
				return c
			}
			return cmp.Compare(a.Offset, b.Offset)
		},
		size: func(d Delivery) int64 {
			return int64(unsafe.Sizeof(d)) + int64(len(d.ID)+len(d.Log)+len(d.At))
		},
		write: func(w *bufio.Writer, d Delivery) {
			putString(w, d.ID)
			putString(w, d.Log)
			putString(w, d.At)
			putVarint(w, d.Offset)
			claims := uint64(0)
			if d.Claims {
				claims = 1
			}
			putUvarint(w, claims)
		},
		read: func(br *bufio.Reader) (Delivery, error) {
			r := newReader(br)
			d := Delivery{ID: r.string(), Log: r.string(), At: r.string(), Offset: r.varint()}
			d.Claims = r.uvarint() == 1
			return d, r.err
		},
	}
	firstCodec = codec[firstDelivery]{
		cmp: func(a, b firstDelivery) int {
			if c := cmp.Compare(a.AggregateID, b.AggregateID); c != 0 {
				return c
			}
			if c := cmp.Compare(a.Log, b.Log); c != 0 {
				return c
			}
			if c := cmp.Compare(a.Offset, b.Offset); c != 0 {
				return c
			}
			return cmp.Compare(a.Seq, b.Seq)
		},
		size: func(f firstDelivery) int64 {
			return int64(unsafe.Sizeof(f)) + int64(len(f.AggregateID)+len(f.Log)+len(f.At)+len(f.ID))
		},
		write: func(w *bufio.Writer, f firstDelivery) {
			putString(w, f.AggregateID)
			putString(w, f.Log)
			putString(w, f.At)
			putString(w, f.ID)
			putVarint(w, f.Offset)
			putVarint(w, f.Seq)
		},
		read: func(br *bufio.Reader) (firstDelivery, error) {
			r := newReader(br)
			f := firstDelivery{AggregateID: r.string(), Log: r.string(), At: r.string(), ID: r.string()}
			f.Offset, f.Seq = r.varint(), r.varint()
			return f, r.err
		},
	}
)

func putTime(w *bufio.Writer, t time.Time) {
	if t.IsZero() {
		putUvarint(w, 0)
		return
	}
	putUvarint(w, 1)
	putVarint(w, t.UnixNano())
}

func (r *reader) time() time.Time {
	if r.uvarint() == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.varint()).UTC()
}

// Comparison matches the events a destination must hold (Expect) against
// what it holds (Deliver), with bounded memory, and makes the Report. Use
// it from one goroutine; Close removes what it spilled.
type Comparison struct {
	opts       Options
	stats      SpillStats
	events     *sorter[Missing]
	deliveries *sorter[Delivery]
	firsts     *sorter[firstDelivery]
	known      missingList // events already known missing (Miss)
}

// NewComparison returns an empty comparison bounded by opts.
func NewComparison(opts Options) *Comparison {
	opts = opts.withDefaults()
	c := &Comparison{opts: opts}
	third := opts.Memory / 3
	c.events = newSorter(missingCodec, third, opts.TempDir, &c.stats)
	c.deliveries = newSorter(deliveryCodec, third, opts.TempDir, &c.stats)
	c.firsts = newSorter(firstCodec, third, opts.TempDir, &c.stats)
	c.known.limit = opts.List
	return c
}

// Expect adds an event the destination must hold; why is reported if it
// does not.
func (c *Comparison) Expect(e Event, why string) error {
	return c.events.add(Missing{Event: e, Why: why})
}

// Miss records an event known to be missing without looking (a webhook
// event dead-lettered or past its endpoint's checkpoint).
func (c *Comparison) Miss(e Event, why string) { c.known.add(Missing{Event: e, Why: why}) }

// Deliver adds a message read back from the destination. Within one Log,
// messages must be delivered in their log's order (Offset ascending) for
// the order check to mean anything.
func (c *Comparison) Deliver(d Delivery) error { return c.deliveries.add(d) }

// Close removes the comparison's spilled runs.
func (c *Comparison) Close() {
	c.events.remove()
	c.deliveries.remove()
	c.firsts.remove()
}

// Report matches the events with the deliveries. The comparison can make
// only one report.
func (c *Comparison) Report(ctx context.Context, sinkName string, span *Span) (Report, error) {
	r := Report{Sink: sinkName, Events: span.Events, Transactions: span.Transactions, First: span.First, Last: span.Last,
		Duplicates: map[string]int{}}
	limit := c.opts.List
	nextE, closeE, err := c.events.sorted()
	if err != nil {
		return r, err
	}
	defer closeE()
	nextD, closeD, err := c.deliveries.sorted()
	if err != nil {
		return r, err
	}
	defer closeD()
	missing := c.known
	e, eok, err := nextE()
	if err != nil {
		return r, err
	}
	d, dok, err := nextD()
	if err != nil {
		return r, err
	}
	twice := 0
	for n := 0; eok || dok; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return r, ctx.Err()
		}
		id := e.ID
		if !eok || dok && d.ID < id {
			id = d.ID
		}
		var ev *Missing
		for eok && e.ID == id {
			if ev != nil {
				twice++
				if len(r.Notes) < limit {
					r.Notes = append(r.Notes, fmt.Sprintf("id %s was committed twice in the range, as #%d and #%d (the later one is audited)", id, ev.Seq, e.Seq))
				}
			}
			cp := e
			ev = &cp
			if e, eok, err = nextE(); err != nil {
				return r, err
			}
		}
		count := 0
		var first Delivery
		for dok && d.ID == id {
			if count == 0 {
				first = d
			}
			count++
			if ev == nil && d.Claims {
				r.UnexpectedCount++
				if len(r.Unexpected) < limit {
					r.Unexpected = append(r.Unexpected, fmt.Sprintf("%s (%s)", d.ID, d.where()))
				}
			}
			if d, dok, err = nextD(); err != nil {
				return r, err
			}
		}
		switch {
		case ev == nil:
		case count == 0:
			if ev.Why == "" {
				ev.Why = "not found in " + ev.Dest
			}
			missing.add(*ev)
		default:
			if count > 1 {
				r.DuplicateCount++
				if len(r.Duplicates) < limit {
					r.Duplicates[id] = count
				}
			}
			if first.Log == "" { // an unordered list
				continue
			}
			if err := c.firsts.add(firstDelivery{AggregateID: ev.AggregateID, Log: first.Log, At: first.where(), ID: id,
				Offset: first.Offset, Seq: ev.Seq}); err != nil {
				return r, err
			}
		}
	}
	if twice > limit {
		r.Notes = append(r.Notes, fmt.Sprintf("… %d more ids committed twice in the range", twice-limit))
	}
	r.Missing, r.MissingCount = missing.sorted(), missing.count
	if err := c.checkOrder(ctx, &r); err != nil {
		return r, err
	}
	r.Spill = c.stats
	return r, nil
}

// checkOrder walks the first deliveries per aggregate and log, in log
// order: one whose event was committed before one delivered earlier is out
// of order.
func (c *Comparison) checkOrder(ctx context.Context, r *Report) error {
	next, closeF, err := c.firsts.sorted()
	if err != nil {
		return err
	}
	defer closeF()
	var agg, log string
	var maxSeq int64
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		f, ok, err := next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if n == 0 || f.AggregateID != agg || f.Log != log {
			agg, log, maxSeq = f.AggregateID, f.Log, f.Seq
			continue
		}
		if f.Seq < maxSeq {
			r.OrderCount++
			if len(r.Order) < c.opts.List {
				r.Order = append(r.Order, fmt.Sprintf("aggregate %s: event %s (binlog #%d) first delivered after #%d (%s)", f.AggregateID, f.ID, f.Seq, maxSeq, f.At))
			}
			continue
		}
		maxSeq = f.Seq
	}
}

// missingList keeps the limit earliest-committed missing events, and counts
// them all.
type missingList struct {
	limit int
	count int
	h     missingHeap // a max-heap by Seq
}

type missingHeap []Missing

func (h missingHeap) Len() int           { return len(h) }
func (h missingHeap) Less(i, j int) bool { return h[i].Seq > h[j].Seq }
func (h missingHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *missingHeap) Push(x any)        { *h = append(*h, x.(Missing)) }
func (h *missingHeap) Pop() any {
	m := (*h)[len(*h)-1]
	*h = (*h)[:len(*h)-1]
	return m
}

func (l *missingList) add(m Missing) {
	l.count++
	switch {
	case len(l.h) < l.limit:
		heap.Push(&l.h, m)
	case m.Seq < l.h[0].Seq:
		l.h[0] = m
		heap.Fix(&l.h, 0)
	}
}

func (l *missingList) sorted() []Missing {
	out := slices.Clone(l.h)
	slices.SortFunc(out, func(a, b Missing) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}
