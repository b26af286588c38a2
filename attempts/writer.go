package attempts

import (
	"context"
	"errors"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"log/slog"
	"sync"
	"time"
)

// WriterOptions tune a Writer; zero fields take config.Attempts' defaults.
type WriterOptions struct {
	// Queue is how many attempts wait to be stored at most; more are
	// dropped. Default 10000.
	Queue int
	// BatchSize caps the attempts one Append stores. Default 500.
	BatchSize int
	// Interval is the longest an attempt waits for a batch to fill.
	// Default 200ms.
	Interval time.Duration
	// MaxAge and MaxRows are the retention, applied when the Writer
	// starts and every PruneEvery: older attempts, and the oldest beyond
	// MaxRows, are removed. 0: no bound of that kind.
	MaxAge  time.Duration
	MaxRows int64
	// PruneEvery is how often the retention is applied. Default 1m.
	PruneEvery time.Duration
	// WriteTimeout bounds one Append or Prune. Default 30s.
	WriteTimeout time.Duration
	// Metrics, if set, counts what the Writer does (NewMetrics).
	Metrics *Metrics
	Logger  *slog.Logger
}

// Defaults of WriterOptions (config.Attempts declares the same; a test
// holds them together).
const (
	DefaultQueue      = 10000
	DefaultBatchSize  = 500
	DefaultInterval   = 200 * time.Millisecond
	DefaultPruneEvery = time.Minute
	defaultTimeout    = 30 * time.Second
	// errorLogEvery is the least time between two log lines of failed
	// writes.
	errorLogEvery = time.Minute
)

// Writer is the Recorder of the relay: Record puts an attempt on a bounded
// queue and returns at once (a full queue drops it, counted); one
// goroutine takes the queue in batches (BatchSize, or what came within
// Interval) into the Store, and applies the retention every PruneEvery. A
// batch the store fails to take is dropped (counted, logged at most once a
// minute): the record never holds a delivery back. Attempts the store
// refuses one by one (a *RefusedError) are left out alone, the rest of
// their batch stored: each such batch is an ERROR line, counted with
// reason refused, and /readyz names the last one refused. Close stores what is
// queued and stops. Its methods are safe for concurrent use.
type Writer struct {
	st   Store
	o    WriterOptions
	ch   chan Attempt
	stop chan struct{}
	done chan struct{}
	once sync.Once

	lastErrLog time.Time // of the goroutine
}

// NewWriter starts a Writer into st. The caller keeps st, and closes it
// after the Writer.
func NewWriter(st Store, o WriterOptions) *Writer {
	defaults.Positive(&o.Queue, DefaultQueue)
	defaults.Positive(&o.BatchSize, DefaultBatchSize)
	defaults.Positive(&o.Interval, DefaultInterval)
	defaults.Positive(&o.PruneEvery, DefaultPruneEvery)
	defaults.Positive(&o.WriteTimeout, defaultTimeout)
	defaults.Logger(&o.Logger)
	w := &Writer{st: st, o: o, ch: make(chan Attempt, o.Queue), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Store returns the store the Writer writes to (for searches of the
// running relay's record).
func (w *Writer) Store() Store { return w.st }

// Record implements Recorder: it queues a, or drops it when the queue is
// full. It never blocks.
func (w *Writer) Record(a Attempt) {
	select {
	case w.ch <- a:
	default:
		w.o.Metrics.dropped(ReasonQueueFull, 1)
	}
}

// Close stores the attempts queued, stops the Writer and waits for it (at
// most as long as ctx lets it; what is left then is dropped). Record after
// Close drops.
func (w *Writer) Close(ctx context.Context) error {
	w.once.Do(func() { close(w.stop) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Writer) run() {
	defer close(w.done)
	prune := time.NewTicker(w.o.PruneEvery)
	defer prune.Stop()
	w.prune()
	batch := make([]Attempt, 0, w.o.BatchSize)
	fill := time.NewTimer(w.o.Interval)
	fill.Stop()
	for {
		select {
		case a := <-w.ch:
			batch = append(batch, a)
		case <-prune.C:
			w.prune()
			continue
		case <-w.stop:
			w.drain(batch)
			return
		}
		// Fill the batch for at most Interval.
		fill.Reset(w.o.Interval)
		stopped := false
	filling:
		for len(batch) < w.o.BatchSize {
			select {
			case a := <-w.ch:
				batch = append(batch, a)
			case <-fill.C:
				break filling
			case <-w.stop:
				stopped = true
				break filling
			}
		}
		fill.Stop()
		if stopped {
			w.drain(batch)
			return
		}
		w.write(batch)
		batch = batch[:0]
	}
}

// drain stores batch and whatever is queued, in batches, and returns.
func (w *Writer) drain(batch []Attempt) {
	for {
		for len(batch) < w.o.BatchSize {
			select {
			case a := <-w.ch:
				batch = append(batch, a)
				continue
			default:
			}
			break
		}
		if len(batch) == 0 {
			return
		}
		w.write(batch)
		batch = batch[:0]
	}
}

func (w *Writer) write(batch []Attempt) {
	ctx, cancel := context.WithTimeout(context.Background(), w.o.WriteTimeout)
	defer cancel()
	start := time.Now()
	err := w.st.Append(ctx, batch)
	var refused *RefusedError
	if errors.As(err, &refused) {
		// The others are stored: only the refused ones are left out.
		w.o.Metrics.stored(time.Since(start), len(batch)-len(refused.Errs), nil)
		w.o.Metrics.refused(refused)
		w.o.Logger.Error("attempts record: the store refused attempts, which are left out of the record (the others of their batch are stored; deliveries go on)",
			slog.Int("refused", len(refused.Errs)), slog.Int("batch", len(batch)), slog.Any("err", err))
		return
	}
	w.o.Metrics.stored(time.Since(start), len(batch), err)
	if err != nil {
		w.o.Metrics.dropped(ReasonWriteFailed, len(batch))
		if now := time.Now(); now.Sub(w.lastErrLog) >= errorLogEvery {
			w.lastErrLog = now
			w.o.Logger.Error("attempts record: a batch could not be stored and is dropped (deliveries go on)",
				slog.Int("attempts", len(batch)), slog.Any("err", err))
		}
	}
}

func (w *Writer) prune() {
	if w.o.MaxAge <= 0 && w.o.MaxRows <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.o.WriteTimeout)
	defer cancel()
	var before time.Time
	if w.o.MaxAge > 0 {
		before = time.Now().Add(-w.o.MaxAge)
	}
	n, err := w.st.Prune(ctx, before, w.o.MaxRows)
	w.o.Metrics.pruned(n)
	if err != nil {
		w.o.Logger.Warn("attempts record: retention could not be applied; it is tried again", slog.Any("err", err))
	}
}
