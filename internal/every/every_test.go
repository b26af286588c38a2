package every

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestTickCallsOnThePeriodUntilDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		var at []time.Duration
		start := time.Now()
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			Tick(done, time.Second, func() bool { at = append(at, time.Since(start)); return true })
		}()
		time.Sleep(3500 * time.Millisecond)
		close(done)
		<-ended
		if len(at) != 3 || at[0] != time.Second || at[2] != 3*time.Second {
			t.Fatalf("called at %v, want at 1s, 2s and 3s", at)
		}
	})
}

func TestTickStopsWhenFReturnsFalse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		Tick(make(chan struct{}), time.Second, func() bool { n++; return n < 2 })
		if n != 2 {
			t.Fatalf("called %d times, want 2: the second call said stop", n)
		}
	})
}
