package hub

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetwave/fleetwave/api"
)

// AgentArtifactsConfig is hub.yaml's agent_artifacts: the agent builds the
// hub serves to its agents for the built-in upgrade of the fleetwave-agent
// block (GET /api/v1/agent/nodes/{node}/artifacts/{version}).
//
//	agent_artifacts:
//	  dir: /var/lib/fleetwave/agent-builds
//
// Dir holds one file per build, named fleetwave-agent-<version>-<os>-<arch>
// (ArtifactName: the version exactly as the system BRC's target_version
// writes it, os and arch as Go names them: linux-amd64, linux-arm64, ...),
// and a SHA256SUMS file in the format of sha256sum(1) listing each of them:
//
//	cd /var/lib/fleetwave/agent-builds && sha256sum fleetwave-agent-* > SHA256SUMS
//
// The hub serves only the builds SHA256SUMS lists, with their sum; the
// agent refuses a download whose sha256 differs. Both are read at each
// request: builds are added without a restart.
type AgentArtifactsConfig struct {
	Dir string `yaml:"dir"`
}

// ArtifactSums is the name of the checksum file of the artifacts directory.
const ArtifactSums = "SHA256SUMS"

// maxSumsFile caps what the hub reads of SHA256SUMS.
const maxSumsFile = 1 << 20

// ArtifactName is the file name of the agent build of version for
// goos/goarch in the artifacts directory.
func ArtifactName(version, goos, goarch string) string {
	return "fleetwave-agent-" + version + "-" + goos + "-" + goarch
}

// check wants Dir, when set, to be a directory.
func (c AgentArtifactsConfig) check() error {
	if c.Dir == "" {
		return nil
	}
	fi, err := os.Stat(c.Dir)
	if err != nil {
		return fmt.Errorf("agent_artifacts.dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("agent_artifacts.dir: %s is not a directory", c.Dir)
	}
	return nil
}

// The hub serves agent builds.
var _ api.ArtifactHub = (*Hub)(nil)

// AgentArtifact opens the build of version for goos/goarch (the API checked
// that they name no path) for node's agent. A build that is missing, not a
// regular file or not listed in SHA256SUMS is 404 unknown_artifact.
func (h *Hub) AgentArtifact(_ context.Context, node, version, goos, goarch string) (*api.Artifact, error) {
	dir := h.cfg.AgentArtifacts.Dir
	if dir == "" {
		return nil, &api.Error{Status: http.StatusNotFound, Code: "unknown_artifact", Message: "this hub serves no agent builds (hub.yaml agent_artifacts.dir is not set)"}
	}
	name := ArtifactName(version, goos, goarch)
	unknown := &api.Error{Status: http.StatusNotFound, Code: "unknown_artifact", Message: fmt.Sprintf("no agent build of fleetwave %s for %s/%s", version, goos, goarch)}
	log := h.log.With().Str("node", node).Str("version", version).Str("artifact", name).Logger()
	sums, err := readArtifactSums(filepath.Join(dir, ArtifactSums))
	if errors.Is(err, fs.ErrNotExist) {
		log.Warn().Msg("agent build asked for, but the artifacts directory has no " + ArtifactSums)
		return nil, unknown
	}
	if err != nil {
		return nil, fmt.Errorf("agent artifacts: %w", err)
	}
	sum, listed := sums[name]
	f, err := os.Open(filepath.Join(dir, name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if listed {
			log.Warn().Msg("agent build listed in " + ArtifactSums + " but missing")
		}
		return nil, unknown
	case err != nil:
		return nil, fmt.Errorf("agent artifacts: %w", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !listed {
		f.Close()
		if err == nil {
			log.Warn().Bool("listed", listed).Msg("agent build not served: not a regular file, or not listed in " + ArtifactSums)
		}
		return nil, unknown
	}
	log.Info().Str("os", goos).Str("arch", goarch).Int64("bytes", fi.Size()).Msg("agent build served")
	return &api.Artifact{Name: name, SHA256: sum, ModTime: fi.ModTime(), Content: f}, nil
}

// readArtifactSums reads a sha256sum(1) file: "<hex sum>  <name>" or
// "<hex sum> *<name>" per line; blank lines, comments and lines that do not
// parse are skipped.
func readArtifactSums(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, maxSumsFile))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(strings.TrimLeft(name, " "), "*")
		if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 || name == "" || strings.ContainsAny(name, "/\\") {
			continue
		}
		out[name] = strings.ToLower(sum)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
