package canal

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// mariadbSet is a MariaDB position of the given GTIDs, the last of a
// domain winning, as AddSet's would be (without its log of a GTID that is
// not newer).
func mariadbSet(gtids ...mysql.MariadbGTID) *mysql.MariadbGTIDSet {
	set := &mysql.MariadbGTIDSet{Sets: make(map[uint32]*mysql.MariadbGTID)}
	for i := range gtids {
		set.Sets[gtids[i].DomainID] = gtids[i].Clone()
	}
	return set
}

// The text of a GTID and of a position is go-mysql's, byte for byte: the
// all-zero GTID is "", domain 0 and the largest values are written in
// full, and a position of several domains sorts them as strings.
func TestGTIDText(t *testing.T) {
	for _, c := range []struct {
		g    mysql.MariadbGTID
		want string
	}{
		{mysql.MariadbGTID{}, ""},
		{mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 1}, "0-1-1"},
		{mysql.MariadbGTID{DomainID: 0, ServerID: 0, SequenceNumber: 7}, "0-0-7"},
		{mysql.MariadbGTID{DomainID: 3, ServerID: 0, SequenceNumber: 0}, "3-0-0"},
		{mysql.MariadbGTID{DomainID: math.MaxUint32, ServerID: math.MaxUint32, SequenceNumber: math.MaxUint64},
			"4294967295-4294967295-18446744073709551615"},
	} {
		if got := mariadbGTID(&c.g); got != c.want || got != c.g.String() {
			t.Errorf("mariadbGTID(%+v) = %q, want %q (go-mysql: %q)", c.g, got, c.want, c.g.String())
		}
	}

	for _, c := range []struct {
		set  *mysql.MariadbGTIDSet
		want string
	}{
		{mariadbSet(), ""},
		{mariadbSet(mysql.MariadbGTID{}), ""},
		{mariadbSet(mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 42}), "0-1-42"},
		{mariadbSet(mysql.MariadbGTID{DomainID: 2, ServerID: 1, SequenceNumber: 5}, mysql.MariadbGTID{DomainID: 10, ServerID: 1, SequenceNumber: 3}),
			"10-1-3,2-1-5"},
		{mariadbSet(mysql.MariadbGTID{DomainID: 1, ServerID: 9, SequenceNumber: 100}, mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 2},
			mysql.MariadbGTID{DomainID: 100, ServerID: 3, SequenceNumber: 1}), "0-1-2,1-9-100,100-3-1"},
	} {
		if got := gtidSet(c.set); got != c.want || got != c.set.String() {
			t.Errorf("gtidSet(%v) = %q, want %q (go-mysql: %q)", c.set.Sets, got, c.want, c.set.String())
		}
	}

	// A MySQL set is go-mysql's text.
	mset, err := mysql.ParseMysqlGTIDSet("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7,a1b2c3d4-0000-0000-0000-000000000001:9")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gtidSet(mset), mset.String(); got != want {
		t.Errorf("gtidSet(MySQL set) = %q, want %q", got, want)
	}

	u := uuid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562")
	for _, gno := range []int64{0, 1, 42, math.MaxInt64, -1, math.MinInt64} {
		if got, want := mysqlGTID(u, gno), fmt.Sprintf("%s:%d", u, gno); got != want {
			t.Errorf("mysqlGTID(%s, %d) = %q, want %q", u, gno, got, want)
		}
	}
}

// randomGTID draws each field from small values (0 and 1 often, so the
// all-zero GTID comes up), digits of every length, and the largest.
func randomGTID(r *rand.Rand) mysql.MariadbGTID {
	field := func(bits uint) uint64 {
		switch r.IntN(4) {
		case 0:
			return uint64(r.IntN(2))
		case 1:
			return 1<<bits - 1
		default:
			return r.Uint64() >> (64 - 1 - r.UintN(bits)) // 1 to bits bits
		}
	}
	return mysql.MariadbGTID{DomainID: uint32(field(32)), ServerID: uint32(field(32)), SequenceNumber: field(64)}
}

