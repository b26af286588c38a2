package gateway

import (
	"sync"

	"github.com/outbox-relay/outbox-relay/event"
)

// txnQueue is an awake tap's queue between the shared stream (or its
// catch-up stream) and its pipeline: at most max transactions, first in
// first out, in a ring grown on demand. A woken endpoint mostly holds one
// transaction, so its queue costs a slot or two, not QueueTxns made up
// front (a 256-slot channel: 2 KB per awake endpoint, the largest part of
// a burst's heap before). One goroutine takes (the tap's Run); the one
// that puts and may wait for room is the hub (attached) or the tap's
// catch-up (detached), never both at once.
type txnQueue struct {
	mu   sync.Mutex
	buf  []*event.Txn
	head int
	n    int
	max  int
	// ready receives after a put (the taker waits on it when empty);
	// room after a take (a putter waits on it when full). Each holds one
	// signal: a stale one only makes its waiter look again.
	ready chan struct{}
	room  chan struct{}
}

func newTxnQueue(max int) txnQueue {
	return txnQueue{max: max, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// push adds txn if there is room.
func (q *txnQueue) push(txn *event.Txn) bool {
	q.mu.Lock()
	if q.n >= q.max {
		q.mu.Unlock()
		return false
	}
	if q.n == len(q.buf) {
		grown := make([]*event.Txn, min(max(1, 2*len(q.buf)), q.max))
		for i := range q.n {
			grown[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = txn
	q.n++
	q.mu.Unlock()
	signal(q.ready)
	return true
}

// pop takes the oldest transaction, or nil when there is none.
func (q *txnQueue) pop() *event.Txn {
	q.mu.Lock()
	if q.n == 0 {
		q.mu.Unlock()
		return nil
	}
	txn := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	q.mu.Unlock()
	signal(q.room)
	return txn
}

// len returns how many transactions are queued.
func (q *txnQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// full reports whether the queue holds max transactions.
func (q *txnQueue) full() bool { return q.len() >= q.max }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
