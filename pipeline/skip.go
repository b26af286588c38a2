package pipeline

// This file owns the skip set: what a restarted pipeline does not send again
// (the events its checkpoint lists as acknowledged and those read back from
// the destination), held per transaction until the stream passes it, and
// the count of events of the previous run's window that are sent again.

import (
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/sink"
)

// The reasons an event is not sent again after a restart, as
// ResumeObserver.Skipped names them.
const (
	skippedByCheckpoint = "checkpoint"
	skippedByReadBack   = "readback"
)

// skipSet is what a restarted pipeline does not send again: the events its
// checkpoint lists as acknowledged, and those the sink read back from its
// destination. It also counts, up to the last transaction the previous run
// had handed to the sink, the events that are sent again. It is used by the
// source's goroutine only (after recover has filled it).
//
// A message read back is only a claim: the event it names is skipped when
// one of the messages read back under its (gtid, id) has the digest of the
// sink's own message of it (checked by the caller of take). Claims are held
// until the stream passes their transaction (pass, sweep), so they are
// bounded by what Recover reports (readback.MaxHeld).
type skipSet struct {
	ids         map[string]map[string]*listed // transaction key → event id → why skipped
	n           int
	readThrough string // "" once passed
	resentLeft  int    // at most this many more are counted as re-sent
	claims      int    // entries by skippedByReadBack
	sinceSweep  int    // transactions passed since the last sweep
}

// listed is why an event is skipped: by the checkpoint, or by read-back
// with the messages read back under its (gtid, id).
type listed struct {
	by   string
	held []sink.Held
}

func newSkipSet(a *checkpoint.Acked, maxInFlight int) *skipSet {
	s := &skipSet{ids: map[string]map[string]*listed{}, resentLeft: maxInFlight}
	if a != nil {
		for key, ids := range a.Events {
			for _, id := range ids {
				s.add(key, id, skippedByCheckpoint)
			}
		}
		s.readThrough = a.ReadThrough
	}
	return s
}

// add lists an event, and reports whether it was not listed yet; one
// listed already keeps its first reason.
func (s *skipSet) add(key, id, by string) bool {
	_, added := s.list(key, id, by)
	return added
}

func (s *skipSet) list(key, id, by string) (*listed, bool) {
	m := s.ids[key]
	if m == nil {
		m = map[string]*listed{}
		s.ids[key] = m
	}
	if l, ok := m[id]; ok {
		return l, false
	}
	l := &listed{by: by}
	m[id] = l
	s.n++
	if by == skippedByReadBack {
		s.claims++
	}
	return l, true
}

// addHeld lists a message read back (its transaction's key is its GTID),
// and reports whether its event was not listed yet.
func (s *skipSet) addHeld(h sink.Held) bool {
	l, added := s.list(h.GTID, h.ID, skippedByReadBack)
	if l.by == skippedByReadBack {
		l.held = append(l.held, h)
	}
	return added
}

// active reports whether anything is left to skip or count.
func (s *skipSet) active() bool { return s.n > 0 || s.readThrough != "" }

// take returns why the event is listed, and forgets it.
func (s *skipSet) take(key, id string) (*listed, bool) {
	m := s.ids[key]
	l, ok := m[id]
	if ok {
		s.forget(key, id, l)
	}
	return l, ok
}

func (s *skipSet) forget(key, id string, l *listed) {
	m := s.ids[key]
	delete(m, id)
	if len(m) == 0 {
		delete(s.ids, key)
	}
	s.n--
	if l.by == skippedByReadBack {
		s.claims--
	}
}

// pass is called after the stream's transaction key: the messages read
// back under it that named none of its events are returned, and forgotten.
func (s *skipSet) pass(key string) []sink.Held {
	s.sinceSweep++
	var out []sink.Held
	for id, l := range s.ids[key] {
		if l.by == skippedByReadBack {
			out = append(out, l.held...)
			s.forget(key, id, l)
		}
	}
	return out
}

// sweep returns, and forgets, the messages read back whose transaction the
// stream has passed (set, the GTID set at its position, holds it) though
// it never delivered that transaction (it has no outbox event). It runs
// only once as many transactions passed as claims are held, so that its
// cost per transaction stays constant.
func (s *skipSet) sweep(set func() (*position.Set, error)) []sink.Held {
	if s.claims == 0 || s.sinceSweep < max(64, s.claims) {
		return nil
	}
	s.sinceSweep = 0
	at, err := set()
	if err != nil {
		return nil
	}
	var out []sink.Held
	for key, m := range s.ids {
		for id, l := range m {
			if l.by != skippedByReadBack {
				continue
			}
			if in, err := at.Contains(key); err == nil && in {
				out = append(out, l.held...)
				s.forget(key, id, l)
			}
		}
	}
	return out
}

// window reports whether the transaction key is within the previous run's
// window (at or before the last transaction it had handed to the sink when
// its checkpoint was saved). Called once per transaction, in binlog order.
func (s *skipSet) window(key string) bool {
	if s.readThrough == "" {
		return false
	}
	if key == s.readThrough {
		s.readThrough = ""
	}
	return true
}

// resent counts one event of the window sent again; false once the count
// reached its bound (the in-flight limit: a window holds no more).
func (s *skipSet) resent() bool {
	if s.resentLeft <= 0 {
		return false
	}
	s.resentLeft--
	return true
}
