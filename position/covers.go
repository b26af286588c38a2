package position

import (
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/event"
)

// Covers reports whether position have holds every transaction of position
// want, on a server of flavor: GTID containment (MySQL sets; MariaDB one
// seq_no per domain), or, with GTIDs off, file/position order within one
// binlog sequence. Anything it cannot compare is not covered.
func Covers(flavor string, have, want event.Position) bool {
	switch {
	case have.GTIDSet != "" && want.GTIDSet != "" && flavor == mysql.MariaDBFlavor:
		h, err1 := MariaDBPositions(have.GTIDSet)
		w, err2 := MariaDBPositions(want.GTIDSet)
		if err1 != nil || err2 != nil {
			return false
		}
		for d, g := range w {
			if c, ok := h[d]; !ok || c.SequenceNumber < g.SequenceNumber {
				return false
			}
		}
		return true
	case have.GTIDSet != "" && want.GTIDSet != "":
		_, n, err := GTIDMinus(want.GTIDSet, have.GTIDSet)
		return err == nil && n == 0
	case want.GTIDSet == "" && have.File != "" && want.File != "":
		hb, hn, ok1 := splitLogName(have.File)
		wb, wn, ok2 := splitLogName(want.File)
		return ok1 && ok2 && hb == wb && (hn > wn || hn == wn && have.Pos >= want.Pos)
	}
	return false
}

func splitLogName(name string) (string, int, bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(name[i+1:])
	return name[:i], n, err == nil
}
