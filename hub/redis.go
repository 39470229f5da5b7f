package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// poolSize is the hub's Redis connection pool. Agents' long polls hold
// none while they wait (the engine's delivery mux wakes them).
const poolSize = 96

// agentCalls is how many of the pool's connections the calls made on
// agents' behalf may hold at once (engine.WithAgentCalls): two thirds,
// the others staying free for the leader's own work and the API's
// reads, even while thousands of agents connect at once.
func (b *redisBackend) agentCalls() int {
	pool := b.pool
	if pool <= 0 {
		pool = poolSize
	}
	return max(1, pool*2/3)
}

const (
	// lockFileName is the file in the data dir a hub holds an exclusive
	// flock on for as long as it runs: one hub per data dir.
	lockFileName = "hub.lock"
	// pidFileName, in the managed server's directory, records the pid and
	// the run_id of the redis-server the hub started, for the next hub and
	// for operators.
	pidFileName = "redis.pid"
	// answerWithin bounds how long a new redis-server may take to answer
	// INFO on its socket (it answers while it loads its AOF).
	answerWithin = time.Minute
	// exitWithin bounds how long a redis-server told to shut down may take
	// to flush its AOF and exit.
	exitWithin = time.Minute
)

// redisBackend is an open Redis connection and how to close what backs it.
type redisBackend struct {
	client  redis.UniversalClient
	mode    string
	close   func()
	managed *managedRedis // nil unless mode is managed
	// pool is the client's connection pool size when the configuration
	// set it (a URL's pool_size); 0: poolSize.
	pool int
}

// openRedis connects to Redis in one of the modes of docs/contract.md#interfaces. The
// code above it is the same whatever the mode. Whatever the mode, the hub
// holds the lock of its data dir (the git mirror and the credentials are
// in it too) until the backend is closed.
func openRedis(ctx context.Context, mode, dataDir string, log zerolog.Logger) (*redisBackend, error) {
	switch {
	case mode == "embedded":
		lock, err := lockDataDir(dataDir)
		if err != nil {
			return nil, err
		}
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			lock.release()
			return nil, fmt.Errorf("start embedded redis: %w", err)
		}
		log.Warn().Str("component", "redis").Msg("embedded redis: in memory, not durable; use managed or a URL in production")
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, PoolSize: poolSize})
		return &redisBackend{client: c, mode: mode, close: func() { _ = c.Close(); m.Close(); lock.release() }}, nil
	case mode == "managed":
		s, err := startManaged(ctx, dataDir, log)
		if err != nil {
			return nil, err
		}
		// Every connection is checked to reach the server this hub started
		// (its run_id): never one left by another hub on the same socket.
		c := redis.NewClient(&redis.Options{
			Network: "unix", Addr: s.socket, Dialer: s.dial, OnConnect: s.checkConn,
			ContextTimeoutEnabled: true, PoolSize: poolSize,
		})
		if err := waitPing(ctx, c, 10*time.Second); err != nil {
			_ = c.Close()
			s.stop()
			return nil, fmt.Errorf("managed redis: %w", err)
		}
		return &redisBackend{client: c, mode: mode, close: func() { _ = c.Close(); s.stop() }, managed: s}, nil
	case strings.HasPrefix(mode, sentinelScheme), strings.HasPrefix(mode, clusterScheme):
		return openTopology(ctx, mode, dataDir, log)
	case strings.Contains(mode, "://"):
		opts, err := redis.ParseURL(mode)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		lock, err := lockDataDir(dataDir)
		if err != nil {
			return nil, err
		}
		opts.ContextTimeoutEnabled = true
		if opts.PoolSize == 0 {
			opts.PoolSize = poolSize
		}
		c := redis.NewClient(opts)
		if err := waitPing(ctx, c, 10*time.Second); err != nil {
			_ = c.Close()
			lock.release()
			return nil, fmt.Errorf("redis %s: %w", redactURL(mode), err)
		}
		return &redisBackend{client: c, mode: "url", close: func() { _ = c.Close(); lock.release() }, pool: opts.PoolSize}, nil
	}
	return nil, fmt.Errorf("redis %q: want managed, embedded, a redis:// URL, or a Sentinel or Cluster deployment", mode)
}

