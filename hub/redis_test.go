package hub

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

func TestManagedRedisIsRestartedWhenItDies(t *testing.T) {
	ctx := context.Background()
	m, err := startManaged(ctx, t.TempDir(), zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.stop()
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: m.socket})
	defer c.Close()
	if err := waitPing(ctx, c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// AOF is on in the data dir.
	if _, err := os.Stat(filepath.Join(m.dir, "appendonlydir")); err != nil {
		t.Fatalf("no AOF directory: %v", err)
	}
	old := m.Pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for m.Pid() == old || c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server was not restarted (pid still %d)", old)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLoadConfigRejectsUnknownFieldsAndAppliesDefaults(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hub.yaml")
	if err := os.WriteFile(p, []byte("repo:\n  url: file:///x.git\ndata_dir: /tmp/x\nredis: embedded\nlisten_addr: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), "listen_addr") {
		t.Fatalf("err = %v, want the unknown field named", err)
	}
	if err := os.WriteFile(p, []byte("repo:\n  url: file:///x.git\ndata_dir: /tmp/x\nagents:\n  tokens:\n    n1: nothex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), "agents.tokens.n1") {
		t.Fatalf("err = %v, want the bad token hash named", err)
	}
	if err := os.WriteFile(p, []byte("repo:\n  url: file:///x.git\ndata_dir: /tmp/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis != "managed" || c.Repo.Branch != "main" || c.Listen != "127.0.0.1:8080" || c.LeaseTTL.D() != 15*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
}
