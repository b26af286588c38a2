package metrics

// This file owns what is computed when asked, from the observers' last facts:
// the scrape-time gauges (replication lag, oldest unacknowledged event,
// binlog purge margin) and readiness (Ready, Reading).

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type dynamic struct{ m *Metrics }

func (d dynamic) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.m.lagDesc
	ch <- d.m.oldestDesc
	ch <- d.m.marginDesc
	ch <- d.m.behindDesc
	ch <- d.m.filesDesc
}

func (d dynamic) Collect(ch chan<- prometheus.Metric) {
	m := d.m
	now := m.Now()
	m.mu.Lock()
	names := slices.Clone(m.order)
	states := make([]*sinkState, len(names))
	for i, n := range names {
		states[i] = m.sinks[n]
	}
	binlogs := m.binlogs
	m.mu.Unlock()

	if binlogs != nil {
		ch <- prometheus.MustNewConstMetric(m.filesDesc, prometheus.GaugeValue, float64(len(binlogs)))
	}
	for i, name := range names {
		s := states[i]
		s.mu.Lock()
		st, derive := s.facts, s.derive
		s.mu.Unlock()
		if derive != nil {
			oldest, file := derive()
			s.mu.Lock()
			s.oldest = oldest
			if file != "" {
				s.checkpointLog = file
			}
			st = s.facts
			s.mu.Unlock()
		}
		if lag, ok := replicationLag(&st, now); ok {
			ch <- prometheus.MustNewConstMetric(m.lagDesc, prometheus.GaugeValue, lag, name)
		}
		age := 0.0
		if st.inFlight > 0 && !st.oldest.IsZero() {
			age = max(now.Sub(st.oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(m.oldestDesc, prometheus.GaugeValue, age, name)
		if binlogs != nil && st.checkpointLog != "" {
			margin, behind := purgeMargin(binlogs, st.checkpointLog)
			ch <- prometheus.MustNewConstMetric(m.marginDesc, prometheus.GaugeValue, float64(margin), name)
			ch <- prometheus.MustNewConstMetric(m.behindDesc, prometheus.GaugeValue, float64(behind), name)
		}
	}
}

// replicationLag is now minus the last commit read, 0 when a heartbeat came
// after it; ok is false before the stream read anything.
func replicationLag(s *facts, now time.Time) (float64, bool) {
	switch {
	case s.caughtUp:
		return 0, true
	case s.lastCommit.IsZero() && s.lastHeartbeat.IsZero():
		return 0, false
	}
	// Disconnected after only heartbeats: behind since the last heartbeat.
	since := s.lastCommit
	if s.lastHeartbeat.After(since) {
		since = s.lastHeartbeat
	}
	return max(now.Sub(since).Seconds(), 0), true
}

// purgeMargin counts the binary logs older and newer than file. margin is -1
// when file is older than every log the server has (purged).
func purgeMargin(logs []string, file string) (margin, behind int) {
	for _, l := range logs {
		switch c := compareLogs(l, file); {
		case c < 0:
			margin++
		case c > 0:
			behind++
		}
	}
	if len(logs) > 0 && compareLogs(file, logs[0]) < 0 {
		return -1, behind
	}
	return margin, behind
}

// compareLogs orders binlog file names: same base name, a numeric suffix that
// may grow past six digits.
func compareLogs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// Reading lists, per sink in order, "sink NAME reads HOST:PORT" (for /readyz).
func (m *Metrics) Reading() []string {
	m.mu.Lock()
	names := slices.Clone(m.order)
	states := make([]*sinkState, len(names))
	for i, n := range names {
		states[i] = m.sinks[n]
	}
	m.mu.Unlock()
	var out []string
	for i, name := range names {
		states[i].mu.Lock()
		server := states[i].server
		states[i].mu.Unlock()
		if server != "" {
			out = append(out, fmt.Sprintf("sink %s reads %s", name, server))
		}
	}
	return out
}

// Ready reports whether the relay is ready: every sink's pipeline runs,
// its sink is connected and its binlog stream is connected to the source,
// and — for a sink other than a webhook sink — its checkpoint was saved
// within maxAge or nothing is in flight, and it waits on no event whose
// dead letter the store does not take. Each reason names a sink and what
// of it is not ready. A webhook endpoint's trouble (failing, stopped,
// disabled) never makes the relay unready: it is that endpoint's, shown by
// its state (/endpoints, outbox_relay_gateway_endpoints) and its log lines;
// notes name the endpoints stopped for good, for the body of /readyz. With
// no sinks yet it is not ready; a standby (see Standby) is not ready, and
// says so as its only reason.
func (m *Metrics) Ready(maxAge time.Duration) (ready bool, reasons, notes []string) {
	now := m.Now()
	m.mu.Lock()
	if m.standby {
		m.mu.Unlock()
		return false, []string{StandbyReason}, nil
	}
	names := slices.Clone(m.order)
	states := make([]*sinkState, len(names))
	for i, n := range names {
		states[i] = m.sinks[n]
	}
	m.mu.Unlock()
	if len(names) == 0 {
		return false, []string{"no pipeline is running yet"}, nil
	}
	for i, name := range names {
		s := states[i]
		s.mu.Lock()
		st := s.facts
		s.mu.Unlock()
		if st.stopped != "" {
			reasons = append(reasons, fmt.Sprintf("sink %s: stopped after an error it cannot retry: %s", name, st.stopped))
			continue
		}
		if st.deadLetter != "" && !st.fanOut {
			reasons = append(reasons, fmt.Sprintf("sink %s: %s", name, st.deadLetter))
		}
		if !st.fanOut && !st.sinkConnected {
			if st.sinkErr != "" {
				reasons = append(reasons, fmt.Sprintf("sink %s: not connected (retrying): %s", name, st.sinkErr))
			} else {
				reasons = append(reasons, fmt.Sprintf("sink %s: not connected yet", name))
			}
		}
		if !st.connected {
			reasons = append(reasons, fmt.Sprintf("sink %s: binlog stream not connected to the source", name))
			continue
		}
		if st.fanOut || !st.sinkConnected {
			continue
		}
		since := st.lastSave
		if since.IsZero() || m.started.After(since) {
			since = m.started
		}
		if st.inFlight > 0 && now.Sub(since) > maxAge {
			reasons = append(reasons, fmt.Sprintf("sink %s: %d events in flight and the checkpoint has not advanced for %s",
				name, st.inFlight, now.Sub(since).Round(time.Second)))
		}
	}
	// What the packages note (AddNotes) is not a reason.
	m.mu.Lock()
	fs := slices.Clone(m.notes)
	m.mu.Unlock()
	for _, f := range fs {
		notes = append(notes, f()...)
	}
	return len(reasons) == 0, reasons, notes
}
