package api

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// ArtifactHub is the part of a hub that serves agent builds to its agents
// (the built-in upgrade of the fleetwave-agent block). It is optional: the
// API answers 404 unknown_artifact for a hub that does not implement it.
type ArtifactHub interface {
	// AgentArtifact opens the build of fleetwave version for goos/goarch
	// that node's agent asked for. An unknown build is an *Error 404
	// unknown_artifact. The API closes the content.
	AgentArtifact(ctx context.Context, node, version, goos, goarch string) (*Artifact, error)
}

// Artifact is one agent build as the hub serves it.
type Artifact struct {
	// Name is the build's file name (fleetwave-agent-<version>-<os>-<arch>).
	Name string
	// SHA256 is the hex sha256 the hub holds for the build (its
	// SHA256SUMS); the agent checks what it received against it.
	SHA256  string
	ModTime time.Time
	Content io.ReadSeekCloser
}

// Headers of an artifact answer.
const (
	// ArtifactSHA256Header carries the build's hex sha256.
	ArtifactSHA256Header = "X-Fleetwave-Sha256"
	// ArtifactVersionHeader carries the build's version.
	ArtifactVersionHeader = "X-Fleetwave-Version"
)

// artifactWriteTimeout bounds the answer of a build, which may take much
// longer than a JSON answer over a slow link.
const artifactWriteTimeout = 15 * time.Minute

var (
	// artifactVersion is a version as a BRC's target_version holds it,
	// restricted to what can name a file: no slash, no "..".
	artifactVersion = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$`)
	// artifactPlatform is a GOOS or GOARCH value.
	artifactPlatform = regexp.MustCompile(`^[a-z0-9]{1,16}$`)
)

// artifact answers GET /api/v1/agent/nodes/{node}/artifacts/{version}
// ?os=&arch=: the build streamed (ranges and HEAD work), its sha256 in
// X-Fleetwave-Sha256.
func (s *server) artifact(w http.ResponseWriter, r *http.Request, node string) {
	version := r.PathValue("version")
	goos, goarch := r.URL.Query().Get("os"), r.URL.Query().Get("arch")
	switch {
	case !artifactVersion.MatchString(version) || strings.Contains(version, ".."):
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: "version " + quote(version) + " is not a build version",
			Details: map[string]string{"field": "version"}})
		return
	case !artifactPlatform.MatchString(goos):
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: "os " + quote(goos) + ": want a GOOS value such as linux",
			Details: map[string]string{"field": "os"}})
		return
	case !artifactPlatform.MatchString(goarch):
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: "arch " + quote(goarch) + ": want a GOARCH value such as amd64",
			Details: map[string]string{"field": "arch"}})
		return
	}
	ah, ok := s.hub.(ArtifactHub)
	if !ok {
		writeJSONError(w, &Error{Status: http.StatusNotFound, Code: "unknown_artifact", Message: "this hub serves no agent builds"})
		return
	}
	a, err := ah.AgentArtifact(r.Context(), node, version, goos, goarch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer a.Content.Close()
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(artifactWriteTimeout))
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set(ArtifactSHA256Header, a.SHA256)
	h.Set(ArtifactVersionHeader, version)
	http.ServeContent(w, r, a.Name, a.ModTime, a.Content)
}