// topologyWait bounds how long a hub starting on Sentinel or Cluster waits
// for the primary holding its keys: long enough to ride out a failover.
const topologyWait = 30 * time.Second

// openTopology connects to a Sentinel or Cluster deployment (the URL forms
// of RedisSentinel and RedisCluster). The client follows failovers: the
// Sentinel client asks the Sentinels for the primary whenever it dials and
// drops its connections when they announce a new one; the Cluster client
// follows MOVED answers and reloads the slot map when a node fails. The
// passwords are read from their files here and go nowhere else: no log
// line, error or readiness check holds them.
func openTopology(ctx context.Context, mode, dataDir string, log zerolog.Logger) (*redisBackend, error) {
	var (
		c    redis.UniversalClient
		kind string
		desc string
	)
	if strings.HasPrefix(mode, sentinelScheme) {
		s, err := ParseRedisSentinel(mode)
		if err != nil {
			return nil, err
		}
		if errs := s.check(); len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		password, perr := readPasswordFile("redis.sentinel.password_file", s.PasswordFile)
		sentinelPassword, serr := readPasswordFile("redis.sentinel.sentinel_password_file", s.SentinelPasswordFile)
		if err := errors.Join(perr, serr); err != nil {
			return nil, err
		}
		kind, desc = "sentinel", fmt.Sprintf("master %s via sentinels %s", s.Master, strings.Join(s.Addrs, ","))
		c = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: s.Master, SentinelAddrs: s.Addrs, SentinelPassword: sentinelPassword,
			Password: password, DB: s.DB, ContextTimeoutEnabled: true, PoolSize: poolSize,
		})
	} else {
		cl, err := ParseRedisCluster(mode)
		if err != nil {
			return nil, err
		}
		if errs := cl.check(); len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		password, err := readPasswordFile("redis.cluster.password_file", cl.PasswordFile)
		if err != nil {
			return nil, err
		}
		kind, desc = "cluster", "cluster via "+strings.Join(cl.Addrs, ",")
		c = newClusterClient(&redis.ClusterOptions{
			Addrs: cl.Addrs, Password: password, ContextTimeoutEnabled: true, PoolSize: poolSize,
		})
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := waitPing(ctx, c, topologyWait); err != nil {
		_ = c.Close()
		lock.release()
		return nil, fmt.Errorf("redis %s: %w", desc, err)
	}
	log.Info().Str("component", "redis").Str("redis", kind).Msg("redis: " + desc)
	return &redisBackend{client: c, mode: kind, close: func() { _ = c.Close(); lock.release() }}, nil
}

// clusterReloadEvery bounds how old the Cluster client's slot map gets
// (go-redis's default is a minute).
const clusterReloadEvery = 10 * time.Second

// newClusterClient returns a Cluster client that reloads its slot map
// whenever it cannot reach a node. go-redis reloads it on MOVED and
// READONLY answers, but a primary that died answers nothing: the client
// would dial it for every command until its periodic reload, while its
// replica already took over.
func newClusterClient(opts *redis.ClusterOptions) *redis.ClusterClient {
	var cc atomic.Pointer[redis.ClusterClient]
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			if c := cc.Load(); c != nil {
				c.ReloadState(ctx)
			}
		}
		return conn, err
	}
	opts.ClusterStateReloadInterval = clusterReloadEvery
	c := redis.NewClusterClient(opts)
	cc.Store(c)
	return c
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

