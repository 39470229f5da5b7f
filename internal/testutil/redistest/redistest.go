// Package redistest starts a throwaway redis-server for tests.
//
// Each call to Start execs its own server on a unix socket in a short
// temporary directory (socket paths are limited to ~107 bytes), with TCP,
// RDB snapshots and the AOF disabled, waits until it answers PING and stops
// it when the test that started it ends. Start it from the test that uses it,
// not from a subtest that returns earlier: the server lives as long as the
// testing.TB passed to Start.
//
// The binary is $REDIS_SERVER_BIN, else redis-server from PATH, else
// /usr/bin/redis-server. A missing binary fails the test with a message
// that says how to install it.
package redistest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server owned by one test.
type Server struct {
	// Addr is the path of the server's unix socket; go-redis dials it when
	// given as Options.Addr.
	Addr string
	dir  string
	cmd  *exec.Cmd
}

// binary finds the redis-server executable.
func binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	const debianPath = "/usr/bin/redis-server"
	if _, err := os.Stat(debianPath); err == nil {
		return debianPath, nil
	}
	return "", errors.New("redis-server not found: install it with `apt-get install redis-server` or set REDIS_SERVER_BIN")
}

// Start execs a fresh redis-server and returns it once it answers PING. The
// server is killed and its directory removed when tb ends. Extra arguments
// are appended to the command line (e.g. "--maxmemory", "10mb").
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	bin, err := binary()
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "r")
	if err != nil {
		tb.Fatalf("redistest: temp dir: %v", err)
	}
	sock := filepath.Join(dir, "redis.sock")
	logPath := filepath.Join(dir, "redis.log")
	args := []string{
		"--port", "0",
		"--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--protected-mode", "no",
		"--loglevel", "warning", "--logfile", logPath,
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		tb.Fatalf("redistest: start %s: %v", bin, err)
	}
	s := &Server{Addr: sock, dir: dir, cmd: cmd}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = os.RemoveAll(dir)
	})

	c := redis.NewClient(&redis.Options{Addr: sock, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			tb.Fatalf("redistest: redis-server exited before it was ready: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			tb.Fatalf("redistest: redis-server not ready: %v\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a client of the server, closed when tb ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
