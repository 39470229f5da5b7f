package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	flagSeed     = flag.Int64("chaos.seed", 0, "seed of the fault plan (0: derived from the clock, printed at start)")
	flagLong     = flag.Bool("chaos.long", false, "run every scenario (-chaos.runs times) instead of the short mix; also FLEETWAVE_CHAOS=long")
	flagRuns     = flag.Int("chaos.runs", 0, "runs per scenario (default 1 short, 3 long)")
	flagParallel = flag.Int("chaos.parallel", 2, "scenario runs at once (the five-crash makespans always run alone)")
	flagOnly     = flag.String("chaos.scenario", "", "run only the scenarios whose name contains this")
	flagKeep     = flag.Bool("chaos.keep", false, "keep every run's directory (logs, ledgers, journals, remote)")
)

// long reports whether the long variant was asked for.
func long() bool {
	return *flagLong || os.Getenv("FLEETWAVE_CHAOS") == "long"
}

func runsPerScenario() int {
	if *flagRuns > 0 {
		return *flagRuns
	}
	if long() {
		return 3
	}
	return 1
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	flag.Parse()
	// the suite's own Redis clients probe servers that are down on purpose
	redis.SetLogger(quietLogger{})
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// fleetwaveBinary builds ./cmd/fleetwave once per test binary
// ($FLEETWAVE_CHAOS_BIN names a prebuilt one instead), without the
// race detector (the processes under test need not be race-built, and a
// plain build is much faster), and returns its path.
func fleetwaveBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("FLEETWAVE_CHAOS_BIN"); p != "" {
			// a binary built elsewhere (e.g. of another revision)
			binPath, buildErr = filepath.Abs(p)
			return
		}
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, err = os.MkdirTemp("", "fwchaos-bin"); err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(buildDir, "fleetwave")
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			goBin = "go"
		}
		start := time.Now()
		cmd := exec.Command(goBin, "build", "-o", binPath, "./cmd/fleetwave")
		cmd.Dir = root
		// never race-built, whatever the caller's GOFLAGS say
		cmd.Env = withoutEnv(os.Environ(), "GOFLAGS")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/fleetwave: %v\n%s", err, out)
			return
		}
		fmt.Printf("chaos: built %s in %v\n", binPath, time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// moduleRoot walks up from the working directory (the package directory
// under go test) to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}
