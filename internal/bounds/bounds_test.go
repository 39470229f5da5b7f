package bounds

import "testing"

func TestNestingDepth(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0}, {"a", 0}, {"{a: [1, (2)]}", 3}, {"))){", 1}, {"{}{}{}", 1}, {"{{{{ }}}}", 4},
	}
	for _, tt := range tests {
		if got := NestingDepth(tt.in); got != tt.want {
			t.Errorf("NestingDepth(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
