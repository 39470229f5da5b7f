package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/hub"
)

// The demo's agent upgrade.
//
// An agent inside the demo's process cannot replace its binary, so the
// first --agent-processes nodes' agents run as processes of this binary
// (`fleetwave agent --config agents/<node>/agent.yaml`), with the
// built-in self-upgrade on, each from its own copy of the binary
// (agents/<node>/bin/fleetwave), restarted when they exit as a service
// manager would. Their "builds" are demo builds (agent.WriteDemoBuild):
// this binary with a trailer naming a version, which the agent reports
// when agent.DemoBuildEnv is set; the demo sets it for these processes
// only. hub.yaml's agent_artifacts directory (agent-builds/) holds a demo
// build of the system BRC's target_version, the one the agents start at,
// and of demoNextAgentVersion: a push raising the BRC's target_version to
// it makes every process agent download that build from the hub, try it,
// re-execute itself into it and report the new version, in waves. The
// other agents, inside the demo, record the version only.

// demoNextAgentVersion is the version of the demo build the agents can be
// upgraded to.
const demoNextAgentVersion = "0.2.0"

// demoAgentBuilds writes, into dir, a demo build of the running binary
// for each version and their SHA256SUMS: the hub's agent_artifacts. It
// returns the path of each build by version.
func demoAgentBuilds(dir string, versions ...string) (map[string]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program's binary: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var sums strings.Builder
	for _, v := range versions {
		name := hub.ArtifactName(v, runtime.GOOS, runtime.GOARCH)
		p := filepath.Join(dir, name)
		if err := agent.WriteDemoBuild(exe, p, v); err != nil {
			return nil, err
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, name)
		out[v] = p
	}
	if err := os.WriteFile(filepath.Join(dir, hub.ArtifactSums), []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	return out, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// demoProcAgent is one node's agent process, restarted when it exits
// until the demo stops.
type demoProcAgent struct {
	node, dir, bin string
	log            zerolog.Logger
}

// prepareProcAgent gives node's agent its binary (a hard link to build,
// else a copy: the upgrade replaces the path, never the file) and its
// configuration file in agents/<node>/.
func prepareProcAgent(dir, node, build, hubURL string, log zerolog.Logger) (*demoProcAgent, error) {
	bin := filepath.Join(dir, "bin", "fleetwave")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return nil, err
	}
	_ = os.Remove(bin)
	if err := os.Link(build, bin); err != nil {
		b, err := os.ReadFile(build)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			return nil, err
		}
	}
	conf := fmt.Sprintf(`# %s's agent, run by fleetwave demo as: bin/fleetwave agent --config agent.yaml
hub: %s
node: %s
token_file: token
state_dir: state
poll_wait: 5s
report_interval: 30s
`, node, hubURL, node)
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return &demoProcAgent{node: node, dir: dir, bin: bin, log: log}, nil
}

// run starts the agent process and starts it again whenever it exits,
// until ctx is done; then it stops it (SIGTERM, SIGKILL after 10s).
func (p *demoProcAgent) run(ctx context.Context) {
	for starts := 1; ctx.Err() == nil; starts++ {
		err := p.runOnce(ctx, starts)
		if ctx.Err() != nil {
			return
		}
		p.log.Warn().Err(err).Str("node", p.node).Int("starts", starts).Msg("agent process exited; starting it again")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (p *demoProcAgent) runOnce(ctx context.Context, starts int) error {
	logf, err := os.OpenFile(filepath.Join(p.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(p.bin, "agent", "--config", filepath.Join(p.dir, "agent.yaml"))
	cmd.Env = append(os.Environ(), agent.DemoBuildEnv+"=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	// a demo killed outright takes its agents with it (kept across the
	// agent's re-exec after an upgrade)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.log.Info().Str("node", p.node).Int("pid", cmd.Process.Pid).Int("starts", starts).Msg("agent process started")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			err = errors.New("exit status 0")
		}
		return err
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}
