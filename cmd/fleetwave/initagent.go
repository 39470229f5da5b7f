package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/examples"
)

// agentBlockFiles are the system BRC and its block as `fleetwave init`
// seeds them: the copies of examples/fleet, whose block runs the agent's
// built-in upgrade (agent.BuiltinUpgrade).
var agentBlockFiles = []string{"blocks/fleetwave-agent.cue", "brc/fleetwave-agent.cue"}

// seedAgentUpgrade writes the system BRC and the fleetwave-agent block of
// examples/fleet into the repository schema.Scaffold just wrote, the BRC
// targeting the version of this binary (as Scaffold does), so that a new
// fleet upgrades its agents with the built-in upgrade. Once the scaffold's
// own copies are the same files it changes nothing.
func seedAgentUpgrade(dir string) error {
	for _, p := range agentBlockFiles {
		b, err := fs.ReadFile(examples.FS, "fleet/"+p)
		if err != nil {
			return fmt.Errorf("scaffold: %w", err)
		}
		if p == "brc/fleetwave-agent.cue" {
			// the system BRC starts at the version of the binary that wrote
			// it, so a fresh fleet does not upgrade its agents at once
			b = bytes.Replace(b, []byte(`target_version: "0.1.0"`), []byte("target_version: "+strconv.Quote(fleetwave.Version)), 1)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), b, 0o644); err != nil {
			return fmt.Errorf("scaffold: %w", err)
		}
	}
	return nil
}
