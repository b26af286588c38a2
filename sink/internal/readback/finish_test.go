package readback

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

func TestFinishLogsWhatTheClaimsHoldThenReportsThem(t *testing.T) {
	var c Claims
	if err := c.Hold(sink.Held{GTID: "0-1-5", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Drop(Oversized, "t[0]@9", "0-1-6", "b"); err != nil {
		t.Fatal(err)
	}
	var line bytes.Buffer
	log := slog.New(slog.NewTextHandler(&line, nil))
	var seen []string
	c.Finish(log, "read the topics back", slog.Int("topics", 2), event.Position{GTIDSet: "0-1-4"}, func(h sink.Held) { seen = append(seen, h.ID) })
	for _, want := range []string{`msg="read the topics back"`, "topics=2", "held_after_checkpoint=1", "dropped=1", "checkpoint=0-1-4"} {
		if !strings.Contains(line.String(), want) {
			t.Errorf("log line %q lacks %s", line.String(), want)
		}
	}
	if strings.Join(seen, ",") != "a,b" {
		t.Fatalf("reported %v; want a, b in the order held", seen)
	}
}
