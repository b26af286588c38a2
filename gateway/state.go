package gateway

// State is an endpoint's state: the one vocabulary of /endpoints, the
// state label of outbox_relay_gateway_endpoints, `outbox-relay status` and
// docs/gateway.md. An endpoint is in exactly one.
//
// Running (its pipeline runs, its cursor moves):
//
//   - attached: the shared stream hands it its events;
//   - waiting: detached (its queue was full), waiting for its queue to
//     drain or for a catch-up stream;
//   - catching_up: reading on a stream of its own.
//
// Not running (its events after its cursor wait; none is lost). Each keeps
// a cursor: where it stopped, or, for a table row inserted or first read
// off or invalid, where it came into being (Endpoint.Held, HoldLocked).
// When it runs again it catches up from there. /endpoints shows the cursor
// and since when its events wait (Observer.Held), and
// outbox_relay_gateway_held_cursor_age_seconds the oldest such cursor:
//
//   - disabled: the relay disabled it, because every attempt failed for
//     gateway.disable_after or because it answered 410 Gone. The reason is
//     in its checkpoint; it stays disabled across restarts until it is
//     enabled (`outbox-relay endpoints enable`, or an UPDATE of its row
//     that leaves enabled = 1).
//   - off: its row in the endpoints table says enabled = 0: paused. It
//     runs again, from its cursor, when the row says enabled = 1. (A
//     deleted row's endpoint is gone: not listed at all, its cursor
//     dropped.)
//   - invalid: its row in the endpoints table cannot be used (a url the
//     egress policy refuses, a bad secret, …): not run, with one error
//     log; it starts from its cursor as soon as an UPDATE makes the row
//     usable.
//   - stopped: its pipeline stopped on an error (the log and /endpoints'
//     "stopped" say which), or it has not started yet.
type State int

const (
	Attached State = iota
	Waiting
	CatchingUp
	Stopped
	Disabled
	Off
	Invalid
)

// States lists every state, for a gauge with a series per state.
var States = []State{Attached, Waiting, CatchingUp, Disabled, Off, Invalid, Stopped}

func (s State) String() string {
	switch s {
	case Attached:
		return "attached"
	case Waiting:
		return "waiting"
	case CatchingUp:
		return "catching_up"
	case Disabled:
		return "disabled"
	case Off:
		return "off"
	case Invalid:
		return "invalid"
	}
	return "stopped"
}

// Running reports whether an endpoint in state s has a running pipeline.
func (s State) Running() bool { return s == Attached || s == Waiting || s == CatchingUp }
