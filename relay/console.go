package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/console"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/relay/replayplan"
	"github.com/outbox-relay/outbox-relay/replay"
)

// resendMargin is how long before an event's commit time the window of a
// resend starts: the binlog is located by the time of its transactions'
// events, which can be a little earlier than their commit.
const resendMargin = time.Minute

// console returns the member that serves the console (console.listen set),
// its listener opened now so that a taken address fails the start. ok is
// false when the console is off: nothing is opened.
func (a *assembly) console(at attempts.Store) (m member, ok bool, err error) {
	cc := a.cfg.Console
	if cc.Listen == "" {
		return member{}, false, nil
	}
	key := []byte(os.Getenv(cc.LinkKeyEnv))
	if err := console.CheckKey(key, cc.LinkKeyEnv); err != nil {
		return member{}, false, err
	}
	var sinks []console.Sink
	for _, sc := range a.cfg.Sinks {
		fo, fan := gateway.FanOutFor(sc)
		if !fan {
			continue
		}
		s := console.Sink{Name: sc.Name}
		if f, ok := sc.Config.(config.FanOut); ok {
			s.Static = f.StaticEndpoints()
		}
		if fo.Admin != nil {
			if s.Table, err = fo.Admin(sc.Name, sc.Config, a.src.db); err != nil {
				return member{}, false, err
			}
		}
		sinks = append(sinks, s)
	}
	dl, _ := a.dl.(deadletter.Store)
	srv, err := console.New(console.Options{Config: cc, Key: key, Sinks: sinks, Stats: a.r.gateways.Stats, Stat: a.r.gateways.Endpoint, Counts: a.r.gateways.Counts,
		Attempts: at, DeadLetters: dl, Relay: &consoleRelay{a: a, dl: dl}, Logger: a.r.log})
	if err != nil {
		return member{}, false, err
	}
	ln, err := net.Listen("tcp", cc.Listen)
	if err != nil {
		return member{}, false, fmt.Errorf("console.listen %s: %w", cc.Listen, err)
	}
	a.r.log.Info("console listening: /, /api/v1, /api/openapi.json", slog.String("addr", ln.Addr().String()))
	return member{name: "console", aside: true, run: func(ctx context.Context) error {
		rctx, stopReloads := context.WithCancel(ctx)
		var reloads sync.WaitGroup
		reloads.Go(func() { a.reloadConsole(rctx, srv) })
		err := srv.Run(ctx, ln)
		stopReloads()
		reloads.Wait()
		if ctx.Err() == nil && err != nil {
			a.r.log.Error("console stopped", slog.Any("err", err))
		}
		return nil // the console stopping never stops the relay
	}}, true, nil
}

// reloadConsole makes the console's tokens those of the configuration
// read again, at each Options.Reload (SIGHUP), until ctx ends. A
// configuration that does not load, or whose console section is not
// valid, keeps the tokens in use; either way the log says what happened.
func (a *assembly) reloadConsole(ctx context.Context, srv *console.Server) {
	o := a.r.opts
	if o.Reload == nil || o.ReadConfig == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.Reload:
		}
		cfg, err := o.ReadConfig()
		if err == nil && cfg.Console.Listen == "" {
			err = errors.New("console.listen is not set: the console runs until the relay restarts")
		}
		var added, removed, changed []string
		if err == nil {
			added, removed, changed, err = srv.SetTokens(cfg.Console.Tokens)
		}
		if err != nil {
			a.r.log.Error("console tokens not reloaded: the tokens in use are kept", slog.Any("err", err))
			continue
		}
		a.r.log.Info("console tokens reloaded", slog.Int("tokens", len(cfg.Console.Tokens)),
			slog.Any("added", added), slog.Any("removed", removed), slog.Any("changed", changed))
		if restart := restartOnly(a.cfg.Console, cfg.Console); len(restart) > 0 {
			a.r.log.Warn("console keys changed that only a restart applies", slog.Any("keys", restart))
		}
	}
}

// restartOnly returns the keys of the console section, other than its
// tokens, that differ between was and now.
func restartOnly(was, now config.Console) []string {
	var out []string
	w, n := reflect.ValueOf(was), reflect.ValueOf(now)
	for i := range w.NumField() {
		key, _, _ := strings.Cut(w.Type().Field(i).Tag.Get("yaml"), ",")
		if key != "tokens" && !reflect.DeepEqual(w.Field(i).Interface(), n.Field(i).Interface()) {
			out = append(out, "console."+key)
		}
	}
	return out
}

// consoleRelay is what the console asks of this relay (console.Relay).
type consoleRelay struct {
	a  *assembly
	dl deadletter.Store
	// submitting serialises submit's count of a tenant's jobs and its save
	// (replay.Store.PutCapped).
	submitting sync.Mutex
}

// submit plans ask against the source and stores the job, asked by tenant
// ("": an operator), which the replays member takes up within
// replay.poll. A tenant with replay.max_jobs_per_tenant jobs pending or
// running gets a *replay.QueueFullError.
func (c *consoleRelay) submit(ctx context.Context, tenant string, ask replay.Ask, ids []string) (string, error) {
	p := replayplan.New(c.a.r.replayPlan(), c.a.src.db, c.a.src.info)
	job, err := p.Plan(ctx, ask, time.Now())
	if err != nil {
		return "", err
	}
	job.IDs, job.Tenant = ids, tenant
	jobs, err := replay.NewStore(c.a.store)
	if err != nil {
		return "", err
	}
	c.submitting.Lock()
	defer c.submitting.Unlock()
	if err := jobs.PutCapped(ctx, job, c.a.cfg.Replay.MaxJobsPerTenant); err != nil {
		return "", err
	}
	return job.ID, nil
}

func (c *consoleRelay) Resend(ctx context.Context, tenant string, rec attempts.Record) (string, error) {
	if rec.EventID == "" {
		return "", errors.New("the attempt names no event")
	}
	committed := rec.Committed
	if committed.IsZero() {
		committed = rec.Time // committed before it was attempted
	}
	ask := replay.Ask{Sink: rec.Sink, Endpoint: rec.Endpoint, Since: committed.Add(-resendMargin), Until: rec.GTID}
	if ask.Until == "" {
		ask.UntilTime = committed.Add(resendMargin)
		if now := time.Now(); ask.UntilTime.After(now) {
			ask.UntilTime = time.Time{} // up to now
		}
	}
	return c.submit(ctx, tenant, ask, []string{rec.EventID})
}

func (c *consoleRelay) Recover(ctx context.Context, tenant, sink, endpoint string, since time.Time) (string, error) {
	return c.submit(ctx, tenant, replay.Ask{Sink: sink, Endpoint: endpoint, Since: since}, nil)
}

func (c *consoleRelay) ReplayDeadLetters(ctx context.Context, recs []deadletter.Record) (int, error) {
	ok, _, err := c.a.r.ReplayDeadLetters(ctx, c.dl, recs)
	return ok, err
}

func (c *consoleRelay) Enable(ctx context.Context, key string) (bool, error) {
	cp, err := c.a.store.Load(ctx, key)
	if errors.Is(err, checkpoint.ErrNotFound) || err == nil && cp.Disabled == "" {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cp.Disabled = ""
	cp.UpdatedAt = time.Now().UTC()
	return true, c.a.store.Save(ctx, key, cp)
}
