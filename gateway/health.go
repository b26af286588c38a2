package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
)

// Health tracks each endpoint's run of failed attempts and its 410 Gone
// answers: a gateway disables an endpoint whose attempts have all failed
// for Config.DisableAfter, and one that answered 410 Gone at once.
type Health struct {
	mu      sync.Mutex
	failing map[string]time.Time // key → start of its run of failures
	gone    map[string]time.Time // key → when it answered 410 Gone
	// goneCh is closed (and replaced) when an endpoint answers 410, to
	// wake every gateway's watchHealth.
	goneCh chan struct{}
	now    func() time.Time
}

// NewHealth returns an empty tracker.
func NewHealth() *Health {
	return &Health{failing: map[string]time.Time{}, gone: map[string]time.Time{}, goneCh: make(chan struct{}), now: time.Now}
}

// Gone records that endpoint key answered 410 Gone: its gateway disables it.
func (h *Health) Gone(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, on := h.gone[key]; on {
		return
	}
	h.gone[key] = h.now()
	close(h.goneCh)
	h.goneCh = make(chan struct{})
}

// GoneSince returns when key answered 410 Gone (zero: it did not).
func (h *Health) GoneSince(key string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gone[key]
}

// goneSignal returns a channel closed at the next Gone.
func (h *Health) goneSignal() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.goneCh
}

// Attempt records an attempt of endpoint key: ok ends its run of failures,
// a failure starts one if none runs.
func (h *Health) Attempt(key string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok {
		delete(h.failing, key)
	} else if _, on := h.failing[key]; !on {
		h.failing[key] = h.now()
	}
}

// FailingSince returns when key's run of failures began (zero: none runs).
func (h *Health) FailingSince(key string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing[key]
}

// Forget drops key (an endpoint that is gone).
func (h *Health) Forget(key string) {
	h.mu.Lock()
	delete(h.failing, key)
	delete(h.gone, key)
	h.mu.Unlock()
}

// disabledPoll is how often the cursors of disabled endpoints are read, to
// notice `outbox-relay endpoints enable`.
const disabledPoll = 5 * time.Second

// watchHealth disables running endpoints that have failed without a break
// for DisableAfter or answered 410 Gone, and restarts disabled ones whose
// flag was cleared in the store, until ctx ends.
func (g *Gateway) watchHealth(ctx context.Context) {
	poll := g.pollEvery
	defaults.Positive(&poll, disabledPoll)
	every := poll
	if g.cfg.DisableAfter > 0 {
		every = min(poll, max(g.cfg.DisableAfter/10, 10*time.Millisecond))
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastPoll := time.Time{}
	for {
		var gone <-chan struct{} // nil without Health: never ready
		if g.cfg.Health != nil {
			gone = g.cfg.Health.goneSignal()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-gone:
		}
		if g.cfg.Health != nil {
			for _, key := range g.Keys() {
				if at := g.cfg.Health.GoneSince(key); !at.IsZero() {
					reason := fmt.Sprintf("disabled at %s: it answered 410 Gone; the events it held are dead letters, its events after its cursor wait",
						at.UTC().Format(time.RFC3339))
					g.disable(ctx, key, reason, 0)
					continue
				}
				if g.cfg.DisableAfter <= 0 {
					continue
				}
				since := g.cfg.Health.FailingSince(key)
				if !since.IsZero() && time.Since(since) >= g.cfg.DisableAfter {
					reason := fmt.Sprintf("disabled at %s: every attempt failed since %s (longer than disable_after %s); its events after its cursor wait, its failed ones are dead letters",
						time.Now().UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339), g.cfg.DisableAfter)
					g.disable(ctx, key, reason, stopGrace)
				}
			}
		}
		if time.Since(lastPoll) >= poll {
			lastPoll = time.Now()
			g.pollDisabled(ctx)
		}
	}
}

// disable stops key's pipeline (giving it grace to deliver what it holds)
// and records why in its checkpoint, so it stays disabled across restarts
// until enabled again.
func (g *Gateway) disable(ctx context.Context, key, reason string, grace time.Duration) {
	g.mu.Lock()
	r := g.running[key]
	g.mu.Unlock()
	if r == nil {
		return
	}
	ep := r.ep
	g.hub.Lock()
	done := g.stopLocked(key, grace)
	g.hub.Unlock()
	<-done
	g.cfg.Health.Forget(key)
	g.log.Error("endpoint disabled; fix the receiver, then enable it with `outbox-relay endpoints enable` or an UPDATE of its row, and it resumes from its cursor",
		slog.String("endpoint", key), slog.String("reason", reason))
	g.mu.Lock()
	g.disabled[key] = ep
	g.mu.Unlock()
	g.hub.obs.State(key, Disabled)
	if err := g.setDisabled(ctx, key, reason); err != nil {
		g.log.Error("could not record the endpoint as disabled (it starts again at the next restart)", slog.String("endpoint", key), slog.Any("err", err))
	}
}

// setDisabled writes reason into key's checkpoint ("" enables it).
func (g *Gateway) setDisabled(ctx context.Context, key, reason string) error {
	cp, err := g.cfg.Store.Load(ctx, key)
	if err != nil {
		return err
	}
	cp.Disabled = reason
	cp.UpdatedAt = time.Now().UTC()
	return g.cfg.Store.Save(ctx, key, cp)
}

// pollDisabled restarts the disabled endpoints whose checkpoint no longer
// says disabled.
func (g *Gateway) pollDisabled(ctx context.Context) {
	g.mu.Lock()
	var keys []string
	for k := range g.disabled {
		keys = append(keys, k)
	}
	g.mu.Unlock()
	for _, key := range keys {
		cp, err := g.cfg.Store.Load(ctx, key)
		if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			continue
		}
		if cp.Disabled == "" {
			g.enabled(key)
		}
	}
}

// Enable clears key's disabled flag and starts it from its cursor, as ep
// when given (an UPDATE of its row in the endpoints table does this). It
// reports whether key was disabled.
func (g *Gateway) Enable(ctx context.Context, key string, ep *Endpoint) (bool, error) {
	g.mu.Lock()
	_, off := g.disabled[key]
	if off && ep != nil {
		g.disabled[key] = *ep
	}
	g.mu.Unlock()
	if !off {
		return false, nil
	}
	if err := g.setDisabled(ctx, key, ""); err != nil {
		return true, err
	}
	g.enabled(key)
	return true, nil
}

func (g *Gateway) enabled(key string) {
	g.mu.Lock()
	ep, off := g.disabled[key]
	delete(g.disabled, key)
	g.mu.Unlock()
	if !off {
		return
	}
	if g.cfg.Health != nil {
		g.cfg.Health.Forget(key) // a late answer of its old pipeline does not count
	}
	g.log.Warn("endpoint enabled again: it resumes from its cursor", slog.String("endpoint", key))
	if err := g.Start(ep); err != nil && !errors.Is(err, context.Canceled) {
		g.log.Error("endpoint not restarted", slog.String("endpoint", key), slog.Any("err", err))
	}
}

// IsDisabled reports whether key is disabled.
func (g *Gateway) IsDisabled(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, off := g.disabled[key]
	return off
}
