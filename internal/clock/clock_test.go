package clock

import (
	"testing"
	"time"
)

func TestFakeFiresOnlyWhenDue(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	ch := f.After(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case got := <-ch:
		if !got.Equal(start.Add(time.Second)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("timer did not fire when due")
	}
	f.Set(start) // never backwards
	if !f.Now().Equal(start.Add(time.Second)) {
		t.Fatalf("clock went backwards: %v", f.Now())
	}
}
