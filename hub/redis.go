package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// poolSize is the hub's Redis connection pool. Agents' long polls hold
// none while they wait (the engine's delivery mux wakes them).
const poolSize = 64

// redisBackend is an open Redis connection and how to close what backs it.
type redisBackend struct {
	client  redis.UniversalClient
	mode    string
	close   func()
	managed *managedRedis // nil unless mode is managed
}

// openRedis connects to Redis in one of the three modes of DESIGN §4. The
// code above it is the same whatever the mode.
func openRedis(ctx context.Context, mode, dataDir string, log zerolog.Logger) (*redisBackend, error) {
	switch {
	case mode == "embedded":
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("start embedded redis: %w", err)
		}
		log.Warn().Str("component", "redis").Msg("embedded redis: in memory, not durable; use managed or a URL in production")
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, PoolSize: poolSize})
		return &redisBackend{client: c, mode: mode, close: func() { _ = c.Close(); m.Close() }}, nil
	case mode == "managed":
		s, err := startManaged(ctx, dataDir, log)
		if err != nil {
			return nil, err
		}
		c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.socket, ContextTimeoutEnabled: true, PoolSize: poolSize})
		if err := waitPing(ctx, c, 10*time.Second); err != nil {
			s.stop()
			return nil, fmt.Errorf("managed redis: %w", err)
		}
		return &redisBackend{client: c, mode: mode, close: func() { _ = c.Close(); s.stop() }, managed: s}, nil
	case strings.Contains(mode, "://"):
		opts, err := redis.ParseURL(mode)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opts.ContextTimeoutEnabled = true
		if opts.PoolSize == 0 {
			opts.PoolSize = poolSize
		}
		c := redis.NewClient(opts)
		if err := waitPing(ctx, c, 10*time.Second); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("redis %s: %w", redactURL(mode), err)
		}
		return &redisBackend{client: c, mode: "url", close: func() { _ = c.Close() }}, nil
	}
	return nil, fmt.Errorf("redis %q: want managed, embedded or a redis:// URL", mode)
}

// redactURL drops the password of a Redis URL for messages.
func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.LastIndex(u, "@"); j > i {
			return u[:i+3] + "***" + u[j:]
		}
	}
	return u
}

func waitPing(ctx context.Context, c redis.UniversalClient, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// managedRedis supervises a redis-server child on a unix socket in the data
// dir, with AOF on and fsync'd on every write (a crash loses no
// acknowledged transition, fencing epochs included), restarting it when it
// dies.
type managedRedis struct {
	socket string
	dir    string
	bin    string
	log    zerolog.Logger

	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
	done    chan struct{}
}

func startManaged(ctx context.Context, dataDir string, log zerolog.Logger) (*managedRedis, error) {
	bin := os.Getenv("REDIS_SERVER_BIN")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, errors.New("redis managed: redis-server not found in PATH (apt-get install redis-server), or run with --redis embedded")
		}
	}
	dir := filepath.Join(dataDir, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "redis.sock")
	if len(socket) > 100 { // unix socket paths are limited to 107 bytes
		short, err := os.MkdirTemp("", "fwr")
		if err != nil {
			return nil, err
		}
		socket = filepath.Join(short, "redis.sock")
	}
	m := &managedRedis{socket: socket, dir: dir, bin: bin, log: log.With().Str("component", "redis").Logger(), done: make(chan struct{})}
	if err := m.spawn(); err != nil {
		return nil, err
	}
	go m.supervise()
	return m, nil
}

func (m *managedRedis) spawn() error {
	cmd := exec.Command(m.bin,
		"--port", "0", "--unixsocket", m.socket, "--unixsocketperm", "700",
		"--dir", m.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(m.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	m.mu.Lock()
	m.cmd = cmd
	m.mu.Unlock()
	m.log.Info().Int("pid", cmd.Process.Pid).Str("socket", m.socket).Msg("redis started")
	return nil
}

func (m *managedRedis) supervise() {
	defer close(m.done)
	backoff := 100 * time.Millisecond
	for {
		m.mu.Lock()
		cmd := m.cmd
		m.mu.Unlock()
		err := cmd.Wait()
		m.mu.Lock()
		stopped := m.stopped
		m.mu.Unlock()
		if stopped {
			return
		}
		m.log.Error().Err(err).Msg("redis exited; restarting")
		time.Sleep(backoff)
		backoff = min(2*backoff, 5*time.Second)
		if err := m.spawn(); err != nil {
			m.log.Error().Err(err).Msg("redis restart")
			continue
		}
	}
}

// Pid returns the current child's process id.
func (m *managedRedis) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd.Process.Pid
}

func (m *managedRedis) stop() {
	m.mu.Lock()
	m.stopped = true
	cmd := m.cmd
	m.mu.Unlock()
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-m.done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-m.done
	}
}