// waitPing pings c until it answers, within, or ctx ends. It fails with the
// last answer that says why (a refused password, a refused connection)
// rather than a timeout that hides it.
func waitPing(ctx context.Context, c redis.UniversalClient, within time.Duration) error {
	deadline := time.Now().Add(within)
	var why error
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if why == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			why = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return why
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dirLock is a hub's exclusive lock on its data dir.
type dirLock struct {
	once sync.Once
	f    *os.File
}

// lockDataDir takes the lock of dataDir without waiting: a second hub given
// the same data dir refuses to start, naming the pid of the hub that holds
// it. The lock is a flock on a file in the data dir, so the kernel releases
// it when the holder dies, however it dies; the file is opened close-on-exec,
// so no child (the managed redis-server) inherits the lock and outlives the
// hub holding it. The file is never removed: a hub that removed it could
// let a second one lock a new file while a third still holds the old one.
func lockDataDir(dataDir string) (*dirLock, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dataDir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 64))
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock data dir %s: %w", dataDir, err)
		}
		// the holder writes its pid once it has the lock: it may not have yet
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
			return nil, fmt.Errorf("data dir %s is in use by another fleetwave hub (pid %d); one hub per data dir", dataDir, pid)
		}
		return nil, fmt.Errorf("data dir %s is in use by another fleetwave hub; one hub per data dir", dataDir)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// release gives the lock up; later calls do nothing.
func (l *dirLock) release() {
	l.once.Do(func() { _ = l.f.Close() })
}

// managedRedis supervises a redis-server child on a unix socket in the data
// dir, with AOF on and fsync'd on every write (a crash loses no
// acknowledged transition, fencing epochs included), restarting it when it
// dies.
//
// One server per data dir, ever:
//   - the hub holds the data dir's lock (lockDataDir) while it runs;
//   - the child dies with the hub: it gets SIGTERM when the hub dies
//     (Linux parent-death signal; see supervise for the thread it is tied
//     to). SIGTERM rather than SIGKILL: the server flushes its AOF and
//     removes its socket, and no acknowledged write is lost either way
//     (appendfsync always). The child has its own process group, so a
//     signal to the hub's group (Ctrl-C in a terminal) reaches the hub
//     alone, which then stops the server after its own last writes
//     (status, lease), instead of the two dying in a race;
//   - before starting a server, the hub stops any left on its data dir by
//     a hub that died before it could (reapStale);
//   - the client verifies every new connection: it must reach the server
//     this hub started (checkConn), and the connections to a server that
//     was replaced are closed (adopt).
type managedRedis struct {
	socket    string // the server's unix socket
	socketDir string // the short directory holding the socket when the data dir's path is too long for one, else ""
	dir       string // the server's directory (AOF, log, pid file), symlinks resolved: its working directory
	bin       string
	log       zerolog.Logger
	lock      *dirLock

	mu    sync.Mutex
	pid   int    // the current child's pid, 0 when none runs
	runID string // the current child's run_id once verified, "" while none is
	conns map[*managedConn]struct{}

	quit     chan struct{} // closed by stop
	done     chan struct{} // closed when supervise returned
	stopOnce sync.Once
}

// startManaged locks dataDir, stops a server a dead hub left on it, and
// starts a supervised redis-server, returning once it answers on its socket.
func startManaged(ctx context.Context, dataDir string, log zerolog.Logger) (*managedRedis, error) {
	bin := os.Getenv("REDIS_SERVER_BIN")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, errors.New("redis managed: redis-server not found in PATH (apt-get install redis-server), or run with --redis embedded")
		}
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	m, err := newManaged(dataDir, bin, lock, log)
	if err != nil {
		lock.release()
		return nil, err
	}
	if err := m.reapStale(ctx); err != nil {
		lock.release()
		return nil, err
	}
	started := make(chan error, 1)
	go m.supervise(started)
	select {
	case err := <-started:
		if err != nil {
			m.stop()
			return nil, err
		}
	case <-ctx.Done():
		m.stop()
		return nil, ctx.Err()
	}
	return m, nil
}

