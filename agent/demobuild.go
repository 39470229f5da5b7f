package agent

// Demo builds: a second agent version without a compiler.
//
// `fleetwave demo` shows the built-in upgrade on a machine that has the
// fleetwave binary and nothing to build another version with. It makes
// its "builds" by copying its own binary and appending a trailer that
// names a version (WriteDemoBuild): the copies are different files, with
// different sha256 sums, that the hub serves and the agent downloads,
// tries and re-executes like any build. An agent started with DemoBuildEnv
// set to 1 (the demo sets it for the agents it runs as processes, and only
// for them) takes its version from its own binary's trailer at start
// (DemoBuildVersion); without the variable a trailer is ignored. A
// program's code does not change between two demo builds: only the
// version it reports does.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// DemoBuildEnv, set to 1, makes `fleetwave agent` take its version from
// its binary's demo-build trailer (a demo device: see WriteDemoBuild).
const DemoBuildEnv = "FLEETWAVE_DEMO_BUILD"

// demoTrailer starts the line appended to a demo build; the version and a
// newline end it.
const demoTrailer = "\n#fleetwave-demo-build version="

// maxDemoTrailer bounds the tail read for a trailer.
const maxDemoTrailer = 128

// WriteDemoBuild writes to dst (mode 0755) the program at src, without
// the demo-build trailer it may have, followed by a trailer naming
// version. The result runs as src does (executables ignore trailing
// bytes) and reports version when started with DemoBuildEnv=1.
func WriteDemoBuild(src, dst, version string) error {
	if !validBuildVersion(version) {
		return fmt.Errorf("demo build: version %q cannot name a build", version)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("demo build: %w", err)
	}
	if i := trailerAt(b); i >= 0 {
		b = b[:i]
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("demo build: %w", err)
	}
	_, err = f.Write(append(b, demoTrailer+version+"\n"...))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("demo build %s: %w", dst, err)
	}
	return nil
}

// DemoBuildVersion returns the version the demo-build trailer of the
// program at path names; ok is false when it has none.
func DemoBuildVersion(path string) (version string, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", false, err
	}
	off := max(0, fi.Size()-maxDemoTrailer)
	tail := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(tail, off); err != nil && !errors.Is(err, io.EOF) {
		return "", false, err
	}
	i := trailerAt(tail)
	if i < 0 {
		return "", false, nil
	}
	v := strings.TrimSuffix(string(tail[i+len(demoTrailer):]), "\n")
	if !validBuildVersion(v) {
		return "", false, fmt.Errorf("%s: demo-build trailer names no valid version (%q)", path, v)
	}
	return v, true, nil
}

// trailerAt is where b's demo-build trailer starts, -1 without one: it is
// the last line of b.
func trailerAt(b []byte) int {
	if !bytes.HasSuffix(b, []byte("\n")) {
		return -1
	}
	i := bytes.LastIndex(b, []byte(demoTrailer))
	if i < 0 || bytes.IndexByte(b[i+len(demoTrailer):len(b)-1], '\n') >= 0 {
		return -1
	}
	return i
}
