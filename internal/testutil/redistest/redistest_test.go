package redistest

import (
	"context"
	"testing"
)

func TestStart(t *testing.T) {
	tests := []struct {
		name string
		key  string
		val  string
	}{
		{name: "a started server stores and returns a value", key: "k", val: "v"},
		{name: "each server starts empty", key: "k", val: "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Start(t)
			c := s.Client(t)
			ctx := context.Background()
			n, err := c.DBSize(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("fresh server holds %d keys", n)
			}
			if err := c.Set(ctx, tt.key, tt.val, 0).Err(); err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, tt.key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.val {
				t.Fatalf("got %q, want %q", got, tt.val)
			}
		})
	}
}
