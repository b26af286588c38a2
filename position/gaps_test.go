package position

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

func TestMariaDBHistory(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name, checkpoint string
		at               *string
		want             string // a part of the first difference; "" for none
	}{
		{"the binlog has the checkpoint's GTID where it ended", "0-1-4", str("0-1-4"), ""},
		{"domains the checkpoint lacks are not compared", "0-1-4", str("0-1-4,1-7-9"), ""},
		{"several domains agree", "0-1-4,1-7-9", str("1-7-9,0-1-4"), ""},
		{"no transaction ends there", "0-1-4", nil, "no transaction of this server's binlog ends at binlog.000001:997"},
		{"another GTID ends there", "0-1-4", str("0-1-3"), "at binlog.000001:997 this server's binlog is at 0-1-3, where the checkpoint has 0-1-4"},
		{"same seq_no from another origin", "0-1-4", str("0-2-4"), "is at 0-2-4"},
		{"a domain of the checkpoint is not there yet", "0-1-4,1-7-9", str("0-1-4"), "no GTID of domain 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			diff, err := MariaDBHistory(tc.checkpoint, "binlog.000001", 997, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(diff) > 0:
				t.Fatalf("histories differ: %q", diff)
			case tc.want != "" && (len(diff) == 0 || !strings.Contains(diff[0], tc.want)):
				t.Fatalf("differences %q, want one with %q", diff, tc.want)
			}
		})
	}
	if _, err := MariaDBHistory("0-1-4", "f", 9, new(string("garbage"))); err == nil {
		t.Error("an unreadable GTID position at File:Pos is no error")
	}
}

func TestForeignGapsAreNotInHistoryWithTheRecoveryChoices(t *testing.T) {
	g := Gaps{Foreign: []string{"at binlog.000001:997 this server's binlog is at 0-1-3, where the checkpoint has 0-1-4"}}
	if g.None() {
		t.Fatal("a foreign history reads as no gap")
	}
	err := g.Err(event.Position{GTIDSet: "0-1-4", File: "binlog.000001", Pos: 997})
	if !errors.Is(err, ErrNotInHistory) {
		t.Fatalf("%v does not wrap ErrNotInHistory", err)
	}
	for _, want := range []string{"another history", "point the relay at the server it was read from", "remove the sink's checkpoint"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "wait for this server to catch up") {
		t.Errorf("waiting cannot mend another history: %v", err)
	}
}

func TestMariaDBCommit(t *testing.T) {
	at := time.Unix(1_600_000_004, 0).UTC()
	for _, tc := range []struct {
		name   string
		server time.Time
		found  bool
		want   string // a part of the difference; "" for none
	}{
		{"the transaction there committed when the checkpoint's did", at, true, ""},
		{"the same second in another zone", at.In(time.FixedZone("x", 3600)), true, ""},
		{"it committed at another second", at.Add(time.Second), true, "committed at 2020-09-13T12:26:45Z, the checkpoint's committed at 2020-09-13T12:26:44Z"},
		{"no transaction ends there", time.Time{}, false, "no transaction of this server's binlog ends at binlog.000001:997"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			diff := MariaDBCommit("binlog.000001", 997, at, tc.server, tc.found)
			switch {
			case tc.want == "" && len(diff) > 0:
				t.Fatalf("histories differ: %q", diff)
			case tc.want != "" && (len(diff) != 1 || !strings.Contains(diff[0], tc.want)):
				t.Fatalf("differences %q, want one with %q", diff, tc.want)
			}
		})
	}
}
