package webhook

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An attempt context is reused until an attempt is cancelled; a timer that
// fires for an attempt that has ended cancels nothing.
func TestAttemptCtx(t *testing.T) {
	var a attemptCtx
	ctx := a.arm(time.Now(), time.Hour)
	a.disarm()
	a.expire() // a late fire for the attempt disarmed
	if ctx.Err() != nil {
		t.Fatalf("a disarmed attempt's context ended: %v", context.Cause(ctx))
	}
	ctx2 := a.arm(time.Now(), time.Hour)
	if ctx2 != ctx {
		t.Error("the next attempt got a new context, want the same")
	}
	a.expire() // a late fire for the attempt before, within this one's timeout
	if ctx2.Err() != nil {
		t.Fatalf("an attempt's context ended before its timeout: %v", context.Cause(ctx2))
	}
	a.disarm()

	ctx3 := a.arm(time.Now().Add(-2*time.Hour), time.Hour) // its timeout has passed
	a.expire()
	if !errors.Is(context.Cause(ctx3), context.DeadlineExceeded) {
		t.Errorf("timed-out attempt's context: cause %v, want %v", context.Cause(ctx3), context.DeadlineExceeded)
	}
	a.disarm()

	ctx4 := a.arm(time.Now(), time.Hour)
	if ctx4 == ctx3 || ctx4.Err() != nil {
		t.Fatal("the attempt after a timeout did not get a new, live context")
	}
	a.abort()
	if !errors.Is(context.Cause(ctx4), context.Canceled) {
		t.Errorf("aborted attempt's context: cause %v, want %v", context.Cause(ctx4), context.Canceled)
	}
	a.disarm()
	if ctx5 := a.arm(time.Now(), time.Hour); ctx5.Err() != nil {
		t.Error("the attempt after an abort did not get a live context")
	}
	a.disarm()
}
