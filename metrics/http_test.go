package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A standby whose address is taken (by the active relay on the same host)
// starts anyway and serves once the address is free.
func TestListenWhenFreeServesOnceTheAddressIsFree(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()
	if _, err := Listen(addr, http.NotFoundHandler(), nil); err == nil {
		t.Fatal("Listen on a busy address succeeded")
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	srv, err := ListenWhenFree(addr, h, nil, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	if srv.Addr() != nil {
		t.Fatal("bound a busy address")
	}
	busy.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) == "ok" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not served after the address was freed: %v", err)
		}
	}
	if _, err := ListenWhenFree("256.0.0.1:bad", h, nil, time.Second); err == nil {
		t.Fatal("a bad address was accepted")
	}
}

// Closed before the address frees up, it stops trying.
func TestListenWhenFreeClosedWhileWaiting(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	srv, err := ListenWhenFree(busy.Addr().String(), http.NotFoundHandler(), nil, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
