package pipeline

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// txnEntry is one source transaction in flight: its position and how many of
// its events are not yet acknowledged. Entries form a list in binlog order.
type txnEntry struct {
	pos        event.Position
	commit     time.Time
	pending    int
	key        string // the transaction's identity (txnKey of its events); "" without events
	prev, next *txnEntry
	removed    bool // collapsed into a later entry, or passed by the watermark
	// into is the later entry this one was collapsed into (nil when it was
	// passed by the watermark, or is still in the list).
	into *txnEntry
	// seq orders the entries: a later transaction has a larger one, and
	// the watermark covers every transaction whose seq is at most wmSeq.
	seq uint64
	// listed counts the events listed while the watermark was before this
	// entry: its own, and those of the settled entries collapsed into it.
	listed int
	// unlisted counts, the same way, the events acknowledged and not
	// listed (the list was full, or they have no id or key).
	unlisted int
}

// ackedEvent names one acknowledged event: its transaction's key and its
// id, and the seq of its transaction's entry (0 outside the tracker).
type ackedEvent struct {
	key, id string
	seq     uint64
}

// tracker is the acknowledgement watermark: the position after the last
// transaction whose events, and all events before them, were acknowledged.
// Acknowledgements may arrive in any order; the watermark never passes a
// transaction with an unacknowledged event.
//
// Its memory depends on the unacknowledged events, not on the source's
// traffic: a settled transaction (every event acknowledged, or none to begin
// with) only matters as the position the watermark stops at before the next
// unsettled one, so of two settled neighbours only the newer is kept. The
// list never holds two settled entries in a row, so it has at most
// 2×(unsettled transactions)+1 entries, and unsettled transactions are at
// most the unacknowledged events: one event stuck in retries while a million
// transactions without outbox rows go by costs a handful of entries.
//
// It also bounds what is in flight, by event count and bytes: add blocks
// while the limits are reached. The count is of what a crash would send
// again: the unacknowledged events, the acknowledged ones whose save is not
// over (they count until the save that covers them is over), and the
// acknowledged ones beyond the watermark that the list does not hold (they
// count until the watermark passes them: no save covers them before). A
// transaction larger than the limits on its own is let in when nothing else
// is in flight, so it cannot deadlock.
//
// Beyond the watermark it keeps which events were acknowledged (their
// transaction's key and id), so that a checkpoint can list them and a
// restart does not send them again. They are kept in one flat log, in the
// order they were acknowledged, each with its transaction's seq: an event
// whose seq the watermark passed is forgotten (dropped from the log when
// it is compacted, at each snapshot and whenever the log reaches twice the
// bound), so listing costs no allocation per acknowledgement and nothing
// moves when entries collapse. At most maxAcked are kept (the in-flight
// event limit): an acknowledgement past that is not listed, and its event,
// which a crash would send again, takes room until the watermark passes
// it. So while one transaction holds the watermark back, at most maxAcked
// acknowledged events are listed and at most maxEvents more are sent
// before add blocks, and a crash sends again at most maxEvents events.
type tracker struct {
	mu         sync.Mutex
	room       *sync.Cond
	head, tail *txnEntry // head is the oldest unsettled; nil when empty
	entries    int
	watermark  event.Position
	wmCommit   time.Time // commit time of the transaction that ends at the watermark; zero when unknown
	advanced   bool      // watermark moved, or an acknowledgement was listed, since the last snapshot
	acked      int       // acknowledged events listed beyond the watermark, over all entries
	// unlisted are the acknowledged events beyond the watermark that are
	// not listed, over all entries: a crash sends them again, so they
	// count against maxEvents until the watermark passes them (then as
	// unsaved, until the save that covers them is over).
	unlisted int
	wmSeq    uint64 // seq of the last entry the watermark passed
	nextSeq  uint64
	// log is every listed acknowledgement not yet compacted away: those
	// with seq > wmSeq are the list (acked of them), the others are
	// forgotten. It holds at most 2×maxAcked events.
	log []ackedEvent
	// listChanged: the list changed since the last snapshot built its map;
	// lastList is that map, handed on again (it is never changed once
	// handed on) while the list stays as it was.
	listChanged bool
	lastList    map[string][]string
	order       []int32 // the saver's, indexes into log, reused between snapshots
	// unsaved are the events acknowledged since the last snapshot, and
	// saving is those of the snapshot being saved: both count against
	// maxEvents, so what a crash sends again (in flight, or acknowledged
	// but not yet saved) stays within it.
	unsaved, saving int
	// readBack: the sink reads its destination back on a restart, so a
	// crash does not send acknowledged events again whether or not they
	// were saved; they do not count against maxEvents then.
	readBack bool
	maxAcked int
	readKey  string // key of the last transaction with events added
	// changed is signalled (without blocking) whenever advanced is set.
	changed chan struct{}
	// full is signalled (without blocking) when add waits for room that
	// unsaved acknowledgements hold (hurry): a save frees that room, so the
	// saver should not wait out its gap.
	full chan struct{}

	maxEvents, maxBytes int
	events, bytes       int
	closed              bool
	// waiting counts the adds waiting for room; waitN and waitSize are
	// what the last of them waits to add.
	waiting, waitN, waitSize int
}

