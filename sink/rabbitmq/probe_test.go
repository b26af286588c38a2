package rabbitmq_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

func newSink(c rabbitmq.Config) (sinktest.ProbingSink, error) { return rabbitmq.New(c, nil) }

// Probe (what `outbox-relay check` runs) says whether the exchange is
// there, will be declared, or what to do; it declares nothing.
func TestProbe(t *testing.T) {
	sinktest.RequireServer(t, "rabbitmq")
	name := "p" + sinktest.Unique()
	missing := name + "-missing"
	conn, ch := admin(t)
	defer conn.Close()
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.ExchangeDelete(name, false, false)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()

	sinktest.RunProbes(t, newSink, []sinktest.ProbeCase[rabbitmq.Config]{
		{Name: "an existing exchange passes", Config: rabbitmq.Config{Addr: sharedServer, Exchange: name}, Found: fmt.Sprintf("exchange %q exists", name)},
		{Name: "a missing exchange fails with how to declare it", Config: rabbitmq.Config{Addr: sharedServer, Exchange: missing},
			Problem: fmt.Sprintf("exchange %q does not exist", missing), Fix: "set declare_exchange: true"},
		{Name: "a missing exchange that Connect declares passes", Config: rabbitmq.Config{Addr: sharedServer, Exchange: missing, DeclareExchange: true},
			Found: "Connect declares it (durable, topic)"},
		{Name: "a wrong password fails naming the credentials", Config: rabbitmq.Config{Addr: sharedServer, Exchange: name, Username: "guest", Password: "wrong"},
			Problem: "username or password not allowed", Fix: "check rabbitmq.username and the password"},
		{Name: "an unreachable broker fails naming it", Config: rabbitmq.Config{Addr: closed, Exchange: name, Timeout: time.Second}, Problem: closed},
	})
	if err := ch.ExchangeDeclarePassive(missing, "topic", true, false, false, false, nil); err == nil {
		ch.ExchangeDelete(missing, false, false)
		t.Error("after the probes the missing exchange exists: a probe must declare nothing")
	}
}
