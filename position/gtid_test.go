package position

import "testing"

func TestContains(t *testing.T) {
	const u1, u2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	cases := []struct {
		name, set, gtid string
		want, err       bool
	}{
		{"a MySQL transaction inside an interval is contained", u1 + ":1-10", u1 + ":7", true, false},
		{"a MySQL transaction past the interval is not", u1 + ":1-10", u1 + ":11", false, false},
		{"a MySQL transaction of another server is not", u1 + ":1-10", u2 + ":3", false, false},
		{"a MySQL transaction in a gap is not", u1 + ":1-5:8-10", u1 + ":6", false, false},
		{"a MySQL set spread over lines is read", u1 + ":1-10,\n" + u2 + ":1-3", u2 + ":3", true, false},
		{"a MariaDB transaction at the domain's position is contained", "0-1-100,1-1-5", "0-2-100", true, false},
		{"a MariaDB transaction past the domain's position is not", "0-1-100", "0-1-101", false, false},
		{"a MariaDB transaction of an unknown domain is not", "0-1-100", "3-1-1", false, false},
		{"a MariaDB GTID against a MySQL set is an error", u1 + ":1-10", "0-1-5", false, true},
		{"a MySQL GTID against a MariaDB position is an error", "0-1-100", u1 + ":5", false, true},
		{"an empty GTID is an error", "0-1-100", "", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.set)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Contains(c.gtid)
			if (err != nil) != c.err || got != c.want {
				t.Fatalf("Contains(%q) in %q = %v, %v; want %v, error %v", c.gtid, c.set, got, err, c.want, c.err)
			}
		})
	}
	if _, err := Parse(" "); err == nil {
		t.Fatal("Parse of an empty set succeeded")
	}
}