func newTracker(start event.Position, maxEvents, maxBytes int) *tracker {
	t := &tracker{watermark: start, maxEvents: maxEvents, maxBytes: maxBytes, maxAcked: maxEvents, changed: make(chan struct{}, 1), full: make(chan struct{}, 1)}
	t.room = sync.NewCond(&t.mu)
	return t
}

// add registers a transaction with n events of total size bytes, waiting for
// room first. It returns nil when the tracker was closed while waiting.
func (t *tracker) add(pos event.Position, commit time.Time, n, size int) *txnEntry {
	return t.addKey(pos, commit, n, size, "")
}

// addKey is add for a transaction whose events have the given txnKey.
func (t *tracker) addKey(pos event.Position, commit time.Time, n, size int, key string) *txnEntry {
	e, _ := t.addInto(nil, pos, commit, n, size, key, false)
	return e
}

// addInto is addKey with the memory of the transaction's entry, when it
// needs one, given by the caller (nil: allocated here), so that the caller
// may allocate it with what it keeps beside (Run: a one-event
// transaction's item). With try it does not wait for room: without room it
// adds nothing and returns added false. Closed, it returns nil (and added).
func (t *tracker) addInto(into *txnEntry, pos event.Position, commit time.Time, n, size int, key string, try bool) (_ *txnEntry, added bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if try && !t.closed && !t.fits(n, size) {
		return nil, false
	}
	for !t.closed && !t.fits(n, size) {
		if t.hurry() {
			t.signalFull()
		}
		t.waiting++
		t.waitN, t.waitSize = n, size
		t.room.Wait()
		t.waiting--
	}
	if t.closed {
		return nil, true
	}
	t.events += n
	t.bytes += size
	if n == 0 && t.tail != nil && t.tail.pending == 0 {
		// A settled transaction after a settled one: the newer position
		// replaces the older, nothing is allocated.
		if pos != t.tail.pos || !commit.IsZero() {
			t.tail.commit = commit // a held position keeps its own transaction's
		}
		t.tail.pos = pos
		t.nextSeq++
		t.tail.seq = t.nextSeq
		return t.tail, true
	}
	if n > 0 && key != "" {
		t.readKey = key
	}
	t.nextSeq++
	e := into
	if e == nil {
		e = new(txnEntry)
	}
	*e = txnEntry{pos: pos, commit: commit, pending: n, key: key, prev: t.tail, seq: t.nextSeq}
	if t.tail != nil {
		t.tail.next = e
	} else {
		t.head = e
	}
	t.tail = e
	t.entries++
	t.advance()
	return e, true
}

// fits reports whether a transaction of n events and size bytes may be
// added now: always when nothing is held (an oversize transaction goes in
// alone).
func (t *tracker) fits(n, size int) bool {
	return t.held() == 0 || (t.held()+n <= t.maxEvents && t.bytes+size <= t.maxBytes)
}

func (t *tracker) signalFull() {
	select {
	case t.full <- struct{}{}:
	default:
	}
}

// wakeLocked wakes an add waiting for room when the room it waits for is
// there, and the saver when a save would make it. An acknowledgement that
// frees nothing (its event is held until saved) wakes no one: a backlog
// drain does not bounce the waiting source once per event.
func (t *tracker) wakeLocked() {
	switch {
	case t.waiting == 0:
	case t.waiting > 1 || t.fits(t.waitN, t.waitSize):
		t.room.Broadcast()
	case t.hurry():
		t.signalFull()
	}
}

// hurry: a source waiting for room should cut the saver's gap short,
// because the acknowledged events waiting for a save hold at least as much
// room as the events still in flight. While more are in flight, the sink
// has work enough and the gap stands: in a backlog drain, saves then come
// one per gap (saveGap), each covering more events, instead of back to
// back for a few events each (a file store's save costs an fsync and a
// rename, ~1 ms of CPU here).
func (t *tracker) hurry() bool {
	return !t.readBack && t.unsaved > 0 && t.unsaved+t.saving >= t.events
}

// held is what counts against maxEvents: the unacknowledged events, and,
// unless the sink reads its destination back, the acknowledged ones whose
// save is not over and those beyond the watermark that are not listed.
func (t *tracker) held() int {
	if t.readBack {
		return t.events
	}
	return t.events + t.unsaved + t.saving + t.unlisted
}

