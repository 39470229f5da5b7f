package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/examples"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/schema"
)

type demoOptions struct {
	listen   string
	agents   int
	dir      string
	duration time.Duration
	redis    string
	procs    int // agents run as processes of this binary (the first nodes)
}

func demoCmd(stdout io.Writer, newLogger func(zerolog.Level, bool) zerolog.Logger) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole fleet on this machine: a config repo from examples/, embedded Redis, the hub and one agent per node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), o, stdout, newLogger(zerolog.WarnLevel, true))
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1:8080", "console and API address")
	cmd.Flags().IntVar(&o.agents, "agents", 0, "number of local agents, one per example node (default: every node)")
	cmd.Flags().StringVar(&o.dir, "dir", "", "working directory (default: a new temporary directory)")
	cmd.Flags().DurationVar(&o.duration, "for", 0, "stop after this long (default: until Ctrl-C)")
	cmd.Flags().StringVar(&o.redis, "redis", "embedded", "redis: embedded (default here), managed, or a redis:// URL")
	cmd.Flags().IntVar(&o.procs, "agent-processes", 3, "agents run as processes of this binary, which can upgrade themselves (the first nodes'); the others run inside the demo")
	return cmd
}

// demoIdentity is one API caller the demo configures, with a token made
// at start.
type demoIdentity struct{ name, role, token string }

// demoIdentities makes the demo's admin, operator and viewer, each with a
// new random token.
func demoIdentities() ([]demoIdentity, error) {
	ids := []demoIdentity{{name: "demo-admin", role: "admin"}, {name: "demo-operator", role: "operator"}, {name: "demo-viewer", role: "viewer"}}
	for i := range ids {
		tok, err := randomToken()
		if err != nil {
			return nil, err
		}
		ids[i].token = tok
	}
	return ids, nil
}

func randomToken() (string, error) {
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(buf), nil
}

// portInUse turns a listen error on an address already taken into a
// message that says how to pick another port; other errors are returned
// as they are.
func portInUse(listen string, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	_, port, _ := net.SplitHostPort(listen)
	other := "9090"
	if port == other {
		other = "9091"
	}
	return fmt.Errorf("port %s is in use: make demo PORT=%s (or fleetwave demo --listen 127.0.0.1:%s)", port, other, other)
}

// checkListen fails early, before any work, when the demo's address is
// taken.
func checkListen(listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return portInUse(listen, fmt.Errorf("listen on %s: %w", listen, err))
	}
	return ln.Close()
}

