package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The rows of the relay binary: the relay runs as users run it, the binary
// built from ./cmd/outbox-relay with `run --config FILE`, in a process of its
// own, writing into a pipe (stdout), to the receiver (webhooks) in the
// bench's process, or to a broker in a process of its own (Kafka). Each
// rate's clock starts when the first event arrives where it is counted (the
// pipe's reader, the receiver, the topic's high watermarks: kafka.go) and
// stops at the n-th, the same way for the HTTP floor. CPU and peak RSS are
// the child's whole life (getrusage of the waited-for child), as for every
// other row; each row also gives the time from the exec to the n-th event,
// which holds the relay's startup, as a user timing it from outside would.

// floorConcurrency is the floor client's connections: the webhook
// endpoint's default max_concurrency.
const floorConcurrency = 16

// benchSecret signs the webhook rows: the relay's endpoint and the floor
// client sign every request with it (Standard Webhooks v1).
const benchSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// buildRelay builds ./cmd/outbox-relay into dir; bin, when set, is used as
// it is.
func buildRelay(dir, bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	out := filepath.Join(dir, "outbox-relay")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/outbox-relay")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/outbox-relay (run the bench from the module's root, or pass -relay BIN): %w", err)
	}
	return out, nil
}

// counter counts the requests to one receiver path, with the times of the
// first and the n-th.
type counter struct {
	n           atomic.Int64
	want        int64
	mu          sync.Mutex
	first, last time.Time
	done        chan struct{}
}

func newCounter(want int) *counter { return &counter{want: int64(want), done: make(chan struct{})} }

func (c *counter) hit(now time.Time) { c.add(1, now) }

// add counts k more events seen at now: the first time the count is above
// zero is the first's time, the time it reaches want the last's.
func (c *counter) add(k int64, now time.Time) {
	n := c.n.Add(k)
	if n-k <= 0 && n > 0 {
		c.mu.Lock()
		c.first = now
		c.mu.Unlock()
	}
	if n-k < c.want && n >= c.want {
		c.mu.Lock()
		c.last = now
		c.mu.Unlock()
		close(c.done)
	}
}

// seconds is the time from the first to the n-th, as n events per that time
// (n-1 intervals scaled to n).
func (c *counter) seconds() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.want < 2 {
		return 0
	}
	return c.last.Sub(c.first).Seconds() * float64(c.want) / float64(c.want-1)
}

// since is the time from t to the n-th event (0 before it).
func (c *counter) since(t time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last.IsZero() {
		return 0
	}
	return c.last.Sub(t).Seconds()
}

// runBinary starts bin with args, waits for n events counted by c (fed,
// with stdoutLines, from the child's stdout), stops the child with SIGTERM
// and returns the rate, the time from exec to the n-th event, and the
// child's CPU and peak RSS.
//
// With OUTBOX_BENCH_CPUPROFILE=DIR and pprofAddr (the relay's http.listen
// with pprof on), a CPU profile of the relay's next 5 s after the first
// event is written to DIR/relay-binary-<name>.pprof, and the relay is
// stopped only after it.
func runBinary(ctx context.Context, bin string, args []string, c *counter, stdoutLines bool, name, pprofAddr string) (result, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	logPath := filepath.Join(filepath.Dir(args[len(args)-1]), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return result{}, err
	}
	defer logFile.Close()
	cmd.Stderr = logFile // the relay's log; its tail is shown if it fails
	var out io.ReadCloser
	if stdoutLines {
		var err error
		if out, err = cmd.StdoutPipe(); err != nil {
			return result{}, err
		}
	}
	execAt := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	exited := make(chan error, 1)
	if stdoutLines {
		go func() {
			r := bufio.NewReaderSize(out, 1<<20)
			for {
				if _, err := r.ReadSlice('\n'); err != nil && err != bufio.ErrBufferFull {
					break
				}
				c.hit(time.Now())
			}
			exited <- cmd.Wait()
		}()
	} else {
		go func() { exited <- cmd.Wait() }()
	}
	profiled := make(chan struct{})
	if dir := os.Getenv("OUTBOX_BENCH_CPUPROFILE"); dir != "" && pprofAddr != "" {
		go func() {
			defer close(profiled)
			profileAfterFirst(c, pprofAddr, filepath.Join(dir, "relay-binary-"+name+".pprof"))
		}()
	} else {
		close(profiled)
	}
	var werr error
	select {
	case <-c.done:
		// A drain shorter than the profile's 5 s (the Kafka rows) is
		// profiled whole: the relay, idle, is stopped once the profile
		// and its allocations are written (its rate is clocked already).
		<-profiled
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case werr = <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			werr = <-exited
		}
		werr = nil // stopped by the bench
	case werr = <-exited:
		if werr == nil {
			werr = fmt.Errorf("exited after %d of %d events", c.n.Load(), c.want)
		}
	case <-time.After(10 * time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		werr = fmt.Errorf("%d of %d events in 10 minutes", c.n.Load(), c.want)
	}
	r := result{Events: int(c.n.Load()), Seconds: c.seconds(), ExecToAll: c.since(execAt)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.CPU, r.MaxRSS = tv(ru.Utime)+tv(ru.Stime), ru.Maxrss
	}
	if werr != nil {
		if b, err := os.ReadFile(logPath); err == nil {
			fmt.Fprintf(os.Stderr, "the relay's log ends:\n%s\n", b[max(0, len(b)-4096):])
		}
		r.Err = werr.Error()
		return r, werr
	}
	return r, nil
}

