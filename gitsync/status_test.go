package gitsync

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

func TestStatusMessageTrailersRoundTrip(t *testing.T) {
	msg := StatusMessage("Status: wave 3\nof web", "Two nodes done.", Trailer{TrailerFence, "7"}, Trailer{TrailerRollout, "web-g4"}, Trailer{"bad key", "x"})
	want := "Status: wave 3 of web\n\nTwo nodes done.\n\nFleetwave-Fence: 7\nFleetwave-Rollout: web-g4\n"
	if msg != want {
		t.Fatalf("StatusMessage = %q, want %q", msg, want)
	}
	if got := ParseTrailers(msg); !slices.Equal(got, []Trailer{{TrailerFence, "7"}, {TrailerRollout, "web-g4"}}) {
		t.Fatalf("ParseTrailers = %v", got)
	}
	if got := ParseTrailers("Subject: with colon\n"); got != nil {
		t.Fatalf("a subject parsed as trailers: %v", got)
	}
	if got := ParseTrailers("Subject\n\nA body: with a colon\nand prose\n"); got != nil {
		t.Fatalf("a body parsed as trailers: %v", got)
	}

	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)
	c, err := r.CommitStatus(context.Background(), map[string][]byte{"status/summary.yaml": []byte("x\n")}, msg)
	if err != nil {
		t.Fatal(err)
	}
	info, err := r.CommitInfo(context.Background(), c)
	if err != nil || !slices.Equal(info.Trailers, []Trailer{{TrailerFence, "7"}, {TrailerRollout, "web-g4"}}) {
		t.Fatalf("CommitInfo trailers = %v, %v", info.Trailers, err)
	}
	if got := gittest.Git(t, strings.TrimPrefix(url, "file://"), "log", "-1", "--format=%(trailers:key=Fleetwave-Fence,valueonly)", "main"); got != "7" {
		t.Fatalf("git reads the fence trailer as %q", got)
	}
}

func TestWriteStatusOverwritesHumanEdits(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	var logs bytes.Buffer
	r := open(t, url, WithLogger(zerolog.New(&logs)))
	fetch(t, r)
	ctx := context.Background()
	summary := []byte("total: 2\ndone: 1\n")
	if _, err := r.CommitStatus(ctx, map[string][]byte{
		"status/summary.yaml": summary, "status/nodes/a.yaml": []byte("node: a\n"),
	}, "Status"); err != nil {
		t.Fatal(err)
	}

	// a person edits two status files, adds one, and changes an object
	gittest.Push(t, url, map[string]string{
		"status/summary.yaml": "total: 999\n", "status/nodes/a.yaml": "node: hacked\n",
		"status/extra.yaml": "mine\n", "nodes/b.json": "{}",
	}, nil, "Human edits status")

	res, err := r.WriteStatus(ctx, map[string][]byte{"status/summary.yaml": summary}, "Status")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"status/extra.yaml", "status/nodes/a.yaml", "status/summary.yaml"}; res.Commit == "" || !slices.Equal(res.Overwritten, want) {
		t.Fatalf("WriteStatus = %+v, want overwritten %v", res, want)
	}
	for p, want := range map[string]string{"status/summary.yaml": string(summary), "status/nodes/a.yaml": "node: a\n"} {
		if got, _ := gittest.ReadFile(t, url, p); got != want {
			t.Fatalf("%s = %q, want %q", p, got, want)
		}
	}
	if _, ok := gittest.ReadFile(t, url, "status/extra.yaml"); ok {
		t.Fatal("a file a person added under status/ survived")
	}
	if _, ok := gittest.ReadFile(t, url, "nodes/b.json"); !ok {
		t.Fatal("the person's object change was lost")
	}
	var steps []string
	for _, s := range res.Steps {
		steps = append(steps, s.Name)
	}
	if want := []string{"fetch", "edit", "encode", "store", "push", "record"}; !slices.Equal(steps, want) {
		t.Errorf("steps of the write = %v, want %v", steps, want)
	}
	if !strings.Contains(logs.String(), `"path":"status/summary.yaml"`) || !strings.Contains(logs.String(), "human edit under status/ overwritten") {
		t.Fatalf("no warning naming the path: %s", logs.String())
	}

	t.Run("with no foreign edit nothing is reported", func(t *testing.T) {
		res, err := r.WriteStatus(ctx, map[string][]byte{"status/summary.yaml": []byte("total: 3\n")}, "Status")
		if err != nil || res.Commit == "" || len(res.Overwritten) != 0 {
			t.Fatalf("WriteStatus = %+v, %v", res, err)
		}
	})
}

func TestWriteStatusWhileTheRemoteIsDown(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	r := open(t, url)
	fetch(t, r)
	ctx := context.Background()
	bare := strings.TrimPrefix(url, "file://")
	before := gittest.Head(t, url)
	files := map[string][]byte{"status/summary.yaml": []byte("total: 1\n")}

	if err := os.Rename(bare, bare+".away"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteStatus(ctx, files, "Status"); err == nil {
		t.Fatal("WriteStatus succeeded with the remote gone")
	}
	if err := os.Rename(bare+".away", bare); err != nil {
		t.Fatal(err)
	}
	if gittest.Head(t, url) != before {
		t.Fatal("the remote changed while it was away")
	}
	res, err := r.WriteStatus(ctx, files, "Status")
	if err != nil || res.Commit == "" || gittest.Head(t, url) != res.Commit {
		t.Fatalf("WriteStatus after the remote came back = %+v, %v", res, err)
	}
	if got, _ := gittest.ReadFile(t, url, "status/summary.yaml"); got != "total: 1\n" {
		t.Fatalf("status/summary.yaml = %q", got)
	}
	gittest.Git(t, bare, "fsck", "--strict", "--no-progress")
}

// TestAStaleLeaderCannotWriteOverANewerOne: a status commit whose fence is
// below the newest fence on the branch (written by a newer leader, from
// another mirror, maybe with human commits on top) is refused and pushes
// nothing.
func TestAStaleLeaderCannotWriteOverANewerOne(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	ctx := context.Background()
	old, newer := open(t, url), open(t, url)
	fetch(t, old)
	fetch(t, newer)
	write := func(r *Repo, fence, body string) error {
		_, err := r.CommitStatus(ctx, map[string][]byte{"status/summary.yaml": []byte(body)},
			StatusMessage("status", "", Trailer{TrailerFence, fence}))
		return err
	}
	if err := write(old, "4", "by the old leader\n"); err != nil {
		t.Fatal(err)
	}
	if err := write(newer, "5", "by the new leader\n"); err != nil {
		t.Fatal(err)
	}
	gittest.Push(t, url, map[string]string{"nodes/b.json": "{}"}, nil, "A human commit on top")
	head := gittest.Head(t, url)
	if err := write(old, "4", "stale\n"); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("stale write: err = %v, want ErrStaleFence", err)
	}
	if gittest.Head(t, url) != head {
		t.Fatal("the stale leader's commit was pushed")
	}
	if got, _ := gittest.ReadFile(t, url, "status/summary.yaml"); got != "by the new leader\n" {
		t.Fatalf("summary = %q", got)
	}
	if err := write(newer, "5", "still the new leader\n"); err != nil {
		t.Fatalf("the current leader is refused: %v", err)
	}
	if err := write(old, "6", "a later leader\n"); err != nil {
		t.Fatalf("a higher fence is refused: %v", err)
	}
}
