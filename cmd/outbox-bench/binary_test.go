package main

import (
	"strings"
	"testing"
	"time"
)

func TestACounterFedInJumpsClocksTheFirstCountAboveZeroAndTheJumpThatReachesAll(t *testing.T) {
	c := newCounter(1000)
	t0 := time.Unix(100, 0)
	c.add(0, t0) // a poll that found nothing yet starts no clock
	c.add(400, t0.Add(time.Second))
	c.add(500, t0.Add(2*time.Second))
	select {
	case <-c.done:
		t.Fatal("done at 900 of 1000")
	default:
	}
	c.add(100, t0.Add(3*time.Second))
	select {
	case <-c.done:
	default:
		t.Fatal("not done at 1000 of 1000")
	}
	c.add(5, t0.Add(4*time.Second)) // more than all (a duplicate) moves neither end
	if got, want := c.seconds(), 2*1000.0/999; got != want {
		t.Fatalf("seconds = %v, want %v (first above zero at 1 s, all at 3 s)", got, want)
	}
	if got := c.since(t0); got != 3 {
		t.Fatalf("since the exec = %v s, want 3", got)
	}
}

func TestACounterFedOneByOneClocksTheFirstAndTheLast(t *testing.T) {
	c := newCounter(3)
	t0 := time.Unix(100, 0)
	for i := range 3 {
		c.hit(t0.Add(time.Duration(i+1) * time.Second))
	}
	if got, want := c.seconds(), 2*3.0/2; got != want {
		t.Fatalf("seconds = %v, want %v", got, want)
	}
}

func TestAKafkaRowThatKeepsTheCoresBusyIsReportedAsBoundByThem(t *testing.T) {
	// 100,000 events in 1 s; the relay 0.63 s, the broker 1.07 s, MariaDB
	// 0.2 s: 1.9 of 2 cores.
	limit := backlogRow{name: "bare go-mysql BinlogSyncer, every row decoded (the limit)", res: result{Events: 100000, Seconds: 0.4, CPU: 0.5}, serverCPU: -1, brokerCPU: -1}
	k := backlogRow{name: kafka6, res: result{Events: 100000, Seconds: 1, CPU: 0.63, ExecToAll: 1.2}, serverCPU: 0.2, brokerCPU: 1.07, binary: true}
	if got := coresOf(k).total(); got < 1.899 || got > 1.901 {
		t.Fatalf("cores busy = %v, want 1.9", got)
	}
	rep := report(reportInput{rows: 100000, table: []backlogRow{limit, k}, cpus: 2})
	for _, want := range []string{
		"relay → Kafka, 6 partitions ≥ 0.8× the bare decoder, or bound by the broker or the cores: 0.40× — **not met as a ratio: bound by the cores** (1.90 of the 2 busy)",
		"relay 0.63 + broker 1.07 + MariaDB 0.20",
		"| 1.20 |", // exec → all
		"| 1.90 |", // cores busy
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("the report lacks %q:\n%s", want, rep)
		}
	}
}

func TestAKafkaRowBelowTheTargetWithCoresToSpareIsNotMet(t *testing.T) {
	limit := backlogRow{name: "bare go-mysql BinlogSyncer, every row decoded (the limit)", res: result{Events: 100000, Seconds: 0.4, CPU: 0.5}, serverCPU: -1, brokerCPU: -1}
	k := backlogRow{name: kafka6, res: result{Events: 100000, Seconds: 1, CPU: 0.63}, serverCPU: 0.1, brokerCPU: 0.3, binary: true}
	rep := report(reportInput{rows: 100000, table: []backlogRow{limit, k}, cpus: 2})
	if want := "0.40× — **not met**; cores busy 1.03 of 2"; !strings.Contains(rep, want) {
		t.Errorf("the report lacks %q:\n%s", want, rep)
	}
}