func runDemo(ctx context.Context, o demoOptions, out io.Writer, log zerolog.Logger) error {
	if err := checkListen(o.listen); err != nil {
		return err
	}
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "fleetwave-demo-"); err != nil {
			return err
		}
	}
	seed := filepath.Join(dir, "seed")
	remote := filepath.Join(dir, "remote.git")
	if err := copyFS(examples.FS, "fleet", seed); err != nil {
		return fmt.Errorf("write example repository: %w", err)
	}
	v, err := schema.New()
	if err != nil {
		return err
	}
	snap, err := v.LoadDir(seed)
	if err != nil {
		return fmt.Errorf("example repository: %w", err)
	}
	if _, err := gitsync.SeedBare(ctx, seed, remote, "main", "Example fleet", gitsync.CommitInfo{Author: "fleetwave demo", Email: "demo@fleetwave.invalid", When: time.Now()}); err != nil {
		return fmt.Errorf("create demo remote: %w", err)
	}

	nodes := snap.SortedNodeIDs()
	if o.agents > 0 && o.agents < len(nodes) {
		nodes = nodes[:o.agents]
	}
	procNodes := nodes[:max(0, min(o.procs, len(nodes)))]
	var builds map[string]string
	baseVersion := ""
	if len(procNodes) > 0 {
		sys := snap.Triggers[fleetwave.AgentBlock]
		if sys == nil || sys.TargetVersion == "" || sys.TargetVersion == demoNextAgentVersion {
			return fmt.Errorf("example repository: the agent processes need the system BRC brc/%s with a target_version other than %s", fleetwave.AgentBlock, demoNextAgentVersion)
		}
		baseVersion = sys.TargetVersion
		if builds, err = demoAgentBuilds(filepath.Join(dir, "agent-builds"), baseVersion, demoNextAgentVersion); err != nil {
			return err
		}
	}
	tokens := map[string]string{}
	hashes := map[string]string{}
	for _, n := range nodes {
		tok, err := randomToken()
		if err != nil {
			return err
		}
		tokens[n] = tok
		hashes[n] = hub.HashToken(tok)
		if err := os.MkdirAll(filepath.Join(dir, "agents", n), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "agents", n, "token"), []byte(tok+"\n"), 0o600); err != nil {
			return err
		}
	}
	ids, err := demoIdentities()
	if err != nil {
		return err
	}
	identities := make([]hub.Identity, len(ids))
	if err := os.MkdirAll(filepath.Join(dir, "tokens"), 0o700); err != nil {
		return err
	}
	for i, id := range ids {
		identities[i] = hub.Identity{Name: id.name, Role: id.role, TokenSHA256: hub.HashToken(id.token)}
		if err := os.WriteFile(filepath.Join(dir, "tokens", id.role), []byte(id.token+"\n"), 0o600); err != nil {
			return err
		}
	}
	keyBuf := make([]byte, 32)
	if _, err := rand.Read(keyBuf); err != nil {
		return err
	}
	keyFile := filepath.Join(dir, "credentials.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(keyBuf)+"\n"), 0o600); err != nil {
		return err
	}
	cfg := hub.Config{
		CredentialsKeyFile: keyFile,
		Repo:               hub.RepoConfig{URL: "file://" + remote, Branch: "main", PollInterval: hub.Duration(time.Second)},
		Redis:              o.redis,
		Listen:             o.listen,
		DataDir:            filepath.Join(dir, "hub"),
		Status:             hub.StatusConfig{Interval: hub.Duration(2 * time.Second)},
		Agents:             hub.AgentsConfig{Tokens: hashes},
		Identities:         identities,
		StepInterval:       hub.Duration(100 * time.Millisecond),
		HubID:              "demo-hub",
	}
	if builds != nil {
		cfg.AgentArtifacts.Dir = filepath.Join(dir, "agent-builds")
	}
	h, err := hub.New(ctx, cfg, hub.WithLogger(log))
	if err != nil {
		return portInUse(o.listen, err)
	}
	defer h.Close()
	url := "http://" + h.Addr()

	var wg sync.WaitGroup
	hubErr := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { hubErr <- h.Run(runCtx) })
	procs := map[string]*demoProcAgent{}
	for _, n := range procNodes {
		p, err := prepareProcAgent(filepath.Join(dir, "agents", n), n, builds[baseVersion], url, log)
		if err != nil {
			stop()
			wg.Wait()
			return fmt.Errorf("agent process of %s: %w", n, err)
		}
		procs[n] = p
		wg.Go(func() { p.run(runCtx) })
	}
	for _, n := range nodes {
		if procs[n] != nil {
			continue
		}
		wg.Go(func() {
			err := agent.Run(runCtx, agent.Config{
				HubURL: url, Node: n, Token: tokens[n],
				StateDir:       filepath.Join(dir, "agents", n, "state"),
				PollWait:       5 * time.Second,
				ReportInterval: 30 * time.Second,
				Logger:         log, // the agent names its node on each line
			})
			if err != nil && runCtx.Err() == nil {
				log.Error().Err(err).Str("node", n).Msg("agent stopped")
			}
		})
	}

	admin, operator := ids[0].token, ids[1].token
	fmt.Fprintf(out, `fleetwave demo
  console:     %s/#token=%s
               (signed in as demo-admin; the console's sign-in form takes any token below)
  remote repo: %s   (the hub follows its main branch)
  agents:      %d, state under %s
  redis:       %s

API identities (tokens new at each start, also in %s):
`, url, admin, remote, len(nodes), filepath.Join(dir, "agents"), o.redis, filepath.Join(dir, "tokens"))
	for _, id := range ids {
		fmt.Fprintf(out, "  %-9s %-14s %s\n", id.role, id.name, id.token)
	}
	fmt.Fprintf(out, `
Try the CLI as the operator:
  export FLEETWAVE_HUB=%s FLEETWAVE_TOKEN=%s
  fleetwave node list
  fleetwave node drain edge-02 --reason maintenance
  fleetwave rollout create --brc operator-rollout --selector 'env=prod' --dry-run
  fleetwave rollout watch operator-rollout-g1
Watch a rollout run in waves, then push a change:
  git clone %s %s
  cd %s && sed -i 's/1.4.0/1.5.0/' brc/operator-rollout.cue
  git commit -am "operator 1.5.0" && git push
Status commits go to their own branch:  git -C %s log --oneline fleetwave/status
  (main keeps people's commits only)
`, url, operator, remote, filepath.Join(dir, "work"), filepath.Join(dir, "work"), remote)
	if len(procNodes) > 0 {
		fmt.Fprintf(out, `Agent processes: %s run as processes of this binary (agents/<node>/bin/fleetwave agent
  --config agents/<node>/agent.yaml; logs in agents/<node>/agent.log), demo builds of fleetwave %s.
  The hub serves a demo build %s (%s). Upgrade the agents in waves:
  cd %s && sed -i 's/"%s"/"%s"/' brc/fleetwave-agent.cue
  git commit -am "agents %s" && git push
  fleetwave node get %s   # agent version %s once its process re-executed itself into the new build
  (the agents inside the demo process only record the version)
`, strings.Join(procNodes, ", "), baseVersion, demoNextAgentVersion, filepath.Join(dir, "agent-builds"),
			filepath.Join(dir, "work"), baseVersion, demoNextAgentVersion, demoNextAgentVersion, procNodes[0], demoNextAgentVersion)
	}
	fmt.Fprint(out, "Stop with Ctrl-C.\n\n")

	progress(runCtx, h, out)
	stop()
	wg.Wait()
	err = <-hubErr
	fmt.Fprintf(out, "stopped; files kept in %s\n", dir)
	return err
}

// progress prints a line each time the fleet counters change.
func progress(ctx context.Context, h *hub.Hub, out io.Writer) {
	last := ""
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := h.Summary(ctx)
		if err != nil {
			continue
		}
		sort.Slice(s.Rollouts, func(i, j int) bool { return s.Rollouts[i].ID < s.Rollouts[j].ID })
		line := fmt.Sprintf("total=%d done=%d in_progress=%d pending=%d failed=%d skipped=%d",
			s.Counters.Total, s.Counters.Done, s.Counters.InProgress, s.Counters.Pending, s.Counters.Failed, s.Counters.Skipped)
		for _, r := range s.Rollouts {
			if r.Status == fleetwave.RolloutActive {
				line += fmt.Sprintf(" | %s wave %d", r.ID, r.Wave)
			}
		}
		if s.Sync.Result == "rejected" {
			line += fmt.Sprintf(" | commit %s rejected: %d error(s)", s.Sync.Commit[:min(12, len(s.Sync.Commit))], len(s.Sync.Errors))
		}
		if line != last {
			fmt.Fprintf(out, "%s  %s\n", time.Now().Format(time.TimeOnly), line)
			last = line
		}
	}
}

// copyFS writes the tree under root of fsys into dst.
func copyFS(fsys fs.FS, root, dst string) error {
	return fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
