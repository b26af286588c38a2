package sinktest

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/faultproxy"
)

// Link is a loopback TCP proxy between a sink and its server
// (internal/faultproxy), as a Fault: Break closes every open connection
// (both sides see EOF) and every new one at once, as a server or middlebox
// that went away; BreakMidWrite does so after 8 KiB more upstream; Heal
// forwards new connections again. The proxy's other faults (silent cuts,
// latency, bandwidth) are there too.
type Link struct {
	*faultproxy.Proxy
}

// StartLink listens on a free loopback port and forwards to target until
// the test ends.
func StartLink(t testing.TB, target string) *Link {
	t.Helper()
	return &Link{faultproxy.Start(t, target)}
}

// Break closes every connection and refuses new ones until Heal.
func (l *Link) Break() { l.CutHard() }

// BreakMidWrite lets 8 KiB more through upstream (client to server), then
// breaks the link, in the middle of a write of a few hundred events.
func (l *Link) BreakMidWrite() { l.CutHardAfter(8 << 10) }

// Heal forwards new connections again.
func (l *Link) Heal() { l.Restore() }
