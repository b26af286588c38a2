package event

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseTraceParent(t *testing.T) {
	const (
		ids = "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"
		v00 = "00-" + ids + "-01"
	)
	for _, c := range []struct {
		name string
		in   string
		want string // "": invalid
	}{
		{"a sampled version 00 traceparent is carried as it is", v00, v00},
		{"an unsampled one is", "00-" + ids + "-00", "00-" + ids + "-00"},
		{"flags other than sampled are kept", "00-" + ids + "-ff", "00-" + ids + "-ff"},
		{"a later version of 55 characters is carried as version 00", "01-" + ids + "-01", v00},
		{"a later version may append fields, which are not carried", "01-" + ids + "-01-extra", v00},
		{"a later version's appended line break is not carried", "cc-" + ids + "-01-x\r\nInjected: 1", v00},
		{"a later version longer than 55 needs '-' at character 55", "01-" + ids + "-01x", ""},
		{"a later version shorter than 55 is invalid", "01-" + ids + "-1", ""},
		{"version 00 may not append fields", v00 + "-extra", ""},
		{"version 00 may not append a line break", v00 + "\r\n", ""},
		{"version ff is invalid", "ff-" + ids + "-01", ""},
		{"version ff is invalid with fields appended", "ff-" + ids + "-01-x", ""},
		{"a version that is not hex is invalid", "0g-" + ids + "-01", ""},
		{"upper-case hex is invalid", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
		{"upper-case flags are invalid", "00-" + ids + "-0A", ""},
		{"an all-zero trace id is invalid", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"an all-zero parent id is invalid", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},
		{"a later version's all-zero trace id is invalid", "02-00000000000000000000000000000000-00f067aa0ba902b7-01-x", ""},
		{"a short one is invalid", "00-" + ids + "-1", ""},
		{"wrong separators are invalid", "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", ""},
		{"text is invalid", "not-a-traceparent", ""},
		{"empty is invalid", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ParseTraceParent(c.in)
			if ok != (c.want != "") || got != c.want {
				t.Errorf("ParseTraceParent(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.want != "")
			}
		})
	}
}

func TestBoundTraceState(t *testing.T) {
	members := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			k := fmt.Sprintf("k%d", i)
			out[i] = k + "=" + strings.Repeat("v", size-len(k)-1)
		}
		return out
	}
	list := func(m []string) string { return strings.Join(m, ",") }
	long := "big=" + strings.Repeat("x", 200)
	for _, c := range []struct {
		name, in, want string
	}{
		{"a valid tracestate is carried as it is", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
		{"empty is empty", "", ""},
		{"a multi-tenant key is valid", "fw529a3039@dt=abc", "fw529a3039@dt=abc"},
		{"keys may hold digits and _-*/ after the first letter", "a0_-*/=v", "a0_-*/=v"},
		{"optional white space and empty members are dropped", " a=1 ,\t, b=2\t,,", "a=1,b=2"},
		{"a member with a line break is dropped", "a=1,b=x\r\nInjected: 1,c=3", "a=1,c=3"},
		{"an upper-case key is dropped", "Abc=1,d=2", "d=2"},
		{"a key starting with a digit is dropped", "1a=1,d=2", "d=2"},
		{"a member without '=' is dropped", "a,b=2", "b=2"},
		{"an empty value is dropped", "a=,b=2", "b=2"},
		{"a value ending in a space is dropped", "a=x ,b=2", "a=x,b=2"}, // the space is optional white space
		{"a value with '=' is dropped", "a=x=y,b=2", "b=2"},
		{"a value of 257 characters is dropped", "a=" + strings.Repeat("v", 257) + ",b=2", "b=2"},
		{"a system id of 15 characters is dropped", "t@abcdefghijklmno=1,b=2", "b=2"},
		{"a later member with a key already seen is dropped", "a=1,b=2,a=3", "a=1,b=2"},
		{"32 members are kept", list(members(32, 10)), list(members(32, 10))},
		{"members after the 32nd are dropped", list(members(40, 10)), list(members(32, 10))},
		{"512 characters are kept", list(members(3, 128)) + ",z=" + strings.Repeat("v", 123), list(members(3, 128)) + ",z=" + strings.Repeat("v", 123)},
		{"513 are not", list(members(3, 128)) + ",z=" + strings.Repeat("v", 124), list(members(3, 128))},
		{"over 512, members over 128 characters go first", list(members(3, 128)) + "," + long + ",z=1", list(members(3, 128)) + ",z=1"},
		{"over 512, members go from the end", list(members(5, 128)), list(members(3, 128))},
		{"a 2 MB tracestate is cut to the members that fit", "a=1," + strings.Repeat("x", 2<<20), "a=1"},
		{"nothing valid is empty", "\r\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := BoundTraceState(c.in)
			if got != c.want {
				t.Errorf("BoundTraceState(%.80q) = %.80q, want %.80q", c.in, got, c.want)
			}
			if len(got) > MaxTraceStateLen || strings.Count(got, ",") >= MaxTraceStateMembers {
				t.Errorf("BoundTraceState(%.80q) = %d characters, %d members: over the bounds", c.in, len(got), strings.Count(got, ",")+1)
			}
		})
	}
}
