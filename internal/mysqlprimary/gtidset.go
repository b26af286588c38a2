package mysqlprimary

import (
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// gtidSet is a MySQL GTID set (go-mysql's type, with the arithmetic the
// server needs).
type gtidSet = mysql.MysqlGTIDSet

func newGTIDSet() *gtidSet {
	s := mysql.NewMysqlGTIDSet()
	return &s
}

// parseGTIDSet parses MySQL's text form, also with the newlines MySQL puts
// after each comma.
func parseGTIDSet(s string) (*gtidSet, error) {
	g, err := mysql.ParseMysqlGTIDSet(strings.ReplaceAll(strings.TrimSpace(s), "\n", ""))
	if err != nil {
		return nil, err
	}
	return g.(*gtidSet), nil
}

func mustGTIDSet(s string) *gtidSet {
	g, err := parseGTIDSet(s)
	if err != nil {
		panic("mysqlprimary: GTID set " + s + ": " + err.Error())
	}
	return g
}

func cloneSet(s *gtidSet) *gtidSet { return s.Clone().(*gtidSet) }

// union adds o to s.
func union(s, o *gtidSet) {
	for u, tags := range *o {
		if (*s)[u] == nil {
			(*s)[u] = map[mysql.Tag]mysql.IntervalSlice{}
		}
		for tag, iv := range tags {
			(*s)[u][tag] = append(append(mysql.IntervalSlice(nil), (*s)[u][tag]...), iv...).Normalize()
		}
	}
}

// minus returns s without o.
func minus(s, o *gtidSet) *gtidSet {
	out := newGTIDSet()
	for u, tags := range *s {
		for tag, iv := range tags {
			rest := subtractIntervals(iv, (*o)[u][tag])
			if len(rest) == 0 {
				continue
			}
			if (*out)[u] == nil {
				(*out)[u] = map[mysql.Tag]mysql.IntervalSlice{}
			}
			(*out)[u][tag] = rest
		}
	}
	return out
}

func subtractIntervals(a, b mysql.IntervalSlice) mysql.IntervalSlice {
	var out mysql.IntervalSlice
	for _, x := range a {
		cur := []mysql.Interval{x}
		for _, y := range b {
			var next []mysql.Interval
			for _, c := range cur {
				if y.Stop <= c.Start || y.Start >= c.Stop {
					next = append(next, c)
					continue
				}
				if y.Start > c.Start {
					next = append(next, mysql.Interval{Start: c.Start, Stop: y.Start})
				}
				if y.Stop < c.Stop {
					next = append(next, mysql.Interval{Start: y.Stop, Stop: c.Stop})
				}
			}
			cur = next
		}
		out = append(out, cur...)
	}
	return out.Normalize()
}

// containsGTID reports whether s holds one GTID.
func containsGTID(s *gtidSet, sid uuid.UUID, tag string, gno int64) bool {
	for _, iv := range (*s)[sid][mysql.NewTag(tag)] {
		if gno >= iv.Start && gno < iv.Stop {
			return true
		}
	}
	return false
}

func addGTID(s *gtidSet, sid uuid.UUID, tag string, gno int64) {
	s.AddGTIDWithTag(sid, mysql.NewTag(tag), gno)
}

// restrictTo returns the part of s with server UUID sid.
func restrictTo(s *gtidSet, sid uuid.UUID) *gtidSet {
	out := newGTIDSet()
	if tags, ok := (*s)[sid]; ok {
		(*out)[sid] = tags
	}
	return cloneSet(out)
}

// mysqlText formats a set as MySQL shows gtid_executed: "," and a newline
// between server UUIDs.
func mysqlText(s *gtidSet) string {
	return strings.ReplaceAll(s.String(), ",", ",\n")
}
