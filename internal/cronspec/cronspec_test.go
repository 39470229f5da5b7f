package cronspec

import (
	"testing"
	"time"
)

func TestTheDialect(t *testing.T) {
	at := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC) // a Monday
	for _, tt := range []struct {
		expr string
		next time.Time // zero: refused
	}{
		{"30 2 * * *", time.Date(2026, 3, 3, 2, 30, 0, 0, time.UTC)},
		{"0 12 * * 1-5", time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)},
		{"@daily", time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)},
		{"@every 90m", at.Add(90 * time.Minute)},
		{"0 30 2 * * *", time.Time{}}, // six fields (seconds) are not the dialect
		{"* * *", time.Time{}},
		{"61 * * * *", time.Time{}},
	} {
		s, err := Parse(tt.expr)
		if tt.next.IsZero() {
			if err == nil {
				t.Errorf("%q parsed", tt.expr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.expr, err)
			continue
		}
		if got := s.Next(at); !got.Equal(tt.next) {
			t.Errorf("%q: next %s, want %s", tt.expr, got, tt.next)
		}
	}
}
