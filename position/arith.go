package position

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// GTIDMinus returns a − b as a GTID set string and the number of
// transactions in it.
func GTIDMinus(a, b string) (string, int64, error) {
	ga, err := mysql.ParseMysqlGTIDSet(strings.ReplaceAll(a, "\n", ""))
	if err != nil {
		return "", 0, fmt.Errorf("parse %q: %w", a, err)
	}
	gb, err := mysql.ParseMysqlGTIDSet(strings.ReplaceAll(b, "\n", ""))
	if err != nil {
		return "", 0, fmt.Errorf("parse %q: %w", b, err)
	}
	sa, sb := ga.(*mysql.MysqlGTIDSet), gb.(*mysql.MysqlGTIDSet)
	if sb.Contain(sa) {
		return "", 0, nil
	}
	out := mysql.NewMysqlGTIDSet()
	var n int64
	for u, tags := range *sa {
		for tag, ivs := range tags {
			var sub mysql.IntervalSlice
			if t, ok := (*sb)[u]; ok {
				sub = t[tag]
			}
			diff := intervalsMinus(ivs, sub)
			if len(diff) == 0 {
				continue
			}
			if out[u] == nil {
				out[u] = map[mysql.Tag]mysql.IntervalSlice{}
			}
			out[u][tag] = diff
			for _, iv := range diff {
				n += iv.Stop - iv.Start
			}
		}
	}
	return out.String(), n, nil
}

// intervalsMinus returns a − b; both are [start, stop) intervals.
func intervalsMinus(a, b mysql.IntervalSlice) mysql.IntervalSlice {
	b = slices.Clone(b)
	sort.Slice(b, func(i, j int) bool { return b[i].Start < b[j].Start })
	var out mysql.IntervalSlice
	for _, iv := range a {
		cur := iv
		for _, x := range b {
			if x.Stop <= cur.Start || x.Start >= cur.Stop {
				continue
			}
			if x.Start > cur.Start {
				out = append(out, mysql.Interval{Start: cur.Start, Stop: x.Start})
			}
			cur.Start = x.Stop
			if cur.Start >= cur.Stop {
				break
			}
		}
		if cur.Start < cur.Stop {
			out = append(out, cur)
		}
	}
	return out
}

// MariaDBState parses gtid_binlog_state: the last seq_no of every
// (domain, server) pair in the binlog.
func MariaDBState(s string) (map[[2]uint32]uint64, error) {
	out := map[[2]uint32]uint64{}
	err := eachMariaDBGTID(s, func(g *mysql.MariadbGTID) { out[[2]uint32{g.DomainID, g.ServerID}] = g.SequenceNumber })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SortedDomains returns the domains of a MariaDB GTID position in order.
func SortedDomains(m map[uint32]mysql.MariadbGTID) []uint32 {
	var ds []uint32
	for d := range m {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}