func newManaged(dataDir, bin string, lock *dirLock, log zerolog.Logger) (*managedRedis, error) {
	dir, err := filepath.Abs(filepath.Join(dataDir, "redis"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// /proc shows the server's working directory with symlinks resolved
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, err
	}
	m := &managedRedis{
		dir: dir, bin: bin, lock: lock, log: log.With().Str("component", "redis").Logger(),
		conns: map[*managedConn]struct{}{}, quit: make(chan struct{}), done: make(chan struct{}),
	}
	m.socket = filepath.Join(dir, "redis.sock")
	if len(m.socket) > 100 { // unix socket paths are limited to 107 bytes
		// A directory named after the data dir, not a random one: the next
		// hub must find the socket of a server this one leaves behind.
		sum := sha256.Sum256([]byte(dir))
		short := filepath.Join(os.TempDir(), "fleetwave-"+hex.EncodeToString(sum[:8]))
		if err := privateDir(short); err != nil {
			return nil, err
		}
		m.socketDir, m.socket = short, filepath.Join(short, "redis.sock")
	}
	return m, nil
}

// privateDir creates dir (mode 0700) or checks that it is a directory of
// this user that nobody else can enter: the socket directory is at a
// predictable path in a shared temporary directory.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("redis socket dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("redis socket dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 || !ok || int(st.Uid) != os.Getuid() {
		return fmt.Errorf("redis socket dir %s: not a private directory of this user (mode 0700); remove it", dir)
	}
	return nil
}