// Many random GTIDs and positions of 1 to 4 domains (the domain numbers
// often small, so 2 and 10 sort differently as strings and as numbers)
// give go-mysql's text.
func TestGTIDTextRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		g := randomGTID(r)
		if got, want := mariadbGTID(&g), g.String(); got != want {
			t.Fatalf("mariadbGTID(%+v) = %q, want %q", g, got, want)
		}
		gtids := make([]mysql.MariadbGTID, 1+r.IntN(4))
		for i := range gtids {
			gtids[i] = randomGTID(r)
			if r.IntN(2) == 0 {
				gtids[i].DomainID = uint32(r.IntN(30))
			}
		}
		set := mariadbSet(gtids...)
		if got, want := gtidSet(set), set.String(); got != want {
			t.Fatalf("gtidSet(%v) = %q, want %q", gtids, got, want)
		}
		var u uuid.UUID
		for i := range u {
			u[i] = byte(r.Uint32())
		}
		gno := int64(r.Uint64())
		if got, want := mysqlGTID(u, gno), fmt.Sprintf("%s:%d", u, gno); got != want {
			t.Fatalf("mysqlGTID = %q, want %q", got, want)
		}
	}
}

// A fuzzed position of up to three domains, and each of its GTIDs, give
// go-mysql's text.
func FuzzGTIDText(f *testing.F) {
	f.Add(uint32(0), uint32(0), uint64(0), uint32(0), uint32(0), uint64(0), uint32(0), uint32(0), uint64(0), uint8(1))
	f.Add(uint32(0), uint32(1), uint64(1), uint32(2), uint32(1), uint64(5), uint32(10), uint32(1), uint64(3), uint8(3))
	f.Add(uint32(2), uint32(1), uint64(5), uint32(10), uint32(7), uint64(3), uint32(0), uint32(0), uint64(0), uint8(2))
	f.Add(uint32(math.MaxUint32), uint32(math.MaxUint32), uint64(math.MaxUint64), uint32(1), uint32(0), uint64(0), uint32(100), uint32(3), uint64(9), uint8(3))
	f.Fuzz(func(t *testing.T, d1, s1 uint32, q1 uint64, d2, s2 uint32, q2 uint64, d3, s3 uint32, q3 uint64, n uint8) {
		gtids := []mysql.MariadbGTID{
			{DomainID: d1, ServerID: s1, SequenceNumber: q1},
			{DomainID: d2, ServerID: s2, SequenceNumber: q2},
			{DomainID: d3, ServerID: s3, SequenceNumber: q3},
		}[:n%3+1]
		for _, g := range gtids {
			if got, want := mariadbGTID(&g), g.String(); got != want {
				t.Fatalf("mariadbGTID(%+v) = %q, want %q", g, got, want)
			}
		}
		set := mariadbSet(gtids...)
		if got, want := gtidSet(set), set.String(); got != want {
			t.Fatalf("gtidSet(%v) = %q, want %q", gtids, got, want)
		}
	})
}

// BenchmarkGTIDText compares the text of a MariaDB GTID and of a
// one-domain position (once per transaction each) with go-mysql's.
func BenchmarkGTIDText(b *testing.B) {
	g := mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 123456789}
	set := mariadbSet(g)
	three := mariadbSet(g, mysql.MariadbGTID{DomainID: 2, ServerID: 1, SequenceNumber: 5}, mysql.MariadbGTID{DomainID: 10, ServerID: 2, SequenceNumber: 77})
	u := uuid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562")
	var sink string
	for _, c := range []struct {
		name string
		f    func() string
	}{
		{"gtid/go-mysql", g.String},
		{"gtid/canal", func() string { return mariadbGTID(&g) }},
		{"set1/go-mysql", set.String},
		{"set1/canal", func() string { return gtidSet(set) }},
		{"set3/go-mysql", three.String},
		{"set3/canal", func() string { return gtidSet(three) }},
		{"mysql/fmt", func() string { return fmt.Sprintf("%s:%d", u, int64(123456789)) }},
		{"mysql/canal", func() string { return mysqlGTID(u, 123456789) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = c.f()
			}
		})
	}
	_ = sink
}