// ack records that one event of e, of the given size, was acknowledged.
func (t *tracker) ack(e *txnEntry, size int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ackLocked(e, size, "")
	t.advance()
	t.wakeLocked()
}

// release acks every item at once: one lock and one wake-up per batch.
// The items are listed as acknowledged (while there is room) after the
// watermark moved: an event the watermark passes in the same release is
// never listed, so in-order acknowledgements cost no list at all.
func (t *tracker) release(items []*item) {
	if len(items) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, it := range items {
		t.ackLocked(it.txn, it.size, "")
	}
	t.advance()
	for _, it := range items {
		t.list(it.txn, it.ev.ID)
	}
	t.wakeLocked()
}

// list lists the acknowledged event id of e's transaction on the entry
// that now stands for e (e, or the one it was collapsed into), unless the
// watermark passed it, the id or key is empty, or the list is full. The
// event was counted as unlisted by ackLocked: once listed, it counts as
// unsaved instead.
func (t *tracker) list(e *txnEntry, id string) {
	key := e.key
	if id == "" || key == "" || t.acked >= t.maxAcked {
		return
	}
	seq := e.seq
	for e.into != nil {
		e = e.into
	}
	if e.removed {
		return // passed by the watermark
	}
	e.unlisted--
	t.unlisted--
	t.unsaved++
	t.appendLog(e, ackedEvent{key: key, id: id, seq: seq})
}

// appendLog lists a on e (the entry that stands for a's transaction),
// compacting the log first when it reached twice the bound.
func (t *tracker) appendLog(e *txnEntry, a ackedEvent) {
	if len(t.log) >= 2*t.maxAcked {
		t.compact()
	}
	t.log = append(t.log, a)
	e.listed++
	t.acked++
	t.listChanged = true
}

// compact drops from the log the events the watermark passed.
func (t *tracker) compact() {
	wm := t.wmSeq
	t.log = slices.DeleteFunc(t.log, func(a ackedEvent) bool { return a.seq <= wm })
}

// ackLocked acknowledges one event of e; a non-empty id is listed as
// acknowledged (while there is room) until the watermark passes e. An
// event not listed counts as unlisted on e until the watermark passes e
// (or until release lists it).
func (t *tracker) ackLocked(e *txnEntry, size int, id string) {
	if e.pending <= 0 || e.removed {
		panic("pipeline: event acknowledged twice")
	}
	if id != "" && e.key != "" && t.acked < t.maxAcked {
		t.appendLog(e, ackedEvent{key: e.key, id: id, seq: e.seq})
		t.unsaved++
	} else {
		e.unlisted++
		t.unlisted++
	}
	t.markChanged()
	e.pending--
	t.events--
	t.bytes -= size
	if e.pending == 0 {
		t.collapse(e)
	}
}

// collapse keeps only the newest of e and its settled neighbours: the
// watermark can stop after e's transaction only if the next one is unsettled.
// The counts of events listed and unlisted on the entry dropped move to the
// one kept (the events stay in the log: the one kept has the larger seq, so
// the watermark passes them with it).
func (t *tracker) collapse(e *txnEntry) {
	if p := e.prev; p != nil && p.pending == 0 {
		t.fold(p, e)
	}
	if n := e.next; n != nil && n.pending == 0 {
		t.fold(e, n)
	}
}

// fold drops the settled entry from, the older of two neighbours, and
// moves its counts to into, the newer one, which is kept.
func (t *tracker) fold(from, into *txnEntry) {
	into.listed += from.listed
	into.unlisted += from.unlisted
	from.listed, from.unlisted = 0, 0
	t.unlink(from)
	from.into = into
}

func (t *tracker) unlink(e *txnEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next, e.removed = nil, nil, true
	t.entries--
}

// advance moves the watermark over the settled entries at the head.
func (t *tracker) advance() {
	for t.head != nil && t.head.pending == 0 {
		if t.head.pos != t.watermark || !t.head.commit.IsZero() {
			// The commit time is the one of the transaction that ends at
			// the watermark: unknown (zero) when it moved without one; a
			// transaction handed on at a held position (event.Txn.Held,
			// no commit time) leaves it.
			t.wmCommit = t.head.commit
		}
		t.watermark = t.head.pos
		t.wmSeq = t.head.seq
		if t.head.listed > 0 {
			t.acked -= t.head.listed
			t.head.listed = 0
			t.listChanged = true
		}
		// Unlisted events the watermark passes are covered by the next
		// save: until it is over they count as unsaved.
		t.unlisted -= t.head.unlisted
		t.unsaved += t.head.unlisted
		t.head.unlisted = 0
		t.markChanged()
		t.unlink(t.head)
	}
}