// supervise starts the child, then restarts it whenever it dies, until
// stop. started receives the outcome of the first start.
//
// The parent-death signal is tied to the thread that forked the child, not
// to the process: the child gets it as soon as that thread exits, and the
// Go runtime ends a thread whenever a goroutine locked to it returns
// without unlocking (any library may do so). So every child is started
// from this goroutine, locked to its thread for as long as a child may
// live: no other goroutine runs on that thread, so it cannot end early.
// The goroutine never unlocks: when it returns, after the last child
// exited, its thread ends with it.
func (m *managedRedis) supervise(started chan<- error) {
	runtime.LockOSThread()
	defer close(m.done)
	first := true
	backoff := 100 * time.Millisecond
	for {
		c, err := m.spawn()
		if first {
			first = false
			started <- err
			if err != nil {
				return
			}
		}
		if err == nil {
			select {
			case <-c.exited:
				m.forget()
				m.log.Error().Err(c.err).Int("pid", c.cmd.Process.Pid).Msg("redis exited; restarting")
			case <-m.quit:
				m.halt(c)
				return
			}
		} else {
			m.log.Error().Err(err).Msg("redis restart")
		}
		select {
		case <-m.quit:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// child is a started redis-server; exited is closed once it was reaped,
// err then holds how it ended.
type child struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// spawn starts a redis-server (on the supervising goroutine's thread) and
// waits until the server answering on the socket says it is that child:
// only then is it the hub's server.
func (m *managedRedis) spawn() (*child, error) {
	cmd := exec.Command(m.bin,
		"--port", "0", "--unixsocket", m.socket, "--unixsocketperm", "700",
		"--dir", m.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(m.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	pid := cmd.Process.Pid
	m.mu.Lock()
	m.pid = pid
	m.mu.Unlock()
	runID, err := m.awaitChild(c)
	if err != nil {
		_ = cmd.Process.Kill()
		<-c.exited
		m.forget()
		return nil, err
	}
	m.adopt(pid, runID)
	m.log.Info().Int("pid", pid).Str("run_id", runID).Str("socket", m.socket).Msg("redis started")
	return c, nil
}

// awaitChild polls the socket until the server there reports c's pid, and
// returns its run_id.
func (m *managedRedis) awaitChild(c *child) (string, error) {
	pid := c.cmd.Process.Pid
	deadline := time.Now().Add(answerWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := m.serverInfo(ctx)
		cancel()
		if err == nil && info["process_id"] == strconv.Itoa(pid) && info["run_id"] != "" {
			return info["run_id"], nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("redis-server (pid %d) did not answer on %s within %v; see %s", pid, m.socket, answerWithin, filepath.Join(m.dir, "redis.log"))
		}
		select {
		case <-c.exited:
			return "", fmt.Errorf("redis-server exited at start (%v); see %s", c.err, filepath.Join(m.dir, "redis.log"))
		case <-m.quit:
			return "", errors.New("managed redis stopped")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serverInfo asks whatever answers on the socket for INFO server, on a
// connection of its own (not the hub's pool, whose connections only reach
// a verified server).
func (m *managedRedis) serverInfo(ctx context.Context) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: m.socket, MaxRetries: -1, PoolSize: 1, Protocol: 2})
	defer c.Close()
	s, err := c.Info(ctx, "server").Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

// parseInfo reads the "field:value" lines of an INFO reply.
func parseInfo(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// adopt makes the verified child the server connections must reach, closes
// every connection opened before (to a server that is gone, or refused by
// checkConn), and records the child in the pid file.
func (m *managedRedis) adopt(pid int, runID string) {
	m.mu.Lock()
	m.pid, m.runID = pid, runID
	old := m.conns
	m.conns = map[*managedConn]struct{}{}
	m.mu.Unlock()
	for c := range old {
		_ = c.UnixConn.Close()
	}
	rec := fmt.Sprintf("%d\n%s\n", pid, runID)
	if err := os.WriteFile(filepath.Join(m.dir, pidFileName), []byte(rec), 0o600); err != nil {
		m.log.Warn().Err(err).Msg("redis pid file not written")
	}
}

// forget records that no verified child runs: new connections are refused
// until the next one is adopted, and the open ones are closed.
func (m *managedRedis) forget() {
	m.mu.Lock()
	m.pid, m.runID = 0, ""
	old := m.conns
	m.conns = map[*managedConn]struct{}{}
	m.mu.Unlock()
	for c := range old {
		_ = c.UnixConn.Close()
	}
}

// managedConn is a connection of the hub's pool to the managed socket,
// tracked so that the connections to a replaced server can be closed. It
// embeds the unix connection, whose SyscallConn lets the pool see a closed
// connection before handing it out.
type managedConn struct {
	*net.UnixConn
	m *managedRedis
}

// Close forgets the connection and closes it.
func (c *managedConn) Close() error {
	c.m.mu.Lock()
	delete(c.m.conns, c)
	c.m.mu.Unlock()
	return c.UnixConn.Close()
}

// dial is the pool's dialer: the managed socket, tracked.
func (m *managedRedis) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", m.socket)
	if err != nil {
		return nil, err
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		_ = nc.Close()
		return nil, fmt.Errorf("redis socket %s: not a unix connection", m.socket)
	}
	c := &managedConn{UnixConn: uc, m: m}
	m.mu.Lock()
	m.conns[c] = struct{}{}
	m.mu.Unlock()
	return c, nil
}

// checkConn is the pool's OnConnect hook: a new connection is used only
// when the server it reached has the run_id of the child this hub started
// and verified. INFO server is the cheapest command that tells the run_id
// (HELLO does not), and it runs once per connection, not per command.
func (m *managedRedis) checkConn(ctx context.Context, cn *redis.Conn) error {
	s, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("check managed redis: %w", err)
	}
	got := parseInfo(s)["run_id"]
	m.mu.Lock()
	want := m.runID
	m.mu.Unlock()
	switch {
	case want == "":
		return fmt.Errorf("managed redis on %s: no verified server yet (starting)", m.socket)
	case got != want:
		return fmt.Errorf("redis on %s is run %s, not the server this hub started (%s)", m.socket, got, want)
	}
	return nil
}

// Pid returns the current child's process id (0 while none runs).
func (m *managedRedis) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pid
}

// halt stops the child: SIGTERM (the server flushes its AOF and exits),
// then SIGKILL if it has not exited within 5 s. Not SIGINT: a second SIGINT
// during shutdown makes redis-server exit at once.
func (m *managedRedis) halt(c *child) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	m.forget()
}

// stop stops the child and the supervisor, removes the pid file and the
// socket, and releases the data dir.
func (m *managedRedis) stop() {
	m.stopOnce.Do(func() {
		close(m.quit)
		<-m.done
		_ = os.Remove(filepath.Join(m.dir, pidFileName))
		_ = os.Remove(m.socket)
		if m.socketDir != "" {
			_ = os.Remove(m.socketDir)
		}
		m.lock.release()
	})
}

// reapStale stops the redis-servers left on this data dir by hubs that
// died without stopping them (a hub killed before the parent-death signal
// existed, or a server still flushing after it): two servers on one AOF
// directory and one socket must never run. A process is stopped only once
// verified to be such a server (ours): a redis-server whose working
// directory is this data dir's server directory (it runs there: --dir).
// Candidates are the pid in the pid file, the process_id the socket
// answers with, and every process working in that directory; a pid file
// naming a process that is not ours (the pid was reused) is ignored, and a
// socket answered by a process that is not ours fails the start. A server
// is stopped with SIGTERM, which flushes its AOF (never SHUTDOWN NOSAVE),
// and waited for; then the stale socket is removed.
func (m *managedRedis) reapStale(ctx context.Context) error {
	candidates := map[int]string{}
	if b, err := os.ReadFile(filepath.Join(m.dir, pidFileName)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])); err == nil && pid > 0 {
			candidates[pid] = "pid file"
		}
	}
	answering := 0
	if _, err := os.Stat(m.socket); err == nil {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := m.serverInfo(ictx)
		cancel()
		if err == nil {
			if answering, _ = strconv.Atoi(info["process_id"]); answering > 0 {
				candidates[answering] = "socket"
			}
		}
	}
	for _, pid := range processesIn(m.dir) {
		if _, ok := candidates[pid]; !ok {
			candidates[pid] = "working directory"
		}
	}
	for pid, source := range candidates {
		if pid == os.Getpid() {
			continue
		}
		if !m.ours(pid) {
			if pid == answering {
				return fmt.Errorf("redis socket %s is served by pid %d, which is not a redis-server of data dir %s; stop it", m.socket, pid, m.dir)
			}
			continue
		}
		m.log.Warn().Int("pid", pid).Str("found_by", source).Msg("redis left by an earlier hub: stopping it")
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stop redis-server (pid %d) left by an earlier hub: %w", pid, err)
		}
		if err := m.awaitGone(ctx, pid); err != nil {
			return err
		}
		m.log.Info().Int("pid", pid).Msg("redis left by an earlier hub stopped")
	}
	if err := os.Remove(m.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale redis socket: %w", err)
	}
	_ = os.Remove(filepath.Join(m.dir, pidFileName))
	return nil
}

// awaitGone waits until pid is no longer a server of ours (it exited: gone,
// or a zombie nobody reaped yet).
func (m *managedRedis) awaitGone(ctx context.Context, pid int) error {
	deadline := time.Now().Add(exitWithin)
	for m.ours(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server (pid %d) left by an earlier hub on %s did not exit within %v of SIGTERM; stop it", pid, m.dir, exitWithin)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// ours tells whether pid is a live redis-server running in this data dir's
// server directory. Its title (redis-server rewrites its command line to
// "<argv[0]> unixsocket:<path> ...") names the program; its working
// directory is where --dir put it. A zombie has neither.
func (m *managedRedis) ours(pid int) bool {
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil || cwd != m.dir {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	title := string(bytes.TrimRight(cmdline, "\x00"))
	prog, _, _ := strings.Cut(strings.ReplaceAll(title, "\x00", " "), " ")
	return prog == m.bin || filepath.Base(prog) == "redis-server" || filepath.Base(prog) == filepath.Base(m.bin)
}

// processesIn lists the processes whose working directory is dir (those of
// this user: the others' are not readable, and a hub stops only its own).
func processesIn(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}
