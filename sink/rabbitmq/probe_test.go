package rabbitmq_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// Probe (what `outbox-relay check` runs) says whether the exchange is
// there, will be declared, or what to do; it declares nothing.
func TestProbe(t *testing.T) {
	sinktest.Require(t, "rabbitmq", sharedServer)
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

	for _, tc := range []struct {
		name    string
		cfg     rabbitmq.Config
		found   string // in the result when it passes
		problem string // in the error when it fails; "" passes
		fix     string // in the Problem's fix; "" for an error that is no Problem
	}{
		{"an existing exchange passes", rabbitmq.Config{Addr: sharedServer, Exchange: name}, fmt.Sprintf("exchange %q exists", name), "", ""},
		{"a missing exchange fails with how to declare it", rabbitmq.Config{Addr: sharedServer, Exchange: missing}, "",
			fmt.Sprintf("exchange %q does not exist", missing), "set declare_exchange: true"},
		{"a missing exchange that Connect declares passes", rabbitmq.Config{Addr: sharedServer, Exchange: missing, DeclareExchange: true},
			"Connect declares it (durable, topic)", "", ""},
		{"a wrong password fails naming the credentials", rabbitmq.Config{Addr: sharedServer, Exchange: name, Username: "guest", Password: "wrong"}, "",
			"username or password not allowed", "check rabbitmq.username and the password"},
		{"an unreachable broker fails naming it", rabbitmq.Config{Addr: closed, Exchange: name, Timeout: time.Second}, "", closed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := rabbitmq.New(tc.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			found, err := s.Probe(context.Background())
			sinktest.CheckProbe(t, found, err, tc.found, tc.problem, tc.fix)
		})
	}
	if err := ch.ExchangeDeclarePassive(missing, "topic", true, false, false, false, nil); err == nil {
		ch.ExchangeDelete(missing, false, false)
		t.Error("after the probes the missing exchange exists: a probe must declare nothing")
	}
}
