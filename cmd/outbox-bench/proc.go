package main

import (
	"database/sql"
	"os"
	"strconv"
	"strings"
)

// The other processes of a row: the broker (the Kafka rows) and the
// private MariaDB share the machine's cores with the measured process, so
// each row also states what they spent in the same run, read from
// /proc/PID/stat before and after it.

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times
// (100 on every Linux this runs on).
const clockTicks = 100

// procCPU returns the user+system CPU seconds process pid has used, or -1
// when it cannot be read (not Linux, the process is gone).
func procCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing one (state is field 3; utime 14, stime 15).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	k, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (u + k) / clockTicks
}

// serverPID returns the private MariaDB's process id, from its pid file.
func serverPID(db *sql.DB) int {
	var path string
	if err := db.QueryRow("SELECT @@pid_file").Scan(&path); err != nil {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// cpuSpan measures what processes spent between start and stop.
type cpuSpan struct {
	pids   []int
	before []float64
}

func startSpan(pids ...int) *cpuSpan {
	s := &cpuSpan{pids: pids}
	for _, p := range pids {
		s.before = append(s.before, procCPU(p))
	}
	return s
}

// stop returns each process's CPU seconds since startSpan (-1: unknown).
func (s *cpuSpan) stop() []float64 {
	out := make([]float64, len(s.pids))
	for i, p := range s.pids {
		now := procCPU(p)
		if now < 0 || s.before[i] < 0 {
			out[i] = -1
			continue
		}
		out[i] = now - s.before[i]
	}
	return out
}