// profileAfterFirst waits for c's first event and writes 5 s of the relay's
// CPU profile, read from its /debug/pprof/profile, to path.
func profileAfterFirst(c *counter, addr, path string) {
	for c.n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	fetchProfile("http://"+addr+"/debug/pprof/profile?seconds=5", path)
	// What it allocated since it started (alloc_objects, alloc_space).
	fetchProfile("http://"+addr+"/debug/pprof/allocs", strings.TrimSuffix(path, ".pprof")+".allocs.pprof")
}

func fetchProfile(url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay profile: %v\n", err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay profile: %v\n", err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}

// pprofListen returns a free loopback address for the relay's http.listen
// when profiles are asked for (OUTBOX_BENCH_CPUPROFILE), and "" otherwise.
func pprofListen() string {
	if os.Getenv("OUTBOX_BENCH_CPUPROFILE") == "" {
		return ""
	}
	return freeAddr()
}

// freeAddr returns a loopback address that was free a moment ago ("" when
// none could be had).
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer l.Close()
	return l.Addr().String()
}

// relayArgs writes cfg to dir and returns the relay's command line.
func relayArgs(dir, name, cfg string) ([]string, error) {
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	// The private server keeps its binlogs a short time: the retention
	// check would WARN, never FAIL; no check is allowed to fail here.
	return []string{"run", "--config", path}, nil
}

// roleFloor is the HTTP floor: a bare net/http client, concurrency
// goroutines over as many keep-alive connections, posting n requests to url
// with the body and the Standard Webhooks headers (webhook-id,
// webhook-timestamp, webhook-signature under secret, Content-Type) the relay
// sends for the backlog's events, and nothing else. It is as lean as such a
// client can be, so that the relay's ratio to it is not flattered: the
// bodies are made before the first request (a client has its payloads),
// and per request it only signs (one reused HMAC per connection), sets the
// headers (canonical keys, no parsing), sends, and reads the answer.
func roleFloor(url string, n, concurrency int, secret string) result {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return result{Err: err.Error()}
	}
	// The backlog's k-th row: its payload.
	bodies := make([][]byte, n)
	for k := range bodies {
		bodies[k] = fmt.Appendf(nil, `{"order_id": "ord-%06d", "amount": %d, "currency": "EUR", "note": "a typical small payload"}`, k, k%9973)
	}
	tr := &http.Transport{
		MaxIdleConns: concurrency, MaxIdleConnsPerHost: concurrency, MaxConnsPerHost: concurrency,
		DisableCompression: true, IdleConnTimeout: time.Minute,
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, concurrency)
	start := time.Now()
	contentType := []string{"application/json"}
	for range concurrency {
		wg.Go(func() {
			mac := hmac.New(sha256.New, key)
			var sum [sha256.Size]byte
			sig := make([]byte, 0, 3+base64.StdEncoding.EncodedLen(sha256.Size))
			var num [20]byte
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				body := bodies[i-1]
				id := strconv.FormatInt(i, 10)
				ts := string(strconv.AppendInt(num[:0], time.Now().Unix(), 10))
				mac.Reset()
				mac.Write([]byte(id))
				mac.Write([]byte{'.'})
				mac.Write([]byte(ts))
				mac.Write([]byte{'.'})
				mac.Write(body)
				sig = base64.StdEncoding.AppendEncode(append(sig[:0], "v1,"...), mac.Sum(sum[:0]))
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				req.Header = http.Header{
					"Content-Type":      contentType,
					"Webhook-Id":        {id},
					"Webhook-Timestamp": {ts},
					"Webhook-Signature": {string(sig)},
				}
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					errs <- fmt.Errorf("receiver answered %s", resp.Status)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	r := result{Events: n, Seconds: time.Since(start).Seconds()}
	if err := <-errs; err != nil {
		r.Err = err.Error()
	}
	return r
}

// gatewayEndpoints is the webhook sink of the 1,000-endpoint row: endpoint
// i selects the aggregate type of tenant i (the backlog spreads its rows
// over tenants round robin), so each event goes to one endpoint, and all
// share the stream.
func gatewayEndpoints(url string, n, concurrency int) string {
	var b strings.Builder
	b.WriteString(`{name: hook, type: webhook, webhook: {endpoints: [`)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{name: ep%04d, url: %q, secrets: [%q], max_concurrency: %d, filter: {aggregate_types: [%q]}}`,
			i, url, benchSecret, concurrency, tenant(i))
	}
	b.WriteString(`]}}`)
	return b.String()
}

// tenants is the number of aggregate types the backlog's rows are spread
// over: one per endpoint of the gateway row.
const tenants = 1000

func tenant(i int) string { return fmt.Sprintf("t%03d", i%tenants) }

// running is a relay binary started by startBinary.
type running struct {
	cmd    *exec.Cmd
	exited chan error
	once   sync.Once
}

// startBinary starts bin with args, its log (stderr) in logPath: the live
// phase's relay, run as users run it. With line set, each line of its stdout
// is handed to line, with the time it was read, from one goroutine.
func startBinary(bin string, args []string, logPath string, line func([]byte, time.Time)) (*running, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	var out io.ReadCloser
	if line != nil {
		if out, err = cmd.StdoutPipe(); err != nil {
			logFile.Close()
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	r := &running{cmd: cmd, exited: make(chan error, 1)}
	go func() {
		if out != nil {
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				line(sc.Bytes(), time.Now())
			}
		}
		r.exited <- cmd.Wait()
		logFile.Close()
	}()
	return r, nil
}

// stop stops the relay with SIGTERM (killed after 30 s) and waits for it;
// only the first call does.
func (r *running) stop() {
	r.once.Do(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(30 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	})
}
