package gitsync

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// startWatch runs r.Watch until the test ends and returns its notifications.
func startWatch(t *testing.T, r *Repo) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kicks := make(chan struct{}, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- r.Watch(ctx, func() {
			select {
			case kicks <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Watch returned %v after cancel", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	})
	// the watch is set up asynchronously: give it a moment before pushing
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("Watch: %v", err)
	default:
	}
	return kicks
}

func waitKick(t *testing.T, kicks <-chan struct{}) {
	t.Helper()
	select {
	case <-kicks:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after a push")
	}
}

func TestWatchNotifiesOnPush(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)
	kicks := startWatch(t, r)

	pushed := gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "Add b")
	waitKick(t, kicks)
	head, changed, err := r.Fetch(context.Background())
	if err != nil || !changed || head != pushed {
		t.Fatalf("Fetch after notify = %s, %v, %v; want %s", head, changed, err, pushed)
	}

	t.Run("a new nested branch and pack-refs are seen too", func(t *testing.T) {
		bare := strings.TrimPrefix(url, "file://")
		work := filepath.Join(t.TempDir(), "w")
		gittest.Git(t, "", "clone", "--quiet", url, work)
		gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:refs/heads/feature/x")
		waitKick(t, kicks)
		gittest.Git(t, bare, "pack-refs", "--all")
		waitKick(t, kicks)
		// and main moving after its ref was packed
		pushed := gittest.Push(t, url, map[string]string{"nodes/c.json": "{}"}, nil, "Add c")
		waitKick(t, kicks)
		if head := fetch(t, r); head != pushed {
			t.Fatalf("head %s, want %s", head, pushed)
		}
	})
}

func TestWatchRefusesRemoteURLsAtOnce(t *testing.T) {
	for _, u := range []string{"https://git.example.com/fleet.git", "ssh://git@git.example.com/fleet.git", "file://otherhost/srv/fleet.git", "relative/path"} {
		t.Run(u, func(t *testing.T) {
			r := &Repo{remote: u}
			err := r.Watch(context.Background(), func() {})
			if !errors.Is(err, ErrWatchUnsupported) {
				t.Fatalf("Watch(%s) = %v, want ErrWatchUnsupported", u, err)
			}
		})
	}
}

func TestWatchFindsTheGitDirOfAWorkTree(t *testing.T) {
	isolateGit(t)
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "--quiet", "--initial-branch=main")
	got, err := localGitDir(dir)
	if err != nil || got != filepath.Join(dir, ".git") {
		t.Fatalf("localGitDir(work tree) = %q, %v", got, err)
	}
	got, err = localGitDir(gittest.URL(filepath.Join(dir, ".git")))
	if err != nil || got != filepath.Join(dir, ".git") {
		t.Fatalf("localGitDir(file URL of .git) = %q, %v", got, err)
	}
	if _, err := localGitDir(t.TempDir()); err == nil || errors.Is(err, ErrWatchUnsupported) {
		t.Fatalf("a plain directory: %v", err)
	}
}

// TestDebouncerFiresAtOnceThenFoldsTheBurst: a hint after a quiet spell
// fires at once; the hints that follow it wait for quiet, at most maxWait
// after the first of them; once they fired and quiet passed, the next hint
// fires at once again.
func TestDebouncerFiresAtOnceThenFoldsTheBurst(t *testing.T) {
	d := debouncer{quiet: 50 * time.Millisecond, maxWait: 500 * time.Millisecond}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	if w := d.hint(at(0)); w != 0 {
		t.Fatalf("the first hint waits %s, want none", w)
	}
	d.fire(at(0))
	if w := d.hint(at(10)); w != 50*time.Millisecond {
		t.Fatalf("a hint 10 ms after a call waits %s, want the quiet", w)
	}
	if w := d.hint(at(490)); w != 20*time.Millisecond {
		t.Fatalf("a hint near the cap waits %s", w)
	}
	if w := d.hint(at(1000)); w != 0 {
		t.Fatalf("a hint past the cap waits %s", w)
	}
	d.fire(at(1000))
	if w := d.hint(at(1030)); w != 50*time.Millisecond {
		t.Fatalf("a hint 30 ms after the burst's call waits %s, want the quiet", w)
	}
	d.fire(at(1080))
	if w := d.hint(at(1200)); w != 0 {
		t.Fatalf("a hint after a quiet spell waits %s, want none", w)
	}
}
