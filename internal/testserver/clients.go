package testserver

// This file owns telling a server's client connections apart by their
// client's port: which of the connections a server lists belong to a
// process, and which of those the process still holds open.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClientPorts returns the local ports of process pid's TCP sockets: its
// connections to a server show there as host 127.0.0.1:PORT (the
// processlist's HOST). With established, only the sockets in state
// ESTABLISHED: a connection pid has closed and the server has not noticed
// yet (its thread lingers until its next write) is left out.
func ClientPorts(pid int, established bool) (map[string]bool, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	ports := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st … inode
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] || (established && f[3] != "01") {
				continue
			}
			local := f[1] // hex address:hex port
			port, err := strconv.ParseUint(local[strings.LastIndexByte(local, ':')+1:], 16, 16)
			if err != nil {
				return nil, fmt.Errorf("%s: local address %q: %w", table, local, err)
			}
			ports[strconv.FormatUint(port, 10)] = true
		}
	}
	return ports, nil
}

// HostPort returns the port of a processlist HOST (127.0.0.1:PORT,
// localhost:PORT), "" for one without a port (a Unix socket).
func HostPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 {
		return ""
	}
	return host[i+1:]
}
