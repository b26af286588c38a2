package kafkasource

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/event"
)

// Position is the position after the record at offset next-1 of
// topic[partition]: where a stream resumes to read the record at next. It
// is an event.Position whose File is "<topic>[<partition>]@<next>" (no GTID
// set): what a checkpoint store saves as is.
func Position(topic string, partition int, next int64) event.Position {
	return event.Position{File: fmt.Sprintf("%s[%d]@%d", topic, partition, next)}
}

// Offset parses a Position: the partition's name ("<topic>[<partition>]")
// and the offset of the next record. ok is false for any other position.
func Offset(p event.Position) (name string, next int64, ok bool) {
	if p.GTIDSet != "" {
		return "", 0, false
	}
	i := strings.LastIndexByte(p.File, '@')
	if i < 0 || !strings.HasSuffix(p.File[:i], "]") {
		return "", 0, false
	}
	n, err := strconv.ParseInt(p.File[i+1:], 10, 64)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return p.File[:i], n, true
}

// Covers is the order of a partition's positions (gateway.HubConfig.Covers):
// whether have is at or after want. Every position covers the zero one;
// positions of different partitions cover nothing of each other.
func Covers(have, want event.Position) bool {
	if want.IsZero() {
		return true
	}
	hn, ho, ok1 := Offset(have)
	wn, wo, ok2 := Offset(want)
	return ok1 && ok2 && hn == wn && ho >= wo
}

// Suffix is what a partition adds to its endpoints' checkpoint keys:
// "@<topic>[<partition>]".
func Suffix(topic string, partition int) string { return fmt.Sprintf("@%s[%d]", topic, partition) }
