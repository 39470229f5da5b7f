package fleetsim

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/fleetwave/fleetwave/schema"
)

// The baselines of the scale report: the same work done by the obvious
// tool, in the same run, on the same machine and data, so each row of
// ours has a figure beside it that the machine's load moves alike.

// vetPerRun bounds the files of one cue vet run: 100,000 paths passed
// the size limit of one command line.
const vetPerRun = 5000

// cueBin is the cue binary: $CUE_BIN, else cue on PATH; "" when none.
func cueBin() string {
	if c := os.Getenv("CUE_BIN"); c != "" {
		return c
	}
	c, _ := exec.LookPath("cue")
	return c
}

// cueVet times `cue vet` of the repository in work: its YAML and JSON
// objects, each against its kind's definition of the schema fleetwave
// validates with (schema.VetArgs; its .cue objects cannot be vetted as
// data). It returns how many files it vetted, 0 when there is no cue
// binary; cue refusing a file is an error (the repository is valid).
func cueVet(ctx context.Context, dir, work string) (took time.Duration, files int, err error) {
	cue := cueBin()
	if cue == "" {
		return 0, 0, nil
	}
	schemaFile := filepath.Join(dir, "schema.cue")
	if err := os.WriteFile(schemaFile, schema.Source(), 0o644); err != nil {
		return 0, 0, err
	}
	var paths []string
	err = filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(work, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	runs := schema.VetArgs(schemaFile, work, paths, vetPerRun)
	start := time.Now()
	for _, args := range runs {
		if out, err := exec.CommandContext(ctx, cue, args...).CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("cue vet -d %s (%d files): %w\n%.2000s", args[3], len(args)-5, err, out)
		}
		files += len(args) - 5
	}
	return time.Since(start), files, nil
}

// gitCLIStatus times the git CLI making a status commit of n documents on
// the same remote: in a clone of its status branch, the first n documents
// of status/nodes/ (by name) each get a line more, then `git add -A`, `git
// commit` and `git push` (to a branch of its own, which the hub does not
// read) run one after the other: timed from the first file written to the
// push's end, as the hub's write is from its first document built. The
// clone is not timed. It returns the
// time and the documents changed (fewer than n when there are fewer).
func gitCLIStatus(ctx context.Context, dir, remote string, n int) (time.Duration, int, error) {
	clone := filepath.Join(dir, "git-cli-status")
	defer os.RemoveAll(clone)
	if _, err := git(ctx, dir, "clone", "-q", "--single-branch", "--branch", "fleetwave/status", remote, clone); err != nil {
		return 0, 0, err
	}
	nodes := filepath.Join(clone, "status", "nodes")
	entries, err := os.ReadDir(nodes) // sorted by name
	if err != nil {
		return 0, 0, err
	}
	n = min(n, len(entries))
	start := time.Now()
	for _, e := range entries[:n] {
		f, err := os.OpenFile(filepath.Join(nodes, e.Name()), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return 0, 0, err
		}
		_, err = f.WriteString("# changed by the git CLI baseline\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, 0, err
		}
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", fmt.Sprintf("baseline: %d status documents", n)},
		{"push", "-q", "origin", "HEAD:refs/heads/baseline/git-cli-status"}} {
		if _, err := git(ctx, clone, args...); err != nil {
			return 0, 0, fmt.Errorf("git CLI baseline: %w", err)
		}
	}
	return time.Since(start), n, nil
}