// markChanged records that there is something new to save, and wakes the
// saver.
func (t *tracker) markChanged() {
	t.advanced = true
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// snapshot is what a checkpoint saves: the watermark, its commit time, the
// events acknowledged beyond it by transaction key, and the key of the last
// transaction handed on ("" when nothing is in flight). moved says whether
// anything changed since the last snapshot.
type snapshot struct {
	pos         event.Position
	commit      time.Time
	acked       map[string][]string
	readThrough string
	moved       bool
}

// take returns the snapshot and clears the moved flag. The acknowledgements
// it covers keep counting against the in-flight limit until saved is called.
func (t *tracker) take() snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshot{pos: t.watermark, commit: t.wmCommit, moved: t.advanced}
	t.advanced = false
	t.saving += t.unsaved
	t.unsaved = 0
	s.acked = t.listLocked()
	if t.head != nil {
		s.readThrough = t.readKey
	}
	return s
}

// listLocked is the list by transaction key (nil when empty). While the
// list is unchanged since the last call, it is the map that call returned;
// otherwise a new one, built with one allocation for all the ids: the
// events are ordered by seq (stably: a transaction's in the order they were
// acknowledged), so each key's ids are contiguous and its slice is a part of
// the one backing array. What is sorted is a buffer of indexes into the log,
// reused from call to call: sorting (or copying) the events themselves moves
// their strings, a write barrier each while the GC runs, on every save.
func (t *tracker) listLocked() map[string][]string {
	t.compact()
	if !t.listChanged {
		return t.lastList
	}
	t.listChanged = false
	t.lastList = nil
	if len(t.log) == 0 {
		return nil
	}
	order := t.order[:0]
	for i := range t.log {
		order = append(order, int32(i))
	}
	log := t.log
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(log[a].seq, log[b].seq); c != 0 {
			return c
		}
		return cmp.Compare(a, b) // acknowledgement order: the sort is stable
	})
	t.order = order
	ids := make([]string, len(order))
	keys := 1
	for i, o := range order {
		ids[i] = log[o].id
		if i > 0 && log[o].key != log[order[i-1]].key {
			keys++
		}
	}
	m := make(map[string][]string, keys)
	for i := 0; i < len(order); {
		k := log[order[i]].key
		j := i + 1
		for j < len(order) && log[order[j]].key == k {
			j++
		}
		// A key is one transaction's, so it has one run: its slice is
		// that part of ids, capped there. Were it to have more, they are
		// joined (appending to a capped part copies it: ids stays
		// unshared).
		if prev, ok := m[k]; ok {
			m[k] = append(prev, ids[i:j]...)
		} else {
			m[k] = ids[i:j:j]
		}
		i = j
	}
	t.lastList = m
	return m
}

// takeWatermark returns the watermark and whether it moved since the last call.
func (t *tracker) takeWatermark() (event.Position, bool) {
	pos, _, moved := t.takeWatermarkCommit()
	return pos, moved
}

// takeWatermarkCommit is takeWatermark with the commit time of the
// watermark's transaction (zero when unknown), read under the same lock.
func (t *tracker) takeWatermarkCommit() (event.Position, time.Time, bool) {
	s := t.take()
	return s.pos, s.commit, s.moved
}

// saved makes room for what the last snapshot covered: its save is over
// (done or failed: a store that cannot save does not stop deliveries).
func (t *tracker) saved() {
	t.mu.Lock()
	t.saving = 0
	t.wakeLocked()
	t.mu.Unlock()
}

// inFlight returns the unacknowledged event count and bytes, and the commit
// time of the oldest transaction with an unacknowledged event.
func (t *tracker) inFlight() (events, bytes int, oldest time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head != nil {
		oldest = t.head.commit
	}
	return t.events, t.bytes, oldest
}

// size returns the number of transactions the tracker holds.
func (t *tracker) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.entries
}

// markUnsaved makes the next takeWatermark report a move (after a failed save).
func (t *tracker) markUnsaved() {
	t.mu.Lock()
	t.markChanged()
	t.mu.Unlock()
}

// close wakes every add waiting for room; they return nil.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.room.Broadcast()
}

// settled reports, without rest's side effects, whether nothing is in
// flight and nothing is left to save, and the watermark then saved.
func (t *tracker) settled() (event.Position, time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.events > 0 || t.advanced || t.unsaved > 0 || t.saving > 0 || t.waiting > 0 || t.head != nil {
		return event.Position{}, time.Time{}, false
	}
	return t.watermark, t.wmCommit, true
}

// rest reports whether nothing is in flight and nothing is left to save:
// the saver may end until the next transaction is added. At rest the
// tracker also lets go of its list's scratch, grown by the last burst
// (the list is empty: the watermark passed every listed event).
func (t *tracker) rest() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.events > 0 || t.advanced || t.unsaved > 0 || t.saving > 0 || t.waiting > 0 {
		return false
	}
	if t.acked == 0 {
		t.log, t.order = nil, nil
	}
	return true
}
