// Command servers lists the servers the registered sink kinds' tests need
// (sink.Kind.Server), for CI (.ci/run): a kind with a broker of its own
// declares it in its package, and CI installs and starts it, so adding the
// kind touches no CI file.
//
//	go run ./sink/all/servers           # one line per server that does not answer:
//	                                    # its Debian packages, a tab, its start command
//	go run ./sink/all/servers -wait 2m  # wait until every declared server answers;
//	                                    # exit 1 naming those that do not
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"
	_ "github.com/outbox-relay/outbox-relay/sink/all"
)

func main() {
	wait := flag.Duration("wait", 0, "wait this long for every declared server to answer, instead of listing the missing ones")
	flag.Parse()
	if err := run(os.Stdout, sink.Kinds(), *wait, answers); err != nil {
		fmt.Fprintln(os.Stderr, "servers:", err)
		os.Exit(1)
	}
}

// answers says whether a server accepts a connection at addr.
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// run lists, on out, the declared servers of kinds that do not answer
// (packages, a tab, the start command), or, with wait > 0, waits until
// every one answers.
func run(out io.Writer, kinds []sink.Kind, wait time.Duration, answers func(addr string) bool) error {
	if wait <= 0 {
		for _, s := range missing(kinds, answers) {
			fmt.Fprintf(out, "%s\t%s\n", strings.Join(s.Packages, " "), s.Start)
		}
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		left := missing(kinds, answers)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range left {
				names = append(names, fmt.Sprintf("%s at %s", s.Name, s.Addr))
			}
			return fmt.Errorf("not answering after %s: %s (the sink kinds' tests need them; see sink.Kind.Server)", wait, strings.Join(names, ", "))
		}
		time.Sleep(time.Second)
	}
}

// missing are the declared servers of kinds that do not answer, once each
// (kinds may share one).
func missing(kinds []sink.Kind, answers func(addr string) bool) []sink.Server {
	var out []sink.Server
	seen := map[string]bool{}
	for _, k := range kinds {
		if k.Server == nil || seen[k.Server.Addr] {
			continue
		}
		seen[k.Server.Addr] = true
		if !answers(k.Server.Addr) {
			out = append(out, *k.Server)
		}
	}
	return out
}
