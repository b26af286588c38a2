package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/poller"
)

// A role is what a child process of the bench does; the parent re-executes
// its own binary with "-role NAME" so that every measured part (and the
// broker) has a process, a CPU account and a peak RSS of its own.

// result is what a measuring child prints, as one JSON line, when done.
type result struct {
	Events  int     `json:"events"`
	Seconds float64 `json:"seconds"`
	CPU     float64 `json:"cpu_seconds"` // user+system of the whole child
	MaxRSS  int64   `json:"max_rss_kb"`
	// ExecToAll is, for the relay binary's rows, the seconds from its exec
	// to the last event counted: its startup included.
	ExecToAll float64 `json:"exec_to_all_seconds,omitempty"`
	Err       string  `json:"err,omitempty"`
}

func finish(r result) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	r.CPU = tv(ru.Utime) + tv(ru.Stime)
	r.MaxRSS = ru.Maxrss
	b, _ := json.Marshal(r)
	fmt.Println("RESULT " + string(b))
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// roleBroker runs a Kafka-protocol broker (kfake) holding topic with
// partitions partitions, whose connections carry delay each way (and which
// stores no record with blackhole), prints its address, and runs until stdin
// closes.
func roleBroker(delay time.Duration, topic string, partitions int, blackhole bool) error {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic)}
	if blackhole {
		opts = append(opts, kfake.BlackholeProduce())
	}
	if delay > 0 {
		opts = append(opts, kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			l, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			return &delayListener{Listener: l, oneWay: delay / 2}, nil
		}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("BROKER " + c.ListenAddrs()[0])
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return nil
}

// delayListener's connections deliver every byte oneWay after it was sent,
// in each direction: a round trip gains 2×oneWay, throughput is untouched.
type delayListener struct {
	net.Listener
	oneWay time.Duration
}

func (l *delayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	d := &delayConn{Conn: c, oneWay: l.oneWay, in: make(chan chunk, 1024), out: make(chan chunk, 1024)}
	go d.readLoop()
	go d.writeLoop()
	return d, nil
}

type chunk struct {
	b  []byte
	at time.Time
}

type delayConn struct {
	net.Conn
	oneWay  time.Duration
	in, out chan chunk
	pending []byte
	rerr    error
	once    sync.Once
}

func (d *delayConn) readLoop() {
	defer close(d.in)
	for {
		b := make([]byte, 64<<10)
		n, err := d.Conn.Read(b)
		if n > 0 {
			d.in <- chunk{b[:n], time.Now().Add(d.oneWay)}
		}
		if err != nil {
			d.rerr = err
			return
		}
	}
}

func (d *delayConn) Read(p []byte) (int, error) {
	if len(d.pending) == 0 {
		c, ok := <-d.in
		if !ok {
			return 0, d.rerr
		}
		time.Sleep(time.Until(c.at))
		d.pending = c.b
	}
	n := copy(p, d.pending)
	d.pending = d.pending[n:]
	return n, nil
}

func (d *delayConn) Write(p []byte) (int, error) {
	d.out <- chunk{append([]byte(nil), p...), time.Now().Add(d.oneWay)}
	return len(p), nil
}

func (d *delayConn) writeLoop() {
	for c := range d.out {
		time.Sleep(time.Until(c.at))
		if _, err := d.Conn.Write(c.b); err != nil {
			_ = d.Conn.Close()
			for range d.out {
			}
			return
		}
	}
}

func (d *delayConn) Close() error {
	d.once.Do(func() { close(d.out) })
	return d.Conn.Close()
}

// roleDecode reads the binlog from start with a bare go-mysql BinlogSyncer,
// decoding every row event in full (go-mysql's defaults), until it has seen
// n rows inserted into table: the limit no binlog reader built on go-mysql
// can pass on this machine.
func roleDecode(host string, port int, start, table string, n int) result {
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 9001, Flavor: mysql.MariaDBFlavor, Host: host, Port: uint16(port), User: "root",
		Logger: slog.New(slog.DiscardHandler),
	})
	defer syncer.Close()
	set, err := mysql.ParseGTIDSet(mysql.MariaDBFlavor, start)
	if err != nil {
		return result{Err: err.Error()}
	}
	st, err := syncer.StartSyncGTID(set)
	if err != nil {
		return result{Err: err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	schema, name, _ := strings.Cut(table, ".")
	seen := 0
	var first time.Time
	for seen < n {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			return result{Err: err.Error()}
		}
		if re, ok := ev.Event.(*replication.RowsEvent); ok && re.Type() == replication.EnumRowsEventTypeInsert &&
			string(re.Table.Schema) == schema && string(re.Table.Table) == name {
			if seen == 0 {
				first = time.Now()
			}
			seen += len(re.Rows)
		}
	}
	return result{Events: seen, Seconds: time.Since(first).Seconds()}
}

// rolePoller drains table with workers pollers (no-op publish) and reports.
func rolePoller(dsn, table string, workers int) result {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return result{Err: err.Error()}
	}
	defer db.Close()
	db.SetMaxOpenConns(workers + 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		ferr  error
	)
	start := time.Now()
	for range workers {
		p := &poller.Poller{DB: db, Table: table, Batch: 100, Interval: 100 * time.Millisecond, Publish: func([]int64) error { return nil }}
		wg.Go(func() {
			n, err := p.Run(ctx, true)
			mu.Lock()
			total += n
			if err != nil && ferr == nil {
				ferr = err
			}
			mu.Unlock()
		})
	}
	go (&poller.Poller{DB: db, Table: table}).Reap(ctx)
	wg.Wait()
	r := result{Events: total, Seconds: time.Since(start).Seconds()}
	if ferr != nil {
		r.Err = ferr.Error()
	}
	return r
}

// rolePollerLive polls table every interval with one worker, publishing each
// claimed batch to url (one POST per event, its id as the body), until stdin
// closes.
func rolePollerLive(dsn, table, url string, interval time.Duration) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	client := &http.Client{Timeout: 10 * time.Second}
	p := &poller.Poller{DB: db, Table: table, Batch: 100, Interval: interval, Publish: func(ids []int64) error {
		for _, id := range ids {
			res, err := client.Post(url, "text/plain", strings.NewReader(strconv.FormatInt(id, 10)))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return nil
	}}
	go p.Reap(ctx)
	_, err = p.Run(ctx, false)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// child runs this binary with args and returns its result line.
func child(ctx context.Context, args ...string) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	return childOf(ctx, self, args...)
}

// childOf runs bin (an outbox-bench binary, possibly of another build) with
// args and returns its result line.
func childOf(ctx context.Context, bin string, args ...string) (result, error) {
	cmd := execCommand(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	var r result
	found := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			found = json.Unmarshal([]byte(line), &r) == nil
		}
	}
	werr := cmd.Wait()
	switch {
	case !found && werr != nil:
		return r, fmt.Errorf("%s: %w", strings.Join(args, " "), werr)
	case !found:
		return r, fmt.Errorf("%s: no result", strings.Join(args, " "))
	case r.Err != "":
		return r, fmt.Errorf("%s: %s", strings.Join(args, " "), r.Err)
	}
	return r, nil
}
